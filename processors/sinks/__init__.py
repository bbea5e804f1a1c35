"""Idempotent Kafka -> ClickHouse sinks, one per topic; see :mod:`agl_stream_processors.sinks.service` for running them."""

from agl_stream_processors.sinks.service import SinkService, run_sinks
from agl_stream_processors.sinks.sink import Sink, SinkOptions, SinkStats, SinkStopped
from agl_stream_processors.sinks.specs import SINKS, SinkSpec

__all__ = ["SINKS", "Sink", "SinkOptions", "SinkService", "SinkSpec", "SinkStats", "SinkStopped", "run_sinks"]
