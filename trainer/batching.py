"""Batch assembly: ``agl.triplets`` trajectories -> batches of complete GRPO groups, with an off-policy bound.

:class:`GroupAssembler` is the pure logic (no Kafka): trajectories join their group (``group_id``,
or the rollout itself when absent); a group is *ready* when ``group_size`` distinct rollouts have
arrived, or when it has waited ``group_timeout_s`` since its first member (stragglers and rollouts
that never finish) and has at least ``min_group_size`` usable members; smaller timed-out groups are
dropped and counted. Failed attempts count as arrived members but never train. The wait counts in
stream time (:meth:`RecordConsumer.read_through`), from the time its earliest member was written: a
learner reading a backlog, or cut off from one partition's broker, times a group out only once every
partition has been read past the group's start + ``group_timeout_s`` (a wall-clock wait trained groups
without members that sat unread in a lagging partition; seed 303 of the nemesis, 83 rollouts).

One rollout, one training signal: only the trajectory of the attempt that ended its rollout
(``Trajectory.decision == "final"``, stamped by the triplet processor from the state machine's
verdict) is a member. A ``superseded`` trajectory (a retried attempt whose runner reported late) or
an ``undecided`` one is counted and marked done at once, whatever order it arrives in. The topic is
at-least-once: a triplet processor that crashes or loses its partitions publishes some trajectories
again, possibly after their group trained. So the assembler remembers the last
``remember_rollouts`` rollouts whose group left (trained or dropped), checkpoints keep them, and a
trajectory of one of them is a duplicate (counted, marked done), never a new group.

No wasted learner steps (dynamic sampling, as DAPO): a group whose members all earned the same
reward has zero GRPO advantage for every member, so it carries no gradient. Every such group is
counted (``stats.zero_variance_groups``; per batch in ``Batch.zero_variance_groups``); with
``drop_zero_variance`` on (the default for group-normalized estimators) it is left out and the batch
waits for groups that carry signal - the scheduler keeps rollouts in flight, so more arrive. A task
set with no signal cannot spin forever: after ``max_zero_variance_groups`` such groups in a row
without a batch, :class:`NoLearningSignal` stops the learner with the rewards it kept seeing.

Off-policy bound: when a batch is handed out, every triplet whose ``policy_version`` is more than
``max_staleness`` versions behind the learner's current version is removed (counted in
``stats.stale_triplets``); rows that survive carry their behaviour logprobs for truncated
importance sampling. A group left with fewer than ``min_group_size`` trajectories is dropped.

:class:`TripletBatcher` feeds the assembler from a :class:`RecordConsumer` in group ``agl-learner``.
Records of dropped or skipped trajectories are marked done at once; records of a handed-out batch
are marked done by the learner after the optimizer step (and committed after a checkpoint), so a
crash replays them. Records that a resumed checkpoint lists as already done (trained or dropped
before it, but past its positions) are marked done without being filed again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.types import Trajectory

from agl_stream_trainer.algorithms.batch import trajectory_reward

logger = logging.getLogger(__name__)

LEARNER_GROUP = "agl-learner"


class BatcherConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_size: int = Field(default=4, ge=1, description="rollouts per GRPO group (metadata['group_size'] overrides)")
    batch_groups: int = Field(default=2, ge=1, description="complete groups per learner batch")
    group_timeout_s: float = Field(default=120.0, gt=0)
    min_group_size: int = Field(default=2, ge=1, description="a group needs this many usable members to train")
    max_staleness: Optional[int] = Field(default=1, ge=0, description="None disables the bound")
    train_modes: tuple[str, ...] = ("train",)
    drop_zero_variance: Optional[bool] = Field(
        default=None,
        description="leave out groups whose rewards are all equal (no GRPO signal) and wait for others; "
        "None: on for group-normalized estimators (grpo, drgrpo, rloo), decided by the trainer config",
    )
    max_zero_variance_groups: int = Field(
        default=64, ge=1, description="zero-variance groups in a row, with no batch, before the learner gives up"
    )
    zero_variance_tolerance: float = Field(default=1e-6, ge=0, description="rewards closer than this count as equal")
    remember_rollouts: int = Field(
        default=100_000, ge=0,
        description="rollouts whose group left (trained or dropped) remembered, and checkpointed, so a trajectory "
                    "the triplet processor publishes again is never trained twice",
    )  # fmt: skip


class NoLearningSignal(RuntimeError):
    """Too many groups in a row had all-equal rewards: the task gives this policy nothing to learn from."""


@dataclass
class BatcherStats:
    trajectories: int = 0
    duplicates: int = 0
    superseded: int = 0  # trajectories of attempts that did not end their rollout (never trained)
    undecided: int = 0  # trajectories the state machine never decided on (never trained)
    failed_rollouts: int = 0
    skipped_mode: int = 0
    rejected_records: int = 0
    already_done: int = 0  # replayed records the resumed checkpoint had already trained or dropped
    stale_triplets: int = 0
    stale_trajectories: int = 0
    dropped_groups: int = 0
    timed_out_groups: int = 0
    zero_variance_groups: int = 0  # groups whose members all earned the same reward (counted, dropped or not)
    trained_groups: int = 0  # groups handed out in batches
    left_out_groups: int = 0  # zero-variance groups dynamic sampling left out of every batch
    rollouts_filed: int = 0  # distinct train rollouts whose deciding trajectory arrived (retries and replays not counted)
    batches: int = 0
    trained_triplets: int = 0
    staleness: Counter[int] = field(default_factory=Counter)  # histogram of staleness of trained triplets
    zero_variance_rewards: Counter[float] = field(default_factory=Counter)  # the reward each such group's members all had

    def as_dict(self) -> dict[str, float]:
        out = {k: float(v) for k, v in self.__dict__.items() if isinstance(v, int)}
        out.update({f"staleness_{k}": float(v) for k, v in sorted(self.staleness.items())})
        return out


@dataclass
class _Member:
    trajectory: Trajectory
    records: list[Any]


@dataclass
class _Group:
    group_id: str
    expected: int
    first_seen: float
    members: "OrderedDict[str, _Member]" = field(default_factory=OrderedDict)
    timed_out: bool = False

    @property
    def usable(self) -> list[_Member]:
        return [m for m in self.members.values() if m.trajectory.trainable]


@dataclass
class Batch:
    """A learner batch: trajectories of complete groups, the records to mark done, staleness per triplet."""

    trajectories: list[Trajectory]
    records: list[Any]
    staleness: list[int]
    groups: int
    current_version: int
    zero_variance_groups: int = 0  # seen since the previous batch (left out, or inside it when dropping is off)
    signal_groups: int = 0  # groups in this batch whose rewards differ

    @property
    def zero_variance_fraction(self) -> float:
        """Of the groups this step looked at, the fraction that carried no signal."""
        seen = self.signal_groups + self.zero_variance_groups
        return self.zero_variance_groups / seen if seen else 0.0

    @property
    def num_triplets(self) -> int:
        return sum(len(t.triplets) for t in self.trajectories)

    @property
    def staleness_mean(self) -> float:
        return sum(self.staleness) / len(self.staleness) if self.staleness else 0.0


class GroupAssembler:
    def __init__(self, config: BatcherConfig) -> None:
        self.config = config
        self.stats = BatcherStats()
        self._groups: "OrderedDict[str, _Group]" = OrderedDict()
        self._done: list[Any] = []  # records whose trajectories will never train (mark done)
        self._zero_variance_since_batch = 0
        self._zero_variance_rewards: Counter[float] = Counter()  # what the no-signal groups earned (for the error)
        self._settled: "OrderedDict[str, None]" = OrderedDict()  # rollouts whose group left, oldest first

    def settled(self) -> list[str]:
        """Rollouts whose group left (trained or dropped), oldest first: what a checkpoint keeps."""
        return list(self._settled)

    def remember(self, rollout_ids: Any) -> None:
        """Rollouts that must not be filed again (a group that left, or a resumed checkpoint's)."""
        for rid in rollout_ids:
            self._settled[rid] = None
            self._settled.move_to_end(rid)
        while len(self._settled) > self.config.remember_rollouts:
            self._settled.popitem(last=False)

    def _leave(self, group: _Group) -> None:
        del self._groups[group.group_id]
        self.remember(group.members)

    @property
    def pending_groups(self) -> int:
        return len(self._groups)

    def take_done(self) -> list[Any]:
        out, self._done = self._done, []
        return out

    def add(self, trajectory: Trajectory, record: Any = None, now: Optional[float] = None) -> None:
        """File ``trajectory``; ``now``: when it was written (its record's timestamp; default: the clock)."""
        now = time.time() if now is None else now
        self.stats.trajectories += 1
        if trajectory.mode is not None and trajectory.mode not in self.config.train_modes:
            self.stats.skipped_mode += 1
            self._done.append(record)
            return
        if trajectory.decision != "final":
            if trajectory.decision == "superseded":
                self.stats.superseded += 1
            else:
                self.stats.undecided += 1
            self._done.append(record)
            return
        if trajectory.rollout_id in self._settled:
            self.stats.duplicates += 1  # published again after its group left: trained (or dropped) already
            self._done.append(record)
            return
        gid = trajectory.group_id or trajectory.rollout_id
        group = self._groups.get(gid)
        if group is None:
            expected = int(trajectory.metadata.get("group_size", 0) or 0) or (
                self.config.group_size if trajectory.group_id else 1
            )
            group = self._groups[gid] = _Group(gid, expected, now)
        group.first_seen = min(group.first_seen, now)  # members may be read out of the order they were written in
        old = group.members.get(trajectory.rollout_id)
        if old is not None:
            same_attempt = old.trajectory.attempt_id == trajectory.attempt_id
            newer = trajectory.attempt_sequence_id > old.trajectory.attempt_sequence_id
            if same_attempt:
                # a replay (redelivered after a rebalance, or published again): the same offset may come back,
                # so its record is done only when the member's group leaves, never before the original is trained
                self.stats.duplicates += 1
                old.records.append(record)
                return
            if not (newer or old.trajectory.status != "succeeded"):
                self.stats.duplicates += 1  # an older attempt after a newer succeeded one: keep what we have
                self._done.append(record)
                return
            self._done.extend(old.records)  # a retry replaces a failed / older attempt
        if not trajectory.trainable:
            self.stats.failed_rollouts += 1
        if old is None:
            self.stats.rollouts_filed += 1
        group.members[trajectory.rollout_id] = _Member(trajectory, [record])

    def _ready_ids(self, now: float) -> list[str]:
        ready = []
        for gid, group in self._groups.items():
            if len(group.members) >= group.expected:
                ready.append(gid)
            elif now - group.first_seen >= self.config.group_timeout_s:
                if not group.timed_out:
                    group.timed_out = True
                    self.stats.timed_out_groups += 1
                ready.append(gid)
        return ready

    def pop_batch(self, current_version: int, now: Optional[float] = None, *, force: bool = False) -> Optional[Batch]:
        """A batch of ``batch_groups`` ready groups after the staleness filter, or None if not enough.

        ``force`` hands out whatever ready groups there are (end of a finite dataset). ``now``: the time
        groups are timed out against, on the clock of :meth:`add`'s (default: the clock itself).
        """
        now = time.time() if now is None else now
        candidates: list[tuple[_Group, _Filtered]] = []
        for gid in self._ready_ids(now):
            group = self._groups[gid]
            filtered = self._filter_stale(group, current_version)
            if len(filtered.members) < min(self.config.min_group_size, group.expected):
                self._count_stale(filtered)
                self.stats.dropped_groups += 1
                for m in group.members.values():
                    self._done.extend(m.records)
                self._leave(group)
                continue
            if self.config.drop_zero_variance and self._no_signal(filtered):
                self._drop_no_signal(group, filtered)
                continue
            candidates.append((group, filtered))
        if not candidates or (len(candidates) < self.config.batch_groups and not force):
            return None
        trajectories: list[Trajectory] = []
        records: list[Any] = []
        staleness: list[int] = []
        for group, filtered in candidates[: self.config.batch_groups]:
            self._count_stale(filtered)
            trajectories.extend(m.trajectory for m in filtered.members)
            records.extend(r for m in group.members.values() for r in m.records if r is not None)
            staleness.extend(filtered.staleness)
            self._leave(group)
        taken = candidates[: self.config.batch_groups]
        self.stats.batches += 1
        self.stats.trained_triplets += sum(len(t.triplets) for t in trajectories)
        self.stats.staleness.update(staleness)
        # counted when a group leaves: here (dropping off: it trains, with zero advantage) or when dropped
        flat_taken = sum(self._no_signal(filtered) for _, filtered in taken)
        self.stats.zero_variance_groups += flat_taken
        self.stats.trained_groups += len(taken)
        for _, filtered in taken:
            if self._no_signal(filtered):
                self.stats.zero_variance_rewards[round(trajectory_reward(filtered.members[0].trajectory), 6)] += 1
        signal = len(taken) - flat_taken
        zero_variance, self._zero_variance_since_batch = self._zero_variance_since_batch + flat_taken, 0
        self._zero_variance_rewards.clear()
        return Batch(trajectories, records, staleness, len(taken), current_version,
                     zero_variance_groups=zero_variance, signal_groups=signal)  # fmt: skip

    def _no_signal(self, filtered: "_Filtered") -> bool:
        """All members earned the same reward (within the tolerance): every advantage is zero."""
        rewards = [trajectory_reward(m.trajectory) for m in filtered.members]
        return len(rewards) > 0 and max(rewards) - min(rewards) <= self.config.zero_variance_tolerance

    def _drop_no_signal(self, group: _Group, filtered: "_Filtered") -> None:
        self.stats.zero_variance_groups += 1
        self.stats.left_out_groups += 1
        self._zero_variance_since_batch += 1
        self._count_stale(filtered)
        for m in group.members.values():
            self._done.extend(m.records)
        self._leave(group)
        self._zero_variance_rewards[round(trajectory_reward(filtered.members[0].trajectory), 6)] += 1
        self.stats.zero_variance_rewards[round(trajectory_reward(filtered.members[0].trajectory), 6)] += 1
        if self._zero_variance_since_batch >= self.config.max_zero_variance_groups:
            seen = ", ".join(f"{n} at reward {r:g}" for r, n in self._zero_variance_rewards.most_common())
            raise NoLearningSignal(
                f"{self._zero_variance_since_batch} groups in a row had all-equal rewards ({seen}) and no batch with "
                f"signal formed: every member of each group earned the same reward, so GRPO has no advantage to learn "
                f"from. The task is too hard or too easy for this policy (measure its pass@1 / pass@k), or raise "
                f"batcher.max_zero_variance_groups; batcher.drop_zero_variance=false trains on them anyway (zero gradient)."
            )

    def _count_stale(self, filtered: "_Filtered") -> None:
        self.stats.stale_triplets += filtered.stale_triplets
        self.stats.stale_trajectories += filtered.stale_trajectories

    def _filter_stale(self, group: _Group, current_version: int) -> "_Filtered":
        """Usable members with only fresh-enough triplets (pure: counting happens when the group leaves)."""
        bound = self.config.max_staleness
        out = _Filtered()
        for member in group.usable:
            traj = member.trajectory
            fresh = []
            for triplet in traj.triplets:
                age = current_version - triplet.policy_version if triplet.policy_version is not None else 0
                if bound is not None and age > bound:
                    out.stale_triplets += 1
                    continue
                fresh.append(triplet)
                out.staleness.append(max(age, 0))
            if not fresh:
                out.stale_trajectories += 1 if traj.triplets else 0
                continue
            if len(fresh) != len(traj.triplets):
                traj = traj.model_copy(update={"triplets": fresh})
            out.members.append(_Member(traj, member.records))
        return out


@dataclass
class _Filtered:
    members: list[_Member] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)
    stale_triplets: int = 0
    stale_trajectories: int = 0


