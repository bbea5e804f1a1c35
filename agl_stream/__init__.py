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

__version__ = "0.1.0"

__all__ = [
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
