"""Semantic conventions: span names and attribute keys, exactly as upstream ``agentlightning.semconv``.

Keeping these strings identical means spans produced by upstream tracers and by agl-stream are
interchangeable: the same adapters, queries and dashboards read both.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel

# Span names.
AGL_ANNOTATION = "agentlightning.annotation"
AGL_MESSAGE = "agentlightning.message"
AGL_OBJECT = "agentlightning.object"
AGL_EXCEPTION = "agentlightning.exception"
AGL_OPERATION = "agentlightning.operation"
AGL_REWARD = "agentlightning.reward"
AGL_VIRTUAL = "agentlightning.virtual"


class LightningSpanAttributes(str, Enum):
    """Attribute keys (or key prefixes) that agl spans carry."""

    REWARD = "agentlightning.reward"
    LINK = "agentlightning.link"
    TAG = "agentlightning.tag"
    MESSAGE_BODY = "agentlightning.message.body"
    OBJECT_TYPE = "agentlightning.object.type"
    OBJECT_LITERAL = "agentlightning.object.literal"
    OBJECT_JSON = "agentlightning.object.json"
    OPERATION_NAME = "agentlightning.operation.name"
    OPERATION_INPUT = "agentlightning.operation.input"
    OPERATION_OUTPUT = "agentlightning.operation.output"


class LightningResourceAttributes(str, Enum):
    """OpenTelemetry *resource* attributes that tie a span to a rollout attempt."""

    ROLLOUT_ID = "agentlightning.rollout_id"
    ATTEMPT_ID = "agentlightning.attempt_id"
    SPAN_SEQUENCE_ID = "agentlightning.span_sequence_id"
    TRACER_NAME = "agentlightning.tracer.name"


class RewardAttributes(str, Enum):
    """Sub-keys of ``agentlightning.reward.{i}``."""

    REWARD_NAME = "name"
    REWARD_VALUE = "value"


class LinkAttributes(str, Enum):
    """Sub-keys of ``agentlightning.link.{i}``; ``trace_id`` / ``span_id`` are reserved key_match values."""

    KEY_MATCH = "key_match"
    VALUE_MATCH = "value_match"


class RewardPydanticModel(BaseModel):
    name: str
    value: float


class LinkPydanticModel(BaseModel):
    key_match: str
    value_match: str


# OpenTelemetry GenAI conventions used for LLM-call spans, plus the token-id attributes that
# upstream's triplet adapter reads (captured from vLLM's ``return_token_ids``).
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_TYPE = "gen_ai.request.type"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_USAGE_PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
GEN_AI_USAGE_COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
PROMPT_TOKEN_IDS = "prompt_token_ids"
RESPONSE_TOKEN_IDS = "response_token_ids"
RESPONSE_LOGPROBS = "response_logprobs"
POLICY_VERSION = "agl.policy_version"
LLM_CALL_SPAN_NAME = "openai.chat.completion"

# agl-stream additions (not upstream's): intermediate rewards, e.g. AIR's (``agl_stream.air``). A reward span
# marked intermediate is matched to the LLM call that ended last before ``anchor_time`` (the tool call that
# earned it started then), never takes the place of an ordinary reward, and is never the final reward.
REWARD_INTERMEDIATE = "agl.reward.intermediate"
REWARD_ANCHOR_TIME = "agl.reward.anchor_time"
