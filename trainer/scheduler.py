"""The task scheduler: a dataset becomes ``agl.tasks`` records, in GRPO groups, with bounded rollouts in flight.

Each dataset item is enqueued ``group_size`` times (one rollout each) sharing
``metadata["group_id"]`` (and ``metadata["group_size"]``) so the learner can normalize rewards
within the group. Items are visited ``epochs`` times, reshuffled per epoch with a seed, and the
scheduler keeps at most ``max_in_flight`` of its rollouts unfinished: it follows the
``agl.rollouts`` snapshots written by the state machine and counts a rollout finished when its
status is terminal (succeeded, failed, cancelled). A whole group is enqueued at once.

Datasets: a Python list, a ``.jsonl`` file (one JSON value per line) or a ``.parquet`` file (one
row per item, as a dict).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.config import Settings
from agl_stream.ids import generate_attempt_id, generate_group_id, generate_rollout_id
from agl_stream.types import Attempt, AttemptedRollout, RolloutConfig, RolloutSnapshot
from agl_stream.types.core import TERMINAL_ROLLOUT_STATUSES, RolloutMode

logger = logging.getLogger(__name__)


def load_dataset(source: Union[str, Path, Sequence[Any]]) -> list[Any]:
    """Items of a list, a JSONL file or a Parquet file."""
    if not isinstance(source, (str, Path)):
        return list(source)
    path = Path(source)
    if path.suffix == ".jsonl":
        with path.open() as fh:
            return [json.loads(line) for line in fh if line.strip()]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix == ".json":
        data = json.loads(path.read_text())
        if not isinstance(data, list):
            raise ValueError(f"{path}: a .json dataset must hold a list")
        return data
    raise ValueError(f"{path}: unsupported dataset format (use .jsonl, .json or .parquet)")


class SchedulerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dataset: Optional[str] = Field(default=None, description=".jsonl / .json / .parquet path")
    mode: RolloutMode = "train"
    group_size: int = Field(default=4, ge=1)
    epochs: int = Field(default=1, ge=1)
    shuffle: bool = True
    seed: int = 0
    max_in_flight: int = Field(default=64, ge=1)
    resources_id: Optional[str] = Field(default=None, description="None: runners use the latest resources")
    rollout_config: RolloutConfig = Field(default_factory=RolloutConfig)


class InFlight:
    """Follows ``agl.rollouts`` and counts which of our rollouts have not reached a terminal status."""

    def __init__(self, settings: Settings) -> None:
        from agl_stream.kafka import RecordConsumer

        self.consumer = RecordConsumer(settings, [settings.topic("rollouts")], group_id=None, auto_offset_reset="earliest")
        self._open: set[str] = set()
        self._finished_early: set[str] = set()
        self._changed = asyncio.Event()
        self._task: Optional[asyncio.Task[None]] = None
        self.finished = 0

    @property
    def count(self) -> int:
        return len(self._open)

    def add(self, rollout_ids: Sequence[str]) -> None:
        for rid in rollout_ids:
            if rid in self._finished_early:
                self._finished_early.discard(rid)
                self.finished += 1
            else:
                self._open.add(rid)

    async def start(self) -> None:
        await self.consumer.start()
        self._task = asyncio.create_task(self._follow(), name="agl-scheduler-inflight")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.consumer.stop(commit=False)

    async def wait_below(self, limit: int) -> None:
        while self.count >= limit:
            self._changed.clear()
            await self._changed.wait()

    async def wait_empty(self, timeout: Optional[float] = None) -> bool:
        async def _wait() -> None:
            while self._open:
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(_wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def _follow(self) -> None:
        while True:
            good, _bad = await self.consumer.get_decoded(RolloutSnapshot, timeout=0.5)
            for item in good:
                rollout = item.value.rollout
                if rollout.status in TERMINAL_ROLLOUT_STATUSES:
                    if rollout.rollout_id in self._open:
                        self._open.discard(rollout.rollout_id)
                        self.finished += 1
                        self._changed.set()
                    else:  # the snapshot can beat our own bookkeeping
                        self._finished_early.add(rollout.rollout_id)
                        if len(self._finished_early) > 100_000:
                            self._finished_early.clear()


class TaskScheduler:
    def __init__(
        self,
        settings: Settings,
        producer: Any,  # a started agl_stream.kafka.RecordProducer
        items: Sequence[Any],
        config: SchedulerConfig,
        *,
        in_flight: Optional[InFlight] = None,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.items = list(items)
        self.config = config
        self.in_flight = in_flight or InFlight(settings)
        self._own_in_flight = in_flight is None
        self.epoch = 0
        self.cursor = 0  # next item index (in the epoch's order)
        self.enqueued = 0
        self.done = False

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "cursor": self.cursor, "enqueued": self.enqueued}

    def restore(self, state: dict[str, Any]) -> None:
        self.epoch = int(state.get("epoch", 0))
        self.cursor = int(state.get("cursor", 0))
        self.enqueued = int(state.get("enqueued", 0))

    def order(self, epoch: int) -> list[int]:
        idx = list(range(len(self.items)))
        if self.config.shuffle:
            random.Random(self.config.seed * 100_003 + epoch).shuffle(idx)
        return idx

    def build_group(self, item: Any, *, epoch: int, index: int) -> list[AttemptedRollout]:
        group_id = generate_group_id()
        out = []
        for member in range(self.config.group_size):
            rid = generate_rollout_id()
            out.append(
                AttemptedRollout(
                    rollout_id=rid,
                    input=item,
                    mode=self.config.mode,
                    resources_id=self.config.resources_id,
                    config=self.config.rollout_config,
                    metadata={"group_id": group_id, "group_size": self.config.group_size, "group_member": member,
                              "epoch": epoch, "item_index": index},
                    attempt=Attempt(rollout_id=rid, attempt_id=generate_attempt_id(), sequence_id=1),
                )
            )
        return out

    async def run(self) -> None:
        """Enqueue every group of every epoch, waiting while too many rollouts are in flight."""
        if self._own_in_flight:
            await self.in_flight.start()
        topic = self.settings.topic("tasks")
        limit = max(self.config.max_in_flight, self.config.group_size)
        try:
            while self.epoch < self.config.epochs:
                order = self.order(self.epoch)
                while self.cursor < len(order):
                    await self.in_flight.wait_below(limit - self.config.group_size + 1)
                    index = order[self.cursor]
                    group = self.build_group(self.items[index], epoch=self.epoch, index=index)
                    self.in_flight.add([r.rollout_id for r in group])
                    await self.producer.send_many(topic, [(r.rollout_id, r) for r in group])
                    self.enqueued += len(group)
                    self.cursor += 1
                self.epoch += 1
                self.cursor = 0
            self.done = True
            logger.info("scheduler: all %d rollouts enqueued", self.enqueued)
        finally:
            if self._own_in_flight:
                await self.in_flight.stop()
