"""Emitters with upstream Agent Lightning's names and span formats."""

from agl_stream.emitter.annotation import emit_annotation, emit_exception, emit_message, emit_object
from agl_stream.emitter.operation import OperationContext, operation
from agl_stream.emitter.readers import get_message_value, get_object_value
from agl_stream.emitter.reward import (
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
)

__all__ = [
    "OperationContext",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "operation",
]
