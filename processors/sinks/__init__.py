"""Idempotent Kafka -> ClickHouse sinks, one per topic; see :mod:`processors.sinks.service` for running them."""

from processors.sinks.service import SinkService, run_sinks
from processors.sinks.sink import Sink, SinkOptions, SinkStats, SinkStopped
from processors.sinks.specs import SINKS, SinkSpec

__all__ = ["SINKS", "Sink", "SinkOptions", "SinkService", "SinkSpec", "SinkStats", "SinkStopped", "run_sinks"]
