"""Which topic feeds which table: one sink per topic, each in its own consumer group ``agl-sink-<name>``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import pyarrow as pa
from pydantic import BaseModel

from agl_stream.types import (
    AttemptEvent,
    DatasetLine,
    DeadLetter,
    ResourcesUpdate,
    RolloutSnapshot,
    Span,
    TrainingRun,
    TrainingStep,
    Trajectory,
    Worker,
)
from agl_stream_processors.clickhouse import rows
from agl_stream_processors.clickhouse.columns import ColumnBatch, TableBuilder
from agl_stream_processors.clickhouse.span_columns import SpanColumns
from agl_stream_processors.clickhouse.spans import SPAN_SCHEMA, span_to_row

RowsOf = Callable[[Any, Optional[int]], list[dict[str, Any]]]

#: a sink nothing waits on lets the broker gather this much (or its fetch wait, 500 ms) before answering: on
#: Apache Kafka a fetch with fetch_min_bytes 1 is answered at every record, one request per record or two for
#: each of ten sinks while rollouts flow
BULK_FETCH_MIN_BYTES = 256 * 1024


@dataclass(frozen=True)
class SinkSpec:
    name: str
    topic: str  # catalog short name
    model: type[BaseModel]
    table: str
    schema: pa.Schema
    to_rows: RowsOf
    #: seconds a batch may wait to fill: short where something waits on the row (an attempt's
    #: triplets, a rollout's status), long where rows are only analysed (fewer, larger inserts)
    max_wait: float = 0.5
    #: something waits on the rows: the consumer's fetch wait is the broker's hop wait (agl_stream.kafka.hop_fetch_wait_ms),
    #: else aiokafka's 500 ms
    latency_critical: bool = False
    #: the consumer's fetch_min_bytes; None: 1 where something waits on the rows, else BULK_FETCH_MIN_BYTES
    fetch_min_bytes: Optional[int] = None
    #: a batch's table builder; None: a :class:`ColumnBatch` of ``to_rows`` dicts (see Sink._rows)
    builder: Optional[Callable[[], TableBuilder]] = None

    @property
    def min_fetch_bytes(self) -> int:
        if self.fetch_min_bytes is not None:
            return self.fetch_min_bytes
        return 1 if self.latency_critical else BULK_FETCH_MIN_BYTES

    @property
    def group_id(self) -> str:
        return f"agl-sink-{self.name}"

    def new_builder(self) -> TableBuilder:
        return self.builder() if self.builder is not None else ColumnBatch(self.schema)


def _span_rows(span: Span, record_timestamp_ms: Optional[int]) -> list[dict[str, Any]]:
    return [span_to_row(span, record_timestamp_ms)]


SINKS: dict[str, SinkSpec] = {
    spec.name: spec
    for spec in (
        SinkSpec("spans", "spans", Span, "spans", SPAN_SCHEMA, _span_rows, max_wait=1.0, builder=SpanColumns),
        SinkSpec("attempts", "attempts", AttemptEvent, "attempts", rows.ATTEMPT_SCHEMA, rows.attempt_rows),
        # history only: readers of live and recent rollouts follow agl.rollouts (the store client's view)
        SinkSpec("rollouts", "rollouts", RolloutSnapshot, "rollouts", rows.ROLLOUT_SCHEMA, rows.rollout_rows, max_wait=1.0),
        SinkSpec("triplets", "triplets", Trajectory, "triplets", rows.TRIPLET_SCHEMA, rows.triplet_rows, max_wait=0.2,
                 latency_critical=True),
        SinkSpec("resources", "resources", ResourcesUpdate, "resources", rows.RESOURCES_SCHEMA, rows.resources_rows),
        SinkSpec("workers", "workers", Worker, "workers", rows.WORKER_SCHEMA, rows.worker_rows, max_wait=2.0),
        SinkSpec("dlq", "dlq", DeadLetter, "dead_letters", rows.DEAD_LETTER_SCHEMA, rows.dead_letter_rows),
        SinkSpec("training_steps", "training_steps", TrainingStep, "training_steps", rows.TRAINING_STEP_SCHEMA,
                 rows.training_step_rows),  # fmt: skip
        SinkSpec("training_runs", "training_runs", TrainingRun, "training_runs", rows.TRAINING_RUN_SCHEMA,
                 rows.training_run_rows, max_wait=0.2, fetch_min_bytes=1),  # fmt: skip
        SinkSpec("datasets", "datasets", DatasetLine, "datasets", rows.DATASET_SCHEMA, rows.dataset_rows, max_wait=0.2,
                 latency_critical=True),  # an upload waits for its rows
    )
}

DEAD_LETTER_SPEC = SINKS["dlq"]


def resolve(names: Optional[list[str]]) -> list[SinkSpec]:
    """Specs for ``names`` (all when empty); unknown names raise ``KeyError`` listing the known ones."""
    if not names:
        return list(SINKS.values())
    unknown = [n for n in names if n not in SINKS]
    if unknown:
        raise KeyError(f"unknown sink(s) {unknown}; known: {sorted(SINKS)}")
    return [SINKS[n] for n in dict.fromkeys(names)]
