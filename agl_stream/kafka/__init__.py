"""Thin async Kafka clients shared by every service (aiokafka underneath)."""

from agl_stream.kafka import _offset_fetch
from agl_stream.kafka._consumer import Decoded, RecordConsumer, Rejected, read_to_fetched_end
from agl_stream.kafka._dead_letters import DeadLetterWriter
from agl_stream.kafka._flavour import hop_fetch_wait_ms, is_tansu
from agl_stream.kafka._offsets import OffsetTracker
from agl_stream.kafka._options import KAFKA_HOP_FETCH_WAIT_MS, LOW_LATENCY_FETCH_WAIT_MS, connection_options
from agl_stream.kafka._producer import KafkaUnavailable, RecordProducer, is_retriable, start_with_retry
from agl_stream.kafka._retry import retrying_while_unreachable

_offset_fetch.install()  # aiokafka reads "no committed offset" where the coordinator said "not now"

__all__ = [
    "KAFKA_HOP_FETCH_WAIT_MS",
    "LOW_LATENCY_FETCH_WAIT_MS",
    "DeadLetterWriter",
    "Decoded",
    "KafkaUnavailable",
    "OffsetTracker",
    "RecordConsumer",
    "RecordProducer",
    "Rejected",
    "connection_options",
    "hop_fetch_wait_ms",
    "is_retriable",
    "is_tansu",
    "read_to_fetched_end",
    "retrying_while_unreachable",
    "start_with_retry",
]