class TripletBatcher:
    """Feeds a :class:`GroupAssembler` from ``agl.triplets`` (consumer group ``agl-learner``)."""

    def __init__(self, consumer: Any, config: BatcherConfig, *, dlq: Any = None, dlq_topic: Optional[str] = None,
                 already_done: Optional[dict[str, list[int]]] = None) -> None:  # fmt: skip
        self.consumer = consumer  # an agl_stream.kafka.RecordConsumer
        self.config = config
        self.assembler = GroupAssembler(config)
        self.dlq = dlq  # optional RecordProducer for undecodable records
        self.dlq_topic = dlq_topic
        # "topic:partition" -> offsets past the resumed checkpoint's positions that it already trained or dropped
        self.already_done: dict[str, set[int]] = {k: set(v) for k, v in (already_done or {}).items()}

    @property
    def stats(self) -> BatcherStats:
        return self.assembler.stats

    async def poll(self, timeout: float = 0.5) -> int:
        """Fetch and file whatever arrived; returns the number of trajectories added."""
        good, bad = await self.consumer.get_decoded(Trajectory, timeout=timeout)
        for rejected in bad:
            if not self._was_done(rejected.record):
                self.assembler.stats.rejected_records += 1
                await self._dead_letter(rejected)
            self.consumer.done(rejected.record)
        for item in good:
            if self._was_done(item.record):
                self.assembler.stats.already_done += 1
                self.consumer.done(item.record)
            else:
                self.assembler.add(item.value, item.record, now=item.record.timestamp / 1000)
        for record in self.assembler.take_done():
            if record is not None:
                self.consumer.done(record)
        return len(good)

    async def next_batch(self, current_version: int, timeout: float = 5.0, *, force: bool = False) -> Optional[Batch]:
        """Poll until a batch is ready or ``timeout`` passes (then None)."""
        deadline = time.monotonic() + timeout
        while True:
            read_through = await self.consumer.read_through()
            batch = self.assembler.pop_batch(current_version, float("-inf") if read_through is None else read_through,
                                             force=force)  # fmt: skip
            for record in self.assembler.take_done():
                if record is not None:
                    self.consumer.done(record)
            if batch is not None:
                return batch
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await self.poll(timeout=min(left, 0.5))

    def done(self, batch: Batch) -> None:
        """The batch's effect is applied: its records may be committed."""
        self.consumer.done_many(batch.records)

    def done_past(self, tp: Any, position: int) -> list[int]:
        """Offsets of ``tp`` at or after ``position`` (a checkpoint's position) whose records are already done.

        A checkpoint saves them with its positions: a position is the first unfinished record (a
        group still assembling), and these records must not train again after a resume.
        """
        key = f"{tp.topic}:{tp.partition}"
        inherited = {o for o in self.already_done.pop(key, ()) if o >= position}
        if inherited:
            self.already_done[key] = inherited
        return sorted(inherited.union(o for o in self.consumer.tracker.done_ahead(tp) if o >= position))

    def _was_done(self, record: Any) -> bool:
        return record.offset in self.already_done.get(f"{record.topic}:{record.partition}", ())

    async def _dead_letter(self, rejected: Any) -> None:
        logger.warning("undecodable agl.triplets record at %s:%s: %s", rejected.record.partition, rejected.record.offset, rejected.error.reason)
        if self.dlq is None or self.dlq_topic is None:
            return
        from agl_stream.kafka import DeadLetterWriter

        writer = DeadLetterWriter(self.dlq_topic, self.dlq, "agl_stream_trainer.batching")
        await (await writer.send(rejected.error.reason, record=rejected.record, error_type=type(rejected.error).__name__))


async def wait_for_assignment(consumer: Any, timeout: float = 30.0) -> None:
    """Wait until the group coordinator assigned partitions (a new group's first join can take seconds)."""
    deadline = time.monotonic() + timeout
    while not consumer.raw.assignment():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no partitions assigned to {consumer.group_id} within {timeout:.0f}s")
        await asyncio.sleep(0.05)
