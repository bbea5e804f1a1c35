"""agl-stream: Agent Lightning's concepts over an event-streaming pipeline.

This package is what agents import. It must stay light: importing it never pulls torch, faust,
chdb or litellm (a test enforces this).
"""

from agl_stream import semconv
from agl_stream.config import Settings, SettingsError, load_settings
from agl_stream.ids import generate_attempt_id, generate_rollout_id, generate_span_id, generate_trace_id
from agl_stream.serialization import RecordError, decode, encode
from agl_stream.types import *  # noqa: F401,F403
from agl_stream.types import __all__ as _types_all

# Upstream-style top-level surface: ``agl.emit_reward``, ``@agl.rollout``, ``agl.LitAgent``...
from agl_stream.client import EnqueueRolloutRequest, StoreClient
from agl_stream.emitter import (
    emit_annotation,
    emit_exception,
    emit_message,
    emit_object,
    emit_reward,
    find_final_reward,
    find_reward_spans,
    operation,
)
from agl_stream.litagent import FunctionalLitAgent, LitAgent, llm_rollout, prompt_rollout, rollout
from agl_stream.runner import Hook, LitAgentRunner
from agl_stream.tracer import OtelTracer, create_tracer

__version__ = "0.1.0"

__all__ = [
    "EnqueueRolloutRequest",
    "FunctionalLitAgent",
    "Hook",
    "LitAgent",
    "LitAgentRunner",
    "OtelTracer",
    "StoreClient",
    "create_tracer",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "find_final_reward",
    "find_reward_spans",
    "llm_rollout",
    "operation",
    "prompt_rollout",
    "rollout",
    "RecordError",
    "Settings",
    "SettingsError",
    "decode",
    "encode",
    "generate_attempt_id",
    "generate_rollout_id",
    "generate_span_id",
    "generate_trace_id",
    "load_settings",
    "semconv",
    *_types_all,
]
