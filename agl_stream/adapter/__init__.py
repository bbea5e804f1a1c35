"""Adapters: pure functions of an attempt's span list into training data (upstream ``agentlightning.adapter``).

They import nothing heavy, so algorithms and users can run them offline on spans read from a topic,
a file or ClickHouse, and the triplet stream processor runs the very same code.
"""

from agl_stream.adapter.base import Adapter, TraceAdapter, group_spans_by_attempt
from agl_stream.adapter.factory import build_adapter, parse_adapter_spec
from agl_stream.adapter.messages import OpenAIMessages, TraceToMessages
from agl_stream.adapter.proxy import LlmProxyTraceToTriplet
from agl_stream.adapter.triplet import RewardMatchPolicy, TracerTraceToTriplet, Transition, TraceTree
from agl_stream.adapter.rewards import find_final_reward, reward_of
from agl_stream.adapter.upstream import OtelTraceAdapter, TraceToTripletBase

__all__ = [
    "Adapter",
    "LlmProxyTraceToTriplet",
    "OtelTraceAdapter",
    "OpenAIMessages",
    "RewardMatchPolicy",
    "TraceAdapter",
    "TraceToMessages",
    "TraceToTripletBase",
    "TraceTree",
    "TracerTraceToTriplet",
    "Transition",
    "build_adapter",
    "parse_adapter_spec",
    "find_final_reward",
    "group_spans_by_attempt",
    "reward_of",
]
