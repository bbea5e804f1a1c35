"""The whole pipeline on this machine, with handles to break it, and the audit of what reached ClickHouse.

:class:`Pipeline` starts the local broker (Apache Kafka, or Tansu without Java) advertising a
:class:`~tests.agl_stream.runner.tcp_proxy.TcpProxy` port (every client connection goes through the
proxy, so a test can partition one client process from the broker), or a three-node Kafka cluster
(``brokers=3``: replication factor 3, ``min.insync.replicas`` 2, no proxy), the catalog topics, the ``agl-stream processors``
service (state machine, triplet adapter, ClickHouse sinks owning the embedded chdb) and runner
processes of the workload agent (``tests/benchmarks/workload_agent.py``), each a separate
``agl-stream runner`` process that a test can SIGKILL.

:func:`audit` compares ClickHouse with the ground truth the workload's tasks define (the agent's
plan is a pure function of its task): every rollout's final status, and every span and triplet of
its succeeded attempt present exactly once. chdb allows one process per data directory, so the
audit runs after the processors stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest

from agl_stream.broker import BrokerKind, KafkaBroker, LocalBroker, free_port, local_broker
from agl_stream.client import StoreClient
from agl_stream.client.sql_ids import in_lists
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import ServiceProcess, agl_command
from agl_stream.types import RolloutConfig
from tests.benchmarks.workload_agent import ADAPTER_SPEC, TASK_NAME_KEY, make_tasks, plan
from tests.agl_stream.runner.tcp_proxy import TcpProxy

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.benchmarks.workload_agent:workload_agent"


class Pipeline:
    def __init__(self, data_dir: Path, *, partitions: int = 2, session_timeout_ms: int = 6000,
                 processor_args: Sequence[str] = (), brokers: int = 1, kind: Optional[BrokerKind] = None,
                 node_proxies: bool = False, processors_replicas: int = 1) -> None:  # fmt: skip
        """``kind``: the broker (default: the local choice, ``AGL_LOCAL_BROKER``); ``brokers`` > 1 is a Kafka cluster,
        with ``node_proxies`` a proxy in front of each node's client and controller listeners (every client and
        every node reaches a node through them). ``processors_replicas`` 2 adds a second processors service with
        the state machine and the triplet processor (the sinks own the embedded ClickHouse: one writer)."""
        self.data_dir = data_dir
        self.brokers = brokers
        self.node_proxies = node_proxies
        self.processors_replicas = processors_replicas
        self.proxies: dict[int, list[TcpProxy]] = {}  # node id -> its client and controller proxies
        self.replicas: list[ServiceProcess] = []  # processors services beyond the stack's own
        self.kind = kind
        self.partitions = partitions
        self.session_timeout_ms = session_timeout_ms
        self.processor_args = ["--adapter", ADAPTER_SPEC, *processor_args]
        self.broker: Optional[LocalBroker] = None
        self.proxy: Optional[TcpProxy] = None
        self.stack: Optional[LocalStack] = None
        self.runners: list[ServiceProcess] = []
        self.settings: Optional[Settings] = None

    async def start(self) -> "Pipeline":
        log_dir = self.data_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        if self.brokers > 1:  # a cluster: clients know every node; faults are node kills and restarts
            client_ports = [free_port() for _ in range(self.brokers)] if self.node_proxies else []
            controller_ports = [free_port() for _ in range(self.brokers)] if self.node_proxies else []
            self.broker = KafkaBroker(
                brokers=self.brokers, log_file=log_dir / "broker.log", data_dir=self.data_dir / "broker",
                advertised=[f"127.0.0.1:{p}" for p in client_ports] or None,
                controller_advertised=[f"127.0.0.1:{p}" for p in controller_ports] or None,
            )  # fmt: skip
            for node, client, controller in zip(self.broker.nodes, client_ports, controller_ports):
                self.proxies[node.node_id] = [TcpProxy(client, node.host, node.port),
                                              TcpProxy(controller, node.host, node.controller_port)]  # fmt: skip
                for proxy in self.proxies[node.node_id]:
                    await proxy.start()
            await asyncio.to_thread(self.broker.start)
            bootstrap, replication = self.broker.bootstrap, min(3, self.brokers)
        else:
            broker_port, proxy_port = free_port(), free_port()
            self.broker = local_broker(Settings.from_env(), kind=self.kind, port=broker_port, advertised=f"127.0.0.1:{proxy_port}",
                                       log_file=log_dir / "broker.log", data_dir=self.data_dir / "broker")  # fmt: skip
            await asyncio.to_thread(self.broker.start)
            self.proxy = TcpProxy(proxy_port, "127.0.0.1", broker_port)
            await self.proxy.start()
            bootstrap, replication = f"127.0.0.1:{proxy_port}", 1
        settings = Settings.from_env(
            env={}, kafka_bootstrap=bootstrap, data_dir=self.data_dir, partitions=self.partitions,
            kafka_session_timeout_ms=self.session_timeout_ms, replication_factor=replication,
            # the one setting taken from this process's environment: the scenarios can run with transactions
            kafka_transactions=Settings.from_env().kafka_transactions,
        )  # fmt: skip
        self.stack = LocalStack(settings, processors=True, processor_args=self.processor_args, log_dir=log_dir)
        self.settings = await self.stack.start()
        for index in range(1, self.processors_replicas):
            self.replicas.append(self._replica(index))
        return self

    def _replica(self, index: int) -> ServiceProcess:
        """Another processors service: the state machine and the triplet processor join their groups."""
        assert self.stack is not None
        name = f"processors-{index}"
        health = self.data_dir / "logs" / f"{name}.health.json"
        env = {**self.stack.env(), "AGL_DATA_DIR": str(self.data_dir / name)}
        replica = ServiceProcess(
            name, agl_command("processors", "state-machine", "triplets", "--no-sql-door", "--health-file", str(health),
                              "--health-interval", "2", *self.processor_args),
            env=env, log_path=self.data_dir / "logs" / f"{name}.log",
        )  # fmt: skip
        replica.start()
        return replica

    @property
    def all_proxies(self) -> list[TcpProxy]:
        return [self.proxy] if self.proxy is not None else [p for pair in self.proxies.values() for p in pair]

    # ---------------------------------------------------------------- services

    @property
    def processors(self) -> ServiceProcess:
        assert self.stack is not None
        return next(s for s in self.stack.services if s.name == "processors")

    @property
    def health_file(self) -> Path:
        return self.data_dir / "logs" / "processors.health.json"

    def start_runner(self, *, concurrency: int = 4, n: int = 1, name: Optional[str] = None) -> ServiceProcess:
        """One ``agl-stream runner`` service (``n`` processes in one process group)."""
        assert self.stack is not None
        env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        runner = self.stack.start_runners(AGENT, n, concurrency=concurrency, env=env,
                                          extra_args=["--heartbeat-interval", "1"])  # fmt: skip
        runner.name = name or f"runners-{len(self.runners)}"
        self.runners.append(runner)
        return runner

    def restart_processors(self, name: str = "processors") -> None:
        if name == "processors":
            self.health_file.unlink(missing_ok=True)
            self.processors.start()
        else:
            next(r for r in self.replicas if r.name == name).start()

    def stop_runners(self) -> None:
        for runner in self.runners:
            runner.stop()

    def stop_processors(self) -> None:
        for replica in self.replicas:
            replica.stop(timeout=60)
        self.processors.stop(timeout=60)

    @property
    def kafka(self) -> KafkaBroker:
        """The broker, when it is Apache Kafka (the scenarios that stop and restart it need one)."""
        if not isinstance(self.broker, KafkaBroker):
            pytest.skip("this scenario stops and restarts the broker: it needs Apache Kafka (Tansu's memory is lost)")
        return self.broker

    async def stop(self) -> None:
        for replica in self.replicas:
            await asyncio.to_thread(replica.stop)
        if self.stack is not None:
            await asyncio.to_thread(self.stack.stop)
        for proxy in self.all_proxies:
            await proxy.stop()
        if self.broker is not None:
            await asyncio.to_thread(self.broker.stop)

    # ---------------------------------------------------------------- waiting

    def health(self) -> dict[str, Any]:
        try:
            return json.loads(self.health_file.read_text())
        except (OSError, ValueError):
            return {}

    def replica_health(self) -> list[dict[str, Any]]:
        """The health reports of the processors replicas beyond the first (state machine and triplets only)."""
        out = []
        for replica in self.replicas:
            try:
                out.append(json.loads((self.data_dir / "logs" / f"{replica.name}.health.json").read_text()))
            except (OSError, ValueError):
                out.append({})
        return out

    async def wait_drained(self, timeout: float = 120.0, quiet: int = 2, *, check_alive: bool = True) -> dict[str, Any]:
        """Wait until the processors (every replica) report nothing pending or buffered and their counts
        stopped moving for ``quiet`` consecutive health reports (every 2 s): the sinks caught up. A service
        that exited fails the wait, unless ``check_alive`` is False (something else restarts it)."""
        deadline = time.monotonic() + timeout
        last, stable, mtime = None, 0, 0.0
        while time.monotonic() < deadline:
            for service in [self.processors, *self.replicas] if check_alive else ():
                service.check()
            try:
                current_mtime = self.health_file.stat().st_mtime
            except OSError:
                current_mtime = 0.0
            if current_mtime != mtime:
                mtime = current_mtime
                report = self.health()
                apps = report.get("apps", {})
                # the workers sink sees a heartbeat every second whatever the load: not a sign of backlog
                sinks = {k: v for k, v in apps.get("sinks", {}).items() if isinstance(v, dict) and k != "workers"}
                every_triplets = [apps.get("triplets", {})] + [r.get("apps", {}).get("triplets", {}) for r in self.replica_health()]
                counts = (
                    tuple(sorted((k, v.get("records"), v.get("rows")) for k, v in sinks.items())),
                    tuple((t.get("trajectories"), t.get("spans")) for t in every_triplets),
                )
                # an attempt adapted but waiting for the state machine's decision holds its trajectory unwritten
                idle = (all(v.get("pending", 0) == 0 for v in sinks.values()) and sinks
                        and all(t.get("in_flight", 0) == 0 and t.get("buffered_spans", 0) == 0
                                and t.get("awaiting_decision", 0) == 0 for t in every_triplets))  # fmt: skip
                stable = stable + 1 if (idle and counts == last) else 0
                last = counts
                if stable >= quiet:
                    return report
            await asyncio.sleep(0.2)
        raise TimeoutError(f"processors did not drain within {timeout}s; last health: {json.dumps(self.health())[:3000]}")


# ---------------------------------------------------------------- enqueue and wait


@dataclass
class Enqueued:
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # rollout id -> task
    enqueued_at: dict[str, float] = field(default_factory=dict)  # rollout id -> time.time() at enqueue


async def enqueue(store: StoreClient, tasks: list[dict[str, Any]], batch: int = 128, into: Optional[Enqueued] = None,
                  config: Optional[RolloutConfig] = None) -> Enqueued:  # fmt: skip
    out = into or Enqueued()
    for start in range(0, len(tasks), batch):
        chunk = tasks[start : start + batch]
        rollouts = await store.enqueue_many_rollouts([{"input": task, "config": config} for task in chunk])
        for task, ro in zip(chunk, rollouts):
            out.tasks[ro.rollout_id] = task
            out.enqueued_at[ro.rollout_id] = ro.start_time
    return out


async def wait_terminal(store: StoreClient, rollout_ids: list[str], timeout: float) -> dict[str, str]:
    done = await store.wait_for_rollouts(rollout_ids=rollout_ids, timeout=timeout)
    return {r.rollout_id: r.status for r in done}


# ---------------------------------------------------------------- the audit


@dataclass
class Audit:
    enqueued: int
    succeeded: int
    failed: int
    other: dict[str, int]
    spans: int
    triplets: int
    duplicates: int
    lost: int
    superseded: int  # trajectories of retried attempts that reported late, stored and marked, never trained
    raw_duplicate_rows: int  # physical rows ReplacingMergeTree collapses (at-least-once inserts)
    problems: list[str]

    def line(self, name: str) -> str:
        return (f"[{name}] enqueued={self.enqueued} succeeded={self.succeeded} failed={self.failed} "
                f"spans={self.spans} triplets={self.triplets} superseded={self.superseded} "
                f"duplicates={self.duplicates} lost={self.lost} "
                f"(raw duplicate rows collapsed by the tables: {self.raw_duplicate_rows})")  # fmt: skip


def audit(store: Any, enqueued: Enqueued, *, expect_failed: Sequence[str] = ()) -> Audit:
    """Every enqueued rollout's final status, and the spans and triplets of the attempt that ended it.

    Ground truth comes from the tasks (the agent's plan): an attempt of a task with R rounds and I
    intermediate rewards emits 3R + I + 2 spans with sequence ids 1..n and R triplets. The attempt
    that ended a rollout is the one its ``rollouts`` row names (the state machine's verdict); it must
    have reported ``finished``/``succeeded`` with the plan's span count. Natural keys: a span is
    (AttemptId, SequenceId) - the per-attempt order the runner assigns - and a triplet is (AttemptId,
    TripletIndex). ``duplicates`` counts rows beyond one per natural key (in the deduplicated FINAL
    view: a span emitted twice under different span ids), plus every trainable (``Decision =
    'final'``) triplet of any other attempt of the rollout: training data twice. Other attempts'
    trajectories marked ``superseded`` (a retried attempt that reported late) are expected and
    counted in ``superseded``. ``lost`` counts expected keys without a row, plus rollouts whose task
    name or final reward is missing or wrong. ``store``: a DSN, or a client this process holds.
    """
    from agl_stream_processors.clickhouse import connect

    ids = list(enqueued.tasks)
    problems: list[str] = []
    rollouts: dict[str, tuple[str, str]] = {}
    finished: dict[tuple[str, str], list[Any]] = {}
    span_keys: dict[tuple[str, str], tuple[Any, ...]] = {}
    triplet_keys: dict[tuple[str, str], tuple[Any, ...]] = {}
    names: dict[str, str] = {}
    span_rows_raw = span_rows_final = triplet_rows_raw = triplet_rows_final = 0
    ch = connect(store) if isinstance(store, str) else store  # a DSN, or a client this process already holds
    try:
        # Bounded chunks of rollout ids (agl_stream.client.sql_ids): every row and group below belongs to one
        # rollout, and the chunks partition the ids, so per-chunk rows merge and per-chunk counts add up.
        for in_ids in in_lists(ids):
            rollouts.update({r[0]: (r[1], r[2]) for r in ch.query_rows(
                f"SELECT RolloutId, argMax(Status, UpdatedAt), argMax(AttemptId, UpdatedAt) FROM rollouts "
                f"WHERE RolloutId IN {in_ids} GROUP BY RolloutId")[1]})  # fmt: skip
            for rid, aid, status, span_count in ch.query_rows(
                f"SELECT RolloutId, AttemptId, Status, SpanCount FROM attempts FINAL WHERE Kind = 'finished' "
                f"AND RolloutId IN {in_ids}"
            )[1]:
                finished.setdefault((rid, aid), []).append((status, span_count))
            span_keys.update({(r[0], r[1]): (r[2], r[3], r[4]) for r in ch.query_rows(
                f"SELECT RolloutId, AttemptId, count(), uniqExact(SequenceId), max(SequenceId) FROM spans FINAL "
                f"WHERE RolloutId IN {in_ids} GROUP BY RolloutId, AttemptId")[1]})  # fmt: skip
            span_rows_raw += ch.scalar(f"SELECT count() FROM spans WHERE RolloutId IN {in_ids}")
            span_rows_final += ch.scalar(f"SELECT count() FROM spans FINAL WHERE RolloutId IN {in_ids}")
            triplet_keys.update({(r[0], r[1]): (r[2], r[3], r[4], r[5], r[6]) for r in ch.query_rows(
                f"SELECT RolloutId, AttemptId, count(), uniqExact(TripletIndex), any(TripletCount), any(FinalReward), "
                f"groupUniqArray(Decision) FROM triplets FINAL WHERE RolloutId IN {in_ids} "
                f"GROUP BY RolloutId, AttemptId")[1]})  # fmt: skip
            triplet_rows_raw += ch.scalar(f"SELECT count() FROM triplets WHERE RolloutId IN {in_ids}")
            triplet_rows_final += ch.scalar(f"SELECT count() FROM triplets FINAL WHERE RolloutId IN {in_ids}")
            names.update({r[0]: r[1] for r in ch.query_rows(
                f"SELECT RolloutId, any(SpanAttributes['{TASK_NAME_KEY}']) FROM spans FINAL WHERE RolloutId IN {in_ids} "
                f"AND mapContains(SpanAttributes, '{TASK_NAME_KEY}') GROUP BY RolloutId")[1]})  # fmt: skip
    finally:
        if isinstance(store, str):
            ch.close()

    statuses = {rid: status for rid, (status, _aid) in rollouts.items()}
    duplicates = lost = superseded = 0
    counts: dict[str, int] = {}
    for rid in ids:
        status = statuses.get(rid, "missing")
        counts[status] = counts.get(status, 0) + 1
        if rid in expect_failed:
            if status != "failed":
                problems.append(f"{rid}: expected failed, got {status}")
            continue
        if status != "succeeded":
            problems.append(f"{rid}: status {status}")
            lost += 1
            continue
        p = plan(enqueued.tasks[rid])
        aid = rollouts[rid][1]
        reports = finished.get((rid, aid), [])
        if not any(status == "succeeded" for status, _ in reports):
            problems.append(f"{rid}: its rollout row names attempt {aid!r}, which reported {reports or 'nothing'}")
            lost += 1
            continue
        span_count = next(count for status, count in reports if status == "succeeded")
        if span_count != p.spans:
            problems.append(f"{rid}: runner reported {span_count} spans, the plan has {p.spans}")
        rows, distinct, top = span_keys.get((rid, aid), (0, 0, 0))
        duplicates += rows - distinct + max(0, distinct - p.spans)
        lost += max(0, p.spans - distinct)
        if top != p.spans or rows != p.spans:
            problems.append(f"{rid}/{aid}: {rows} span rows, {distinct} distinct sequence ids (max {top}), expected {p.spans}")
        trows, tdistinct, tcount, final_reward, decisions = triplet_keys.get((rid, aid), (0, 0, 0, None, []))
        duplicates += trows - tdistinct + max(0, tdistinct - p.triplets)
        lost += max(0, p.triplets - tdistinct)
        if (trows, tdistinct, tcount) != (p.triplets,) * 3:
            problems.append(f"{rid}/{aid}: {trows} triplet rows ({tdistinct} distinct, count {tcount}), expected {p.triplets}")
        if trows and decisions != ["final"]:
            problems.append(f"{rid}/{aid}: the attempt that ended the rollout has decisions {decisions}, expected ['final']")
            lost += 1
        for key in (k for k in triplet_keys if k[0] == rid and k[1] != aid):
            if "final" in triplet_keys[key][4]:
                duplicates += triplet_keys[key][0]
                problems.append(f"{rid}: trainable triplets of another attempt too: {key} {triplet_keys[key][4]}")
            else:
                superseded += 1
        if final_reward is None or not 1.0 <= final_reward <= 2.0 or abs(final_reward - p.final_reward) > 1e-9:
            problems.append(f"{rid}: final reward {final_reward}, expected {p.final_reward}")
            lost += 1
        if names.get(rid) != enqueued.tasks[rid]["name"]:
            problems.append(f"{rid}: task name {names.get(rid)!r} not among its spans")
            lost += 1
    return Audit(
        enqueued=len(ids), succeeded=counts.get("succeeded", 0), failed=counts.get("failed", 0),
        other={k: v for k, v in counts.items() if k not in ("succeeded", "failed")},
        spans=span_rows_final, triplets=triplet_rows_final, duplicates=duplicates, lost=lost, superseded=superseded,
        raw_duplicate_rows=(span_rows_raw - span_rows_final) + (triplet_rows_raw - triplet_rows_final),
        problems=problems,
    )  # fmt: skip


__all__ = ["Pipeline", "Enqueued", "enqueue", "wait_terminal", "audit", "Audit", "make_tasks", "AGENT"]


# ---------------------------------------------------------------- appended: ClickHouse failpoint, offsets, RSS
# (for tests/faults/test_chaos_clickhouse.py; the code above is unchanged)


class ProcessorEnvPipeline(Pipeline):
    """A :class:`Pipeline` whose processors service runs with extra environment variables.

    Why: the ClickHouse failpoint (``AGL_CLICKHOUSE_FAILPOINT``) must be in the environment of the
    process that owns the embedded chdb. The variables are set in this process's environment only
    while :meth:`Pipeline.start` spawns the broker, the topics job and the processors (the child
    keeps them across :meth:`restart_processors`); runners started later and the audit's own
    ClickHouse client in this process do not see them.
    """

    def __init__(self, data_dir: Path, *, processor_env: dict[str, str], **kwargs: Any) -> None:
        super().__init__(data_dir, **kwargs)
        self.processor_env = dict(processor_env)

    async def start(self) -> "Pipeline":
        saved = {k: os.environ.get(k) for k in self.processor_env}
        os.environ.update(self.processor_env)
        try:
            return await super().start()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def clickhouse_failpoint(path: Path, delay: Optional[float] = None) -> None:
    """Arm the failpoint file (see :mod:`agl_stream_processors.clickhouse.failpoint`): an outage, or ``delay`` s per call.
    Written atomically so the processors never read a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("" if delay is None else f"{delay}")
    os.replace(tmp, path)


def clear_clickhouse_failpoint(path: Path) -> None:
    path.unlink(missing_ok=True)


class KafkaOffsets:
    """End offsets of a topic and a consumer group's committed offsets, summed over partitions.

    Read without joining the group: a consumer with the group's id that never subscribes only
    sends OffsetFetch (Tansu cannot answer the admin client's version of it), so measuring a
    sink's lag does not disturb the sink."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._consumers: dict[Optional[str], Any] = {}
        self._partitions_of: dict[str, list[Any]] = {}

    async def _consumer(self, group: Optional[str]) -> Any:
        if group not in self._consumers:
            from aiokafka import AIOKafkaConsumer

            from agl_stream.kafka import connection_options

            consumer = AIOKafkaConsumer(**connection_options(self.settings), group_id=group, enable_auto_commit=False)
            await consumer.start()
            self._consumers[group] = consumer
        return self._consumers[group]

    async def __aenter__(self) -> "KafkaOffsets":
        await self._consumer(None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for consumer in self._consumers.values():
            await consumer.stop()
        self._consumers.clear()

    async def _partitions(self, topic: str) -> list[Any]:
        from aiokafka import TopicPartition

        name = self.settings.topic(topic)
        if name not in self._partitions_of:
            consumer = await self._consumer(None)
            cluster = await consumer._client.fetch_all_metadata()  # noqa: SLF001 - no subscription, so no metadata yet
            partitions = sorted(cluster.partitions_for_topic(name) or ())
            self._partitions_of[name] = [TopicPartition(name, p) for p in partitions]
        return self._partitions_of[name]

    async def end(self, topic: str) -> int:
        """Records ever produced to the catalog topic ``topic`` (sum of its partitions' end offsets)."""
        consumer = await self._consumer(None)
        ends = await consumer.end_offsets(await self._partitions(topic))
        return int(sum(ends.values()))

    async def committed(self, group: str, topic: str) -> int:
        """Sum of ``group``'s committed offsets on ``topic`` (0 for a partition without a commit)."""
        consumer = await self._consumer(group)
        return sum([(await consumer.committed(tp)) or 0 for tp in await self._partitions(topic)])

    async def lag(self, group: str, topic: str) -> int:
        return await self.end(topic) - await self.committed(group, topic)


def process_tree_rss(pid: int) -> int:
    """Resident memory in bytes of ``pid`` and its descendants (0 once it is gone)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


__all__ += ["ProcessorEnvPipeline", "clickhouse_failpoint", "clear_clickhouse_failpoint", "KafkaOffsets",
            "process_tree_rss"]
