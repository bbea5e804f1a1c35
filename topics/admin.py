"""Create missing topics and verify existing ones against the catalog.

Mismatches (partition count, cleanup policy, replication) are reported, never silently accepted: a
topic with the wrong partition count breaks co-partitioning, a non-compacted ``agl.rollouts`` grows
forever, and a topic with fewer replicas than asked for loses its partitions with one broker.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import TopicAlreadyExistsError

from agl_stream.config import Settings
from agl_stream.kafka import connection_options, retrying_while_unreachable, start_with_retry
from agl_stream_topics.catalog import CATALOG, TopicSpec

logger = logging.getLogger(__name__)


@dataclass
class TopicState:
    name: str
    partitions: Optional[int]
    cleanup_policy: Optional[str]
    expected_partitions: int
    expected_cleanup_policy: str
    created: bool = False
    problems: list[str] = field(default_factory=list)
    replication_factor: Optional[int] = None  # the fewest replicas of any partition

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class TopicsReport:
    topics: list[TopicState]

    @property
    def ok(self) -> bool:
        return all(t.ok for t in self.topics)

    @property
    def created(self) -> list[str]:
        return [t.name for t in self.topics if t.created]

    @property
    def problems(self) -> list[str]:
        return [f"{t.name}: {p}" for t in self.topics for p in t.problems]


class TopicMismatchError(RuntimeError):
    def __init__(self, report: TopicsReport) -> None:
        super().__init__("existing topics do not match the catalog:\n  " + "\n  ".join(report.problems))
        self.report = report


async def _admin(settings: Settings, bootstrap: Optional[str]) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(**connection_options(settings, bootstrap), request_timeout_ms=15_000)
    await start_with_retry(admin, "admin", 30.0)
    return admin


async def _describe(admin: AIOKafkaAdminClient, names: Sequence[str]) -> dict[str, TopicState]:
    """Partition counts and cleanup policies of the named topics that exist."""
    existing = set(await admin.list_topics())
    present = [n for n in names if n in existing]
    if not present:
        return {}
    states: dict[str, TopicState] = {}
    for meta in await admin.describe_topics(present):
        name = meta["topic"]
        partitions = meta.get("partitions") or ()
        states[name] = TopicState(name, len(partitions), None, 0, "")
        fewest = min((len(p.get("replicas") or ()) for p in partitions), default=0)
        states[name].replication_factor = fewest or None  # None: the broker does not say (Tansu lists no replicas)
    resources = [ConfigResource(ConfigResourceType.TOPIC, n) for n in present]
    for response in await admin.describe_configs(resources):
        for resource in response.resources:
            _err, _msg, _type, name, entries = resource[:5]
            for entry in entries:
                if entry[0] == "cleanup.policy" and name in states:
                    states[name].cleanup_policy = entry[1]
    return states


async def ensure_topics(
    settings: Settings,
    bootstrap: Optional[str] = None,
    specs: Sequence[TopicSpec] = CATALOG,
    *,
    strict: bool = False,
    timeout: float = 120.0,
) -> TopicsReport:
    """Create missing topics with their partitions and config; report mismatches of existing ones.

    With ``strict`` a mismatch raises :class:`TopicMismatchError`. A cluster that is briefly unreachable (a node
    restarting, a partition) is retried for up to ``timeout`` seconds: a service starting meanwhile waits.
    """
    async for attempt in retrying_while_unreachable("topics", timeout):
        with attempt:
            return await _ensure_topics_once(settings, bootstrap, specs, strict)
    raise AssertionError("unreachable: the retry re-raises")


async def _ensure_topics_once(settings: Settings, bootstrap: Optional[str], specs: Sequence[TopicSpec],
                              strict: bool) -> TopicsReport:  # fmt: skip
    admin = await _admin(settings, bootstrap)
    try:
        names = [s.name(settings) for s in specs]
        states = await _describe(admin, names)
        missing = [s for s in specs if s.name(settings) not in states]
        settling = [n for n, st in states.items() if not st.partitions]  # created a moment ago by another process
        if missing:
            new = [
                NewTopic(
                    s.name(settings),
                    num_partitions=s.partitions(settings),
                    replication_factor=settings.replication_factor,
                    topic_configs=s.config(settings),
                )
                for s in missing
            ]
            try:
                await admin.create_topics(new, timeout_ms=15_000)
            except TopicAlreadyExistsError:
                pass  # another process created them concurrently; verified below
        if missing or settling:
            # Kafka acknowledges a creation once its controller committed it; the broker answering the
            # describe may learn of it a moment later, and list it first with no partitions (their
            # leaders not elected yet; seen on a three-node cluster). Wait (bounded) until every new
            # topic shows its partitions before verifying.
            waiting = [s.name(settings) for s in missing] + settling
            deadline = time.monotonic() + 30.0
            while True:
                found = await _describe(admin, waiting)
                settled = all(found.get(n) is not None and found[n].partitions for n in waiting)
                if settled or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.1)
            states.update(found)
        report = TopicsReport([])
        for s in specs:
            name = s.name(settings)
            state = states.get(name) or TopicState(name, None, None, 0, "")
            state.expected_partitions = s.partitions(settings)
            state.expected_cleanup_policy = s.cleanup_policy
            state.created = s in missing
            if state.partitions is None:
                state.problems.append("topic does not exist after creation")
            elif state.partitions != state.expected_partitions:
                state.problems.append(f"has {state.partitions} partitions, catalog expects {state.expected_partitions}")
            if state.cleanup_policy is not None and state.cleanup_policy != s.cleanup_policy:
                state.problems.append(f"cleanup.policy is {state.cleanup_policy!r}, catalog expects {s.cleanup_policy!r}")
            if state.replication_factor is not None and state.replication_factor < settings.replication_factor:
                state.problems.append(f"has {state.replication_factor} replicas per partition, "
                                      f"AGL_REPLICATION_FACTOR asks for {settings.replication_factor}")  # fmt: skip
            report.topics.append(state)
        if strict and not report.ok:
            raise TopicMismatchError(report)
        for problem in report.problems:
            logger.error("topic mismatch: %s", problem)
        return report
    finally:
        await admin.close()


async def describe_topics(
    settings: Settings, bootstrap: Optional[str] = None, specs: Sequence[TopicSpec] = CATALOG
) -> list[TopicState]:
    admin = await _admin(settings, bootstrap)
    try:
        states = await _describe(admin, [s.name(settings) for s in specs])
    finally:
        await admin.close()
    out = []
    for s in specs:
        state = states.get(s.name(settings)) or TopicState(s.name(settings), None, None, 0, "")
        state.expected_partitions, state.expected_cleanup_policy = s.partitions(settings), s.cleanup_policy
        out.append(state)
    return out
