"""Dead-letter building: reason, original bytes, source position, explicit cut of oversized payloads."""

from __future__ import annotations

from aiokafka.structs import ConsumerRecord

from agl_stream.config import Settings
from agl_stream.kafka import DeadLetterWriter


def record(value: bytes) -> ConsumerRecord:
    return ConsumerRecord("t.spans", 1, 42, 0, 0, b"ro-1", value, None, len(b"ro-1"), len(value), [])  # type: ignore[arg-type]


def test_dead_letter_keeps_reason_bytes_and_position(settings: Settings) -> None:
    writer = DeadLetterWriter(settings.topic("dlq"), None, processor="triplets")
    letter = writer.letter("value is not valid JSON", record=record(b"\x00junk"), kind="invalid_record")
    assert (letter.source_topic, letter.partition, letter.offset, letter.key) == ("t.spans", 1, 42, b"ro-1")
    assert (letter.payload, letter.reason, letter.processor) == (b"\x00junk", "value is not valid JSON", "triplets")
    assert writer.counts == {"invalid_record": 1} and writer.topic == settings.topic("dlq")


def test_oversized_payloads_are_cut_with_the_reason_saying_so(settings: Settings) -> None:
    writer = DeadLetterWriter(settings.topic("dlq"), None, processor="p", max_request_size=64 * 1024)
    big = b"x" * (200 * 1024)
    letter = writer.letter("too big", record=record(big))
    assert 0 < len(letter.payload) < 64 * 1024 and big.startswith(letter.payload)
    assert f"payload cut from {len(big)}" in letter.reason
