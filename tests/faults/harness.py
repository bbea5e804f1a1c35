"""The whole pipeline on this machine, with handles to break it, and the audit of what reached ClickHouse.

:class:`Pipeline` starts the local broker (Apache Kafka, or Tansu without Java) advertising a
:class:`~tests.agl_stream.runner.tcp_proxy.TcpProxy` port (every client connection goes through the
proxy, so a test can partition one client process from the broker), or a three-node Kafka cluster
(``brokers=3``: replication factor 3, ``min.insync.replicas`` 2, no proxy), the catalog topics, the ``agl-stream processors``
service (state machine, triplet adapter, ClickHouse sinks owning the embedded chdb) and runner
processes of the workload agent (``tests/benchmarks/workload_agent.py``), each a separate
``agl-stream runner`` process that a test can SIGKILL.

The audit of what the pipeline stored is :mod:`tests.faults.audit`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest

from agl_stream.broker import BrokerKind, KafkaBroker, LocalBroker, free_port, local_broker
from agl_stream.client import StoreClient
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import ServiceProcess, agl_command
from agl_stream.types import RolloutConfig
from tests.benchmarks.workload_agent import ADAPTER_SPEC, make_tasks
from agl_stream_topics.admin import describe_topics
from tests.faults.audit import Enqueued
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
        self.replica_health_files: dict[str, Path] = {}  # replica name -> its health file
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
        if self.brokers > 1:  # the cluster's point: every partition on every node
            replicas = {t.name: t.replication_factor for t in await describe_topics(self.settings)}
            assert set(replicas.values()) == {replication}, f"topics' replicas {replicas}, expected {replication}"
        for index in range(1, self.processors_replicas):
            self.replicas.append(self._replica(index))
        return self

    def _replica(self, index: int) -> ServiceProcess:
        """Another processors service: the state machine and the triplet processor join their groups."""
        assert self.stack is not None
        name = f"processors-{index}"
        health = self.replica_health_files[name] = self.data_dir / "logs" / f"{name}.health.json"
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

    def start_controller(self, command: list[str], *, concurrency: int = 4, name: Optional[str] = None,
                         extra_args: tuple[str, ...] = ()) -> ServiceProcess:  # fmt: skip
        """One ``agl-stream controller`` service running ``command`` per attempt (a runner, for the harness)."""
        assert self.stack is not None
        name = name or f"controller-{len(self.runners)}"
        controller = ServiceProcess(
            name,
            agl_command("controller", "--concurrency", str(concurrency), "--heartbeat-interval", "1", "--no-progress",
                        "--logs-dir", str(self.data_dir / name), *extra_args, "--", *command),
            env=self.stack.env(), log_path=self.stack.log_dir / f"{name}.log",
        ).start()  # fmt: skip
        self.stack.services.append(controller)
        self.runners.append(controller)
        return controller

    def restart_processors(self, name: str = "processors") -> None:
        if name == "processors":
            self.health_file.unlink(missing_ok=True)  # a dead service's last report must not read as current
            self.processors.start()
        else:
            self.replica_health_files[name].unlink(missing_ok=True)
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
                out.append(json.loads(self.replica_health_files[replica.name].read_text()))
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


__all__ = ["AGENT", "Pipeline", "enqueue", "wait_terminal", "make_tasks", "ProcessorEnvPipeline",
           "clickhouse_failpoint", "clear_clickhouse_failpoint", "KafkaOffsets", "process_tree_rss"]
