"""Apache Kafka on this machine: one or more KRaft nodes, each a JVM on loopback with its data on disk.

Every node is a combined broker + controller (``process.roles=broker,controller``), so one node is
a whole cluster and three are a cluster that survives losing any one (replication factor 3,
``min.insync.replicas`` 2). A node's storage is formatted on its first start only: stopping and
starting again (a restart, a rolling restart, a node killed and brought back) keeps the data.

The node's configuration is written for one shared, small machine: the JVM heap is capped
(``heap_mb``, 384 MB by default), the thread pools are small, the log cleaner's dedupe buffer
fits that heap, and no topic is ever created by a client asking for it (the catalog creates
them, as in deploy/). The broker is ready when it answers a metadata request that lists every
node, not when its port opens.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Coroutine, Mapping, Optional, Sequence, TypeVar, Union

import psutil

from agl_stream.broker._base import BrokerError, free_port, wait_for_port
from agl_stream.config import Settings
from agl_stream.broker._install import KAFKA_VERSION, KafkaInstall, kafka_install, package_file
from agl_stream.service import die_with_parent

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_HEAP_MB = 384
STOP_TIMEOUT = 20.0  # a controlled shutdown; then SIGKILL


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a private event loop in another thread.

    ``start()`` is synchronous and is called from inside running event loops (``LocalStack.start``)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coro)
        except BaseException as exc:  # handed to the caller's thread below
            result["error"] = exc

    thread = threading.Thread(target=target, name="agl-kafka-probe", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]  # type: ignore[no-any-return]


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID, base64url without padding (22 characters).

    Never one that starts with ``-``: the storage tool's argument parser would read it as an option
    (as Kafka's own ``Uuid.randomUuid`` avoids; seen here once in about 60 starts)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


#: The local broker's JVM compiles with C1 only. With the default tiered compilation, C2's compiler threads
#: used 9.1 of the broker's 21.4 CPU seconds over a run of upstream's store benchmark
#: (tests/benchmarks/jvm_threads.py); with C1 only, 1.3 of 13.2, and the broker's CPU per rollout fell from 29.9
#: to 20.2 ms (docs/performance.md). A broker serving one machine's pipeline never runs hot enough to pay C2 back;
#: ``AGL_LOCAL_KAFKA_FULL_JIT=true`` turns C2 back on (a long run at high rates).
C1_ONLY = "-XX:TieredStopAtLevel=1"


@dataclass
class KafkaNode:
    """One KRaft node (broker and controller) of a local cluster."""

    node_id: int
    host: str
    port: int
    controller_port: int
    data_dir: Path
    log_file: Path
    advertised: Optional[str] = None
    controller_advertised: Optional[str] = None  # host:port the other nodes reach its controller listener at
    proc: Optional["subprocess.Popen[bytes]"] = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.running and self.proc is not None else None

    @property
    def config_file(self) -> Path:
        return self.data_dir / "server.properties"

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "log" / "meta.properties").exists()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


#: a broker's own temporary data folder (no data_dir given) and the file naming the process that made it
OWN_DATA_PREFIX = "agl-kafka-"
OWNER_FILE = "owner.pid"


def remove_orphaned_data_dirs(tmp: Optional[Path] = None) -> list[Path]:
    """Remove the temporary data folders of brokers whose starter died without stopping them (a SIGKILL
    leaves no chance to clean up; its nodes die with it). A folder whose owner runs, or with no owner file
    (another version, or still being made), is kept."""
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{OWN_DATA_PREFIX}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not psutil.pid_exists(owner):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


class KafkaBroker:
    """A local Apache Kafka cluster of ``brokers`` KRaft nodes, started and stopped by this process."""

    kind = "kafka"

    def __init__(
        self,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        *,
        brokers: int = 1,
        data_dir: Optional[Path] = None,
        log_file: Optional[Path] = None,
        advertised: Optional[Union[str, Sequence[str]]] = None,
        controller_advertised: Optional[Sequence[str]] = None,
        heap_mb: int = DEFAULT_HEAP_MB,
        home: Optional[Path] = None,
        config: Optional[Mapping[str, str]] = None,
        full_jit: bool = False,
    ) -> None:
        """``port`` is the first node's client port (default: free ones for every node). ``advertised``
        (host:port, or one per node) is the address clients and the other nodes are told to use, e.g. a
        test's TCP proxy; ``controller_advertised`` (one per node) is where the other nodes reach each
        node's controller listener (the KRaft voters), so a test can cut controller traffic too.
        ``data_dir`` keeps the nodes' logs and metadata across starts (default: a temporary folder
        removed by :meth:`stop`). ``config`` adds or overrides server properties of every node.
        ``full_jit``: the JVM's optimizing compiler (C2) too; by default only C1 compiles (see :data:`C1_ONLY`)."""
        if brokers < 1:
            raise ValueError("brokers must be at least 1")
        per_node = [advertised] * brokers if advertised is None or isinstance(advertised, str) else list(advertised)
        if advertised is not None and isinstance(advertised, str) and brokers != 1:
            raise ValueError("one advertised address is for a single-node broker; give one per node")
        controllers = list(controller_advertised) if controller_advertised is not None else [None] * brokers
        if len(per_node) != brokers or len(controllers) != brokers:
            raise ValueError(f"advertised addresses: one per node ({brokers})")
        if not 64 <= heap_mb <= 512:
            raise ValueError("heap_mb must be within 64..512 (the local broker's heap cap)")
        self.host = host
        self.heap_mb = heap_mb
        self.full_jit = full_jit
        self.home = home if home is not None else Settings.from_env().kafka_home  # AGL_KAFKA_HOME
        self.extra_config = dict(config or {})
        self._own_data_dir = data_dir is None
        if data_dir is None:
            remove_orphaned_data_dirs()
            self.data_dir = Path(tempfile.mkdtemp(prefix=OWN_DATA_PREFIX))
            (self.data_dir / OWNER_FILE).write_text(str(os.getpid()))
        else:
            self.data_dir = Path(data_dir)
        self.cluster_id_file = self.data_dir / "cluster.id"
        log_base = Path(log_file) if log_file else self.data_dir / "broker.log"
        self.nodes: list[KafkaNode] = []
        for index in range(brokers):
            node_id = index + 1
            node_log = log_base if brokers == 1 else log_base.with_name(f"{log_base.stem}-{node_id}{log_base.suffix}")
            self.nodes.append(
                KafkaNode(
                    node_id=node_id, host=host, port=(port if index == 0 and port else free_port(host)),
                    controller_port=free_port(host), data_dir=self.data_dir / f"node-{node_id}",
                    log_file=node_log, advertised=per_node[index], controller_advertised=controllers[index],
                )  # fmt: skip
            )
        self._install: Optional[KafkaInstall] = None

    # ---------------------------------------------------------------- addresses and state

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def bootstrap(self) -> str:
        """What clients connect to: every node's advertised address."""
        return ",".join(n.advertised or n.address for n in self.nodes)

    @property
    def direct_bootstrap(self) -> str:
        """The nodes' own listeners (bypassing anything advertised in between)."""
        return ",".join(n.address for n in self.nodes)

    @property
    def running(self) -> bool:
        return any(n.running for n in self.nodes)

    @property
    def pid(self) -> Optional[int]:
        return self.nodes[0].pid

    @property
    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes if n.pid is not None]

    def node(self, node_id: int) -> KafkaNode:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id}; nodes are {[n.node_id for n in self.nodes]}")

    # ---------------------------------------------------------------- configuration

    def server_properties(self, node: KafkaNode) -> dict[str, str]:
        n = len(self.nodes)
        replicas = str(min(3, n))
        min_isr = "1" if n == 1 else "2"
        voters = ",".join(f"{m.node_id}@{m.controller_advertised or f'{m.host}:{m.controller_port}'}" for m in self.nodes)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{node.address},CONTROLLER://{node.host}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{node.advertised or node.address}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.data_dir / "log"),
            # topics come from the catalog with their partitions and policies, as in deploy/
            "auto.create.topics.enable": "false",
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "8",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "8",
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            # small pools for a small shared machine
            "num.network.threads": "2",
            "num.io.threads": "4",
            "background.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "num.replica.fetchers": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # default 128 MB: a third of the heap
            "log.index.size.max.bytes": str(1024 * 1024),  # preallocated per segment; thousands of test partitions
            "log.retention.check.interval.ms": "30000",
            "log.cleaner.backoff.ms": "5000",
        }
        props.update(self.extra_config)
        return props

    def _write_config(self, node: KafkaNode) -> None:
        node.data_dir.mkdir(parents=True, exist_ok=True)
        text = "".join(f"{k}={v}\n" for k, v in self.server_properties(node).items())
        node.config_file.write_text(text)

    def _java_command(self, main: str, *args: str, heap_mb: int) -> list[str]:
        assert self._install is not None
        return [
            self._install.java,
            f"-Xms{min(64, heap_mb)}m", f"-Xmx{heap_mb}m",
            "-XX:+UseSerialGC",  # two cores: no parallel GC threads competing with the services
            *([] if self.full_jit else [C1_ONLY]),
            "-XX:MaxMetaspaceSize=128m", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={package_file('log4j2.yaml')}",
            "-cp", self._install.classpath, main, *args,
        ]  # fmt: skip

    def _cluster_id(self) -> str:
        if self.cluster_id_file.exists():
            return self.cluster_id_file.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        self.cluster_id_file.write_text(cluster_id + "\n")
        return cluster_id

    def _format(self, nodes: list[KafkaNode]) -> None:
        """Format the storage of ``nodes`` (first start only), all at once: each is a JVM start."""
        running = []
        for node in nodes:
            self._write_config(node)
            cmd = self._java_command("kafka.tools.StorageTool", "format", "-t", self._cluster_id(),
                                     "-c", str(node.config_file), "--ignore-formatted", heap_mb=128)  # fmt: skip
            running.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                                   preexec_fn=die_with_parent(os.getpid()))))  # fmt: skip
        for node, proc in running:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise BrokerError(f"formatting Kafka node {node.node_id}'s storage failed:\n{out}")

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 90.0) -> "KafkaBroker":
        """Start every node that is not running and wait until the cluster answers with all of them."""
        if self._install is None:
            self._install = kafka_install(self.home)
        began = time.monotonic()
        stopped = [n for n in self.nodes if not n.running]
        self._format([n for n in stopped if not n.formatted])
        for node in stopped:
            self._launch(node)
        self.wait_ready(timeout)
        logger.info(
            "Apache Kafka %s ready at %s: %d KRaft node(s), heap %d MB each, data in %s (%.1f s)",
            KAFKA_VERSION, self.bootstrap, len(self.nodes), self.heap_mb, self.data_dir, time.monotonic() - began,
        )  # fmt: skip
        return self

    def _launch(self, node: KafkaNode) -> None:
        self._write_config(node)
        if not node.formatted:
            self._format([node])
        node.log_file.parent.mkdir(parents=True, exist_ok=True)
        cmd = self._java_command("kafka.Kafka", str(node.config_file), heap_mb=self.heap_mb)
        with open(node.log_file, "ab") as out:
            # SIGKILL, not SIGTERM, when the starter dies: a node's controlled shutdown waits for the controller,
            # and when the whole cluster loses its starter at once no controller answers (measured: three
            # orphaned nodes still up 35 s later). The log is recovered at the next start, as after a crash.
            node.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=die_with_parent(os.getpid(), signal.SIGKILL),
            )  # fmt: skip

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Wait until every running node answers a metadata request, and each answer lists every running node.

        Asking each node itself matters after a restart: the others may still list a node that was
        killed a moment ago, before the controller fences it."""
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.proc is not None and node.proc.poll() is not None:
                    code = node.proc.returncode
                    self.stop()
                    raise BrokerError(f"Kafka node {node.node_id} exited with code {code}:\n{node.log_tail()}")
            running = [n for n in self.nodes if n.running]
            expected = {n.node_id for n in running}
            pending = [n for n in running if not wait_for_port(n.host, n.port, 0)]
            if not pending:  # every listener is up: ask each node (no client error logged per refused try)
                try:
                    for node in running:
                        seen = set(_run_sync(_brokers_listed(node.address)))
                        if not expected <= seen:
                            pending.append(node)
                            last_error = f"node {node.node_id} lists {sorted(seen)}, not yet {sorted(expected)}"
                except Exception as exc:  # not up yet: no metadata, timeout
                    pending.append(node)
                    last_error = f"node {node.node_id}: {type(exc).__name__}: {exc}"
                if not pending:
                    return
            time.sleep(0.25)
        tails = "\n".join(f"--- node {n.node_id}\n{n.log_tail()}" for n in self.nodes)
        self.stop()
        raise BrokerError(f"Apache Kafka did not answer at {self.direct_bootstrap} within {timeout:.0f}s ({last_error})\n{tails}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """A controlled shutdown of every node (SIGTERM, all at once), SIGKILL after ``timeout``."""
        for node in self.nodes:
            if node.running and node.proc is not None:
                node.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            self._reap(node, max(0.1, deadline - time.monotonic()))
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL every node, as a crash of the machine would (the data stays on disk)."""
        for node in self.nodes:
            self.kill_node(node.node_id)

    # ---------------------------------------------------------------- one node (fault injection)

    def stop_node(self, node_id: int, timeout: float = STOP_TIMEOUT) -> None:
        node = self.node(node_id)
        if node.running and node.proc is not None:
            node.proc.send_signal(signal.SIGTERM)
        self._reap(node, timeout)

    def kill_node(self, node_id: int) -> None:
        node = self.node(node_id)
        if node.running and node.proc is not None:
            node.proc.kill()
        self._reap(node, STOP_TIMEOUT)

    def start_node(self, node_id: int, timeout: float = 90.0, *, wait: bool = True) -> None:
        """Start a stopped node again (same ports, same data) and wait until the cluster lists it (unless
        ``wait`` is False: a fault injector restarts a node while another may be paused or cut off)."""
        node = self.node(node_id)
        if not node.running:
            self._launch(node)
        if wait:
            self.wait_ready(timeout)

    def restart(self, timeout: float = 90.0) -> None:
        """Stop every node and start them again: the data, ports and cluster id stay."""
        for node in self.nodes:
            self.stop_node(node.node_id)
        self.start(timeout)

    @staticmethod
    def _reap(node: KafkaNode, timeout: float) -> None:
        proc = node.proc
        if proc is None:
            return
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            logger.warning("Kafka node %d did not stop within %.0fs; killing it", node.node_id, timeout)
            proc.kill()
            proc.wait()
        node.proc = None

    def partition_leaders(self, topic: str) -> dict[int, int]:
        """partition -> the node leading it now, from a metadata round trip to a running node."""
        live = [n for n in self.nodes if n.running]
        if not live:
            raise BrokerError("no Kafka node is running")
        return _run_sync(_leaders(",".join(n.address for n in live), topic))

    def active_controller(self) -> Optional[int]:
        """The node that most recently became the KRaft leader (the active controller), from the nodes' logs."""
        best: Optional[tuple[int, int]] = None
        for node in self.nodes:
            if not node.running:
                continue
            try:
                text = node.log_file.read_text(errors="replace")
            except OSError:
                continue
            for match in _LEADER.finditer(text):
                epoch = int(match.group("epoch"))
                if best is None or epoch > best[0]:
                    best = (epoch, node.node_id)
        return best[1] if best else None

    def __enter__(self) -> "KafkaBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# QuorumState logs "Completed transition to Leader(localVoterNode=..., epoch=3, ...)" when a node becomes the leader.
_LEADER = re.compile(r"Completed transition to Leader\(.*?\bepoch=(?P<epoch>\d+)")


async def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    from aiokafka.client import AIOKafkaClient
    from aiokafka.structs import TopicPartition

    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await asyncio.wait_for(client.bootstrap(), 10.0)
        metadata = await client.fetch_all_metadata()
        parts = metadata.partitions_for_topic(topic) or set()
        return {p: metadata.leader_for_partition(TopicPartition(topic, p)) for p in sorted(parts)}
    finally:
        await client.close()


async def _brokers_listed(address: str) -> list[int]:
    """One metadata round trip to ``address`` only; the ids of the brokers it lists."""
    from aiokafka.client import AIOKafkaClient

    client = AIOKafkaClient(bootstrap_servers=address, request_timeout_ms=3000, metadata_max_age_ms=60_000)
    try:
        await asyncio.wait_for(client.bootstrap(), 5.0)
        return sorted(b.nodeId for b in client.cluster.brokers())
    finally:
        await client.close()
