"""The nemesis: the benchmark workload under a seeded random schedule of faults, then the audit.

    python -m tests.faults.nemesis --seed 7 --duration 300 --rollouts 2000 --every 30

Topology (default): a three-node Kafka cluster, each node's listeners behind a TCP proxy (``--brokers 1``: one
node behind one proxy), two processors services, two runner services, the learner (``agl-stream trainer``, the
tiny model, GRPO groups of four) and the store front door (``agl-stream ingest store``, reading ClickHouse
through the processors' SQL door, behind a proxy of its own). Half the rollouts are enqueued, waited for and
read back through the front door, half through the native client. Faults, from
:mod:`tests.faults.nemesis.schedule`:
- ``processors``, ``processors-N``, ``runners-N``, ``learner``, ``store``: SIGKILL then a restart,
  SIGSTOP/SIGCONT, or a partition from every broker node (their connections through the proxies freeze);
- ``broker-N`` (a cluster: a broker that replicates): SIGKILL then a restart, SIGSTOP/SIGCONT, or isolation
  from clients and the other nodes; ``broker-link`` (one node): every client cut off;
- ``sql-door``: the SQL door cut off from its readers.
Rollouts are retried when their attempt goes silent (5 s), up to 10 attempts. The run prints its schedule
first (the same from the same seed), and ends with the audit of every rollout from ClickHouse (0 lost, 0
duplicated, every rollout terminal) and of the learner's checkpointed history (steps continuous, policy
versions growing, no rollout trained twice, every succeeded rollout trained). Exit status 0 when clean.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from agl_stream.broker import KafkaBroker
from agl_stream.client import StoreClient
from agl_stream.service import ServiceProcess
from agl_stream.types import TERMINAL_ROLLOUT_STATUSES, RolloutConfig
from tests.agl_stream.runner.tcp_proxy import TcpProxy
from tests.faults.audit import Audit, Enqueued, audit, audit_learner
from tests.faults.harness import Pipeline, ProcessorEnvPipeline, make_tasks
from tests.faults.nemesis.front_door import (DoorClient, DoorStats, enqueue_through_door, sample_reads,
                                             wait_through_door)  # fmt: skip
from tests.faults.nemesis.schedule import Fault, Target, format_schedule, make_schedule, to_json
from tests.faults.nemesis.services import GROUP_SIZE, TOKENS, FrontDoor, Learner, SqlDoor, learner_summary, tiny_model

#: a silent attempt (its runner killed, paused or cut off) is retried after 5 s; ten tries before a rollout fails
NEMESIS_RETRIES = RolloutConfig(unresponsive_seconds=5.0, max_attempts=10, retry_condition=["unresponsive"])
#: the triplet processor gives up on a dead attempt's buffered spans after 15 s (dead letter)
PROCESSOR_ARGS = ("--orphan-seconds", "15")


@dataclass
class Applied:
    """What the executor did, for the report and the plot: (fault, applied at, undone at, note)."""

    faults: list[dict[str, Any]] = field(default_factory=list)

    def record(self, fault: Fault, applied: float, undone: float, note: str = "") -> None:
        self.faults.append({**to_json([fault])[0], "applied_s": round(applied, 2), "undone_s": round(undone, 2), "note": note})


def targets_for(processes: list[str], *, links: str, broker_nodes: list[int], sql_door: bool = False) -> list[Target]:
    """What the faults can hit. ``links``: ``single`` (one node behind one proxy), ``nodes`` (a cluster with a
    proxy per node listener) or ``none`` (a cluster, no proxies: no partitions). Broker faults need a cluster.
    ``sql_door``: the SQL door's readers reach it through a proxy (its link can be cut)."""
    cut = ("partition",) if links != "none" else ()
    out = [Target(name, ("kill", "pause", *cut)) for name in processes]
    if links == "single":
        out.append(Target("broker-link", ("partition",)))
    if len(broker_nodes) > 1:
        out += [Target(f"broker-{n}", ("kill", "pause", *cut)) for n in broker_nodes]
    if sql_door:
        out.append(Target("sql-door", ("partition",)))
    return out


def process_names(processors_replicas: int, runner_hosts: int, *, learner: bool, front_door: bool) -> list[str]:
    return ["processors", *(f"processors-{i}" for i in range(1, processors_replicas)),
            *(f"runners-{i}" for i in range(runner_hosts)), *(["learner"] if learner else []),
            *(["store"] if front_door else [])]  # fmt: skip


class Executor:
    """Applies faults to a running :class:`Pipeline` and undoes them when their hold is over."""

    def __init__(self, pipe: Pipeline, extra: Optional[list[ServiceProcess]] = None,
                 door_proxy: Optional[TcpProxy] = None) -> None:  # fmt: skip
        """``extra``: the learner and the front door; ``door_proxy``: the proxy in front of the SQL door."""
        self.pipe = pipe
        self.extra = list(extra or [])
        self.door_proxy = door_proxy
        self.sql_door_cut = False
        self.partitioned: dict[str, int] = {}  # service -> pid cut off from every broker node
        self.isolated: set[int] = set()  # broker nodes cut off from everyone (clients and the other nodes)
        self.killed: set[str] = set()  # services down by a kill fault, until its restart
        self.crashes: list[dict[str, Any]] = []  # services that exited on their own, restarted as a supervisor would

    def services(self) -> list[ServiceProcess]:
        return [self.pipe.processors, *self.pipe.replicas, *self.pipe.runners, *self.extra]

    async def restart_crashed(self, t0: float, interval: float = 1.0) -> None:
        """A supervisor's job (Kubernetes restarts a pod whose process exited): every service that exited on its
        own is restarted and counted. Crashes are findings, reported beside the audit, never hidden."""
        while True:
            await asyncio.sleep(interval)
            for service in self.services():
                if service.name in self.killed or service.alive or service.returncode is None:
                    continue
                at = round(time.monotonic() - t0, 1)
                self.crashes.append({"at_s": at, "service": service.name, "exit_code": service.returncode,
                                     "last_lines": service.tail(8)})  # fmt: skip
                print(f"  crashed at {at:6.1f} s: {service.name} exited with code {service.returncode}; restarted",
                      flush=True)  # fmt: skip
                if service.name.startswith("processors"):
                    self.pipe.restart_processors(service.name)
                else:
                    service.start()

    def down(self) -> list[str]:
        """What is not running now (services and broker nodes), for the progress lines of a run that waits."""
        out = [f"{s.name} (exit {s.returncode})" for s in self.services() if not s.alive]
        if isinstance(self.pipe.broker, KafkaBroker):
            for node in self.pipe.broker.nodes:
                if not node.running:
                    exit_code = node.proc.poll() if node.proc is not None else None
                    out.append(f"broker-{node.node_id} (exit {exit_code}; log: {node.log_tail(3)!r})")
        return out

    @property
    def links(self) -> str:
        return "single" if self.pipe.proxy is not None else "nodes" if self.pipe.proxies else "none"

    def targets(self) -> list[Target]:
        pipe = self.pipe
        nodes = [n.node_id for n in pipe.broker.nodes] if isinstance(pipe.broker, KafkaBroker) else []
        processes = [s.name for s in self.services()]
        return targets_for(processes, links=self.links, broker_nodes=nodes, sql_door=self.door_proxy is not None)

    def _service(self, name: str) -> ServiceProcess:
        return next(s for s in self.services() if s.name == name)

    def _cut_links(self) -> int:
        """Set every proxy to the partitions in effect; returns the connections frozen."""
        if self.door_proxy is not None:
            self.door_proxy.partition((), isolate=self.sql_door_cut)
        pids = set(self.partitioned.values())
        if self.pipe.proxy is not None:
            return self.pipe.proxy.partition(pids)
        broker = self.pipe.broker
        assert isinstance(broker, KafkaBroker)
        isolated_pids = {pid for n in self.isolated if (pid := broker.node(n).pid) is not None}
        frozen = 0
        for node_id, proxies in self.pipe.proxies.items():
            for proxy in proxies:
                frozen += proxy.partition(pids | isolated_pids, isolate=node_id in self.isolated)
        return frozen

    async def apply(self, fault: Fault) -> str:
        if fault.target == "sql-door":
            self.sql_door_cut = True
            self._cut_links()
            return "the SQL door cut off from its readers"
        if fault.target == "broker-link":
            assert self.pipe.proxy is not None
            await self.pipe.proxy.cut()
            return "every client cut off"
        if fault.target.startswith("broker-"):
            node_id = int(fault.target.split("-", 1)[1])
            if fault.kind == "partition":
                self.isolated.add(node_id)
                return f"{self._cut_links()} connections frozen"
            return await self._broker_node(fault, undo=False)
        service = self._service(fault.target)
        if fault.kind == "kill":
            self.killed.add(fault.target)
            await asyncio.to_thread(service.kill)
            return ""
        if fault.kind == "pause":
            service.pause()
            return ""
        assert service.pid is not None
        self.partitioned[fault.target] = service.pid
        return f"{self._cut_links()} connections frozen"

    async def undo(self, fault: Fault) -> str:
        if fault.target == "sql-door":
            self.sql_door_cut = False
            self._cut_links()
            return ""
        if fault.target == "broker-link":
            assert self.pipe.proxy is not None
            await self.pipe.proxy.restore()
            return ""
        if fault.target.startswith("broker-"):
            if fault.kind == "partition":
                self.isolated.discard(int(fault.target.split("-", 1)[1]))
                self._cut_links()
                return ""
            return await self._broker_node(fault, undo=True)
        service = self._service(fault.target)
        if fault.kind == "kill":
            if fault.target.startswith("processors"):
                self.pipe.restart_processors(fault.target)
            else:
                service.start()
            self.killed.discard(fault.target)
            return "restarted"
        if fault.kind == "pause":
            service.resume()
            return ""
        self.partitioned.pop(fault.target, None)
        self._cut_links()
        return ""

    async def _broker_node(self, fault: Fault, *, undo: bool) -> str:
        broker = self.pipe.broker
        assert isinstance(broker, KafkaBroker)
        node = broker.node(int(fault.target.split("-", 1)[1]))
        if fault.kind == "kill":
            if undo:  # no wait for the cluster to list it: another node may be paused or cut off meanwhile
                await asyncio.to_thread(broker.start_node, node.node_id, wait=False)
                return "restarted"
            await asyncio.to_thread(broker.kill_node, node.node_id)
            return ""
        assert node.pid is not None
        os.kill(node.pid, signal.SIGCONT if undo else signal.SIGSTOP)
        return ""


async def run_schedule(executor: Executor, faults: list[Fault], t0: float, applied: Applied) -> None:
    """Each fault at its time, undone after its hold; several can be in effect at once."""

    async def one(fault: Fault) -> None:
        await asyncio.sleep(max(0.0, t0 + fault.at - time.monotonic()))
        began = time.monotonic() - t0
        note = await executor.apply(fault)
        print(f"  applied at {began:6.1f} s: {fault.describe(at=False)}{'; ' + note if note else ''}", flush=True)
        await asyncio.sleep(fault.hold)
        note_undo = await executor.undo(fault)
        applied.record(fault, began, time.monotonic() - t0, "; ".join(n for n in (note, note_undo) if n))

    await asyncio.gather(*(one(f) for f in faults))


def enqueue_items(tasks: list[dict[str, Any]], first_index: int, prefix: str) -> list[dict[str, Any]]:
    """Enqueue requests in train mode, four consecutive tasks to a GRPO group (the learner's groups)."""
    return [{"input": task, "mode": "train", "config": NEMESIS_RETRIES.model_dump(mode="json"),
             "metadata": {"group_id": f"{prefix}-g{(first_index + i) // GROUP_SIZE:06d}"}}
            for i, task in enumerate(tasks)]  # fmt: skip


async def feed(store: StoreClient, door: Optional[DoorClient], tasks: list[dict[str, Any]], enq: Enqueued,
               via_door: set[str], spread: float, prefix: str, batch: int = 32) -> None:  # fmt: skip
    """Enqueue ``tasks`` in batches spread evenly over ``spread`` seconds (an offered load, not saturation);
    with a front door, every other batch goes through it. Batches are whole groups (``batch`` a multiple of 4)."""
    chunks = [(i, tasks[i : i + batch]) for i in range(0, len(tasks), batch)]
    t0 = time.monotonic()
    for n, (first, chunk) in enumerate(chunks):
        await asyncio.sleep(max(0.0, t0 + n * spread / len(chunks) - time.monotonic()))
        items = enqueue_items(chunk, first, prefix)
        if door is not None and n % 2 == 1:
            await enqueue_through_door(door, items, chunk, enq, via_door)
            continue
        rollouts = await store.enqueue_many_rollouts(items)
        for task, ro in zip(chunk, rollouts):
            enq.tasks[ro.rollout_id] = task
            enq.enqueued_at[ro.rollout_id] = ro.start_time


def succeeded_ids(store: StoreClient, enq: Enqueued) -> list[str]:
    return [rid for rid in list(enq.tasks) if (s := store.view.snapshot(rid)) is not None and s.rollout.status == "succeeded"]


async def sample_throughput(store: StoreClient, enq: Enqueued, t0: float, out: list[tuple[float, int]],
                            report_every: float = 60.0) -> None:  # fmt: skip
    """Succeeded rollouts every second (the plot's timeline); every ``report_every`` s a progress line."""
    reported = (0.0, 0)
    while True:
        now, done = round(time.monotonic() - t0, 1), len(succeeded_ids(store, enq))
        out.append((now, done))
        if now - reported[0] >= report_every:
            rate = (done - reported[1]) / max(now - reported[0], 1e-9)
            print(f"  {now:6.1f} s: {len(enq.tasks)} enqueued, {done} succeeded ({rate:.1f}/s over the last "
                  f"{now - reported[0]:.0f} s)", flush=True)  # fmt: skip
            reported = (now, done)
        await asyncio.sleep(1.0)


def describe_stuck(store: StoreClient, enq: Enqueued) -> list[str]:
    """Each rollout not terminal in the state machine's view: its status and its latest attempt's."""
    out = []
    for rid in list(enq.tasks):
        snap = store.view.snapshot(rid)
        if snap is None:
            out.append(f"{rid}: unknown to the state machine")
        elif snap.rollout.status not in TERMINAL_ROLLOUT_STATUSES:
            a = snap.attempt
            last = f"attempt {snap.attempts} {a.attempt_id} {a.status} on {a.worker_id}" if a is not None else "no attempt"
            out.append(f"{rid}: {snap.rollout.status}, {last}, updated {time.time() - snap.updated_at:.0f} s ago")
    return out


async def report_waiting(store: StoreClient, enq: Enqueued, executor: Executor, t0: float, every: float = 15.0) -> None:
    """While the run waits for its last rollouts: how many are left, the first few of them, and what is down."""
    while True:
        await asyncio.sleep(every)
        stuck = describe_stuck(store, enq)
        down = executor.down()
        print(f"  {time.monotonic() - t0:6.1f} s: {len(stuck)} rollouts not terminal; down: {', '.join(down) or 'nothing'}"
              + "".join(f"\n    {line}" for line in stuck[:3]), flush=True)  # fmt: skip


async def wait_learner(learner: Learner, succeeded: set[str], timeout: float, *, stall: float = 90.0,
                       report_every: float = 30.0) -> None:  # fmt: skip
    """Until the learner's runs together trained every succeeded rollout, or trained none more for ``stall``
    seconds, or ``timeout`` (the audit says what is untrained). On 2 cores the learner trails the workload
    (1-1.2 steps/s while the stack runs, 2 once it idles), so a long run ends with a backlog it works off."""
    began = last_progress = last_report = time.monotonic()
    best = -1
    while time.monotonic() - began < timeout:
        trained = len(succeeded & set(audit_learner(await asyncio.to_thread(learner.runs)).trained))
        if trained >= len(succeeded):
            return
        now = time.monotonic()
        if trained > best:
            best, last_progress = trained, now
        elif now - last_progress >= stall:
            print(f"  the learner trained nothing more for {stall:.0f} s ({trained} of {len(succeeded)})", flush=True)
            return
        if now - last_report >= report_every:
            print(f"  learner: {trained} of {len(succeeded)} succeeded rollouts trained", flush=True)
            last_report = now
        await asyncio.sleep(2.0)


async def start_extras(args: argparse.Namespace, pipe: Pipeline, door: SqlDoor,
                       data_dir: Path) -> tuple[Optional[Learner], Optional[FrontDoor], Optional[TcpProxy]]:  # fmt: skip
    """The learner, the front door and the proxy in front of the SQL door, on a started pipeline."""
    assert pipe.stack is not None
    env = pipe.stack.env()
    learner = front = proxy = None
    if args.learner:
        model = await asyncio.to_thread(tiny_model, data_dir)
        learner = Learner(env, data_dir / "learner", model).start()
    if args.front_door:
        proxy = TcpProxy(door.proxy_port, "127.0.0.1", door.port)
        await proxy.start()
        front = FrontDoor(env, door, data_dir / "logs")
        front.start()
        if not await asyncio.to_thread(front.wait_for_log, "Application startup complete", 120):
            raise RuntimeError(f"the front door did not start:\n{front.tail(40)}")
    return learner, front, proxy


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    door = SqlDoor()
    pipe = await ProcessorEnvPipeline(data_dir / "agl", processor_env=door.processor_env(), partitions=4,
                                      brokers=args.brokers, processor_args=PROCESSOR_ARGS, node_proxies=args.brokers > 1,
                                      processors_replicas=args.processors_replicas).start()  # fmt: skip
    applied, timeline = Applied(), []
    learner: Optional[Learner] = None
    front: Optional[FrontDoor] = None
    stuck: list[str] = []
    background: list[asyncio.Task[Any]] = []  # ended before anything stops: they use the services
    harness_errors: list[str] = []
    door_proxy: Optional[TcpProxy] = None
    stats = DoorStats()
    via_door: set[str] = set()
    try:
        for i in range(args.runner_hosts):
            pipe.start_runner(concurrency=4, name=f"runners-{i}")
        learner, front, door_proxy = await start_extras(args, pipe, door, data_dir)
        extra = [s for s in (learner, front) if s is not None]
        executor = Executor(pipe, extra, door_proxy)
        faults = make_schedule(args.seed, args.duration, args.every, executor.targets(), quiet_tail=15.0)
        print(format_schedule(args.seed, faults), flush=True)
        assert pipe.settings is not None
        enq = Enqueued()
        client = DoorClient(front.url, stats) if front is not None else None
        async with StoreClient(pipe.settings) as store:
            t0 = time.monotonic()
            background += [asyncio.create_task(sample_throughput(store, enq, t0, timeline)),
                          asyncio.create_task(executor.restart_crashed(t0))]  # fmt: skip
            if client is not None:
                background.append(asyncio.create_task(
                    sample_reads(client, lambda: succeeded_ids(store, enq), enq, via_door, args.seed)))  # fmt: skip
            prefix = f"nemesis{args.seed}"
            tasks = make_tasks(args.rollouts, seed=args.seed, sleep=0.02, prefix=prefix,
                               tokens=TOKENS if learner is not None else 0)  # fmt: skip
            await asyncio.gather(feed(store, client, tasks, enq, via_door, spread=max(1.0, args.duration - 20.0), prefix=prefix),
                                 run_schedule(executor, faults, t0, applied))  # fmt: skip
            print(f"  schedule done at {time.monotonic() - t0:6.1f} s; waiting for every rollout", flush=True)
            # one deadline for everything after the schedule (rollouts, drain, learner): a run that cannot finish
            # ends on time with what is stuck, instead of outliving its caller's patience
            deadline = time.monotonic() + args.timeout
            native = [rid for rid in enq.tasks if rid not in via_door]
            waits = [store.wait_for_rollouts(rollout_ids=native, timeout=args.timeout)]
            if client is not None:
                waits.append(wait_through_door(client, sorted(via_door), timeout=args.timeout))
            progress = asyncio.create_task(report_waiting(store, enq, executor, t0))
            try:
                done_native, *done_door = await asyncio.gather(*waits)
            finally:
                progress.cancel()
            not_terminal = len(native) - len(done_native) + (len(via_door) - len(done_door[0]) if done_door else 0)
            stuck = describe_stuck(store, enq) if not_terminal else []  # (the native view may lag the door's)
            for line in stuck[:20]:
                print(f"  not terminal: {line}", flush=True)
            if stuck:
                print(f"  down: {', '.join(executor.down()) or 'nothing'}", flush=True)
            background[0].cancel()
            print(f"  rollouts terminal at {time.monotonic() - t0:6.1f} s ({not_terminal} not); draining", flush=True)

            def left() -> float:  # the drain and the learner get at least 30 s each, even past the deadline
                return max(30.0, deadline - time.monotonic())

            await pipe.wait_drained(timeout=min(180.0, left()), check_alive=False)  # the supervisor task restarts what exits
            succeeded = set(succeeded_ids(store, enq))
            if learner is not None:
                print(f"  drained at {time.monotonic() - t0:6.1f} s; the learner catches up", flush=True)
                await wait_learner(learner, succeeded, timeout=max(args.learner_timeout, min(300.0, left())))
                print(f"  learner done at {time.monotonic() - t0:6.1f} s", flush=True)
            for task in background:  # the span reader uses the client closed next (the finally reaps them)
                task.cancel()
            if client is not None:
                await client.close()
        if learner is not None:  # a graceful stop checkpoints what it trained; the audit reads the checkpointed history
            await asyncio.to_thread(learner.stop, 60)
        if front is not None:
            await asyncio.to_thread(front.stop)
        await asyncio.to_thread(pipe.stop_runners)
        await asyncio.to_thread(pipe.stop_processors)
        result = audit(pipe.settings.effective_clickhouse_dsn, enq)
        learned: dict[str, Any] = {}
        if learner is not None:
            # the checkpointed history (every run, then a resume from the latest checkpoint) is the one audited for
            # continuity and doubles; the learner has no graceful stop (a restart retrains what followed its last
            # checkpoint), so "trained" counts the last run's steps after it too
            runs = learner.runs()
            history = audit_learner([*runs, (learner.latest_checkpoint_step(), [])])
            learned = learner_summary(learner, history, succeeded, trained=set(audit_learner(runs).trained))
    finally:
        for task in background:
            task.cancel()
        ended = await asyncio.gather(*background, return_exceptions=True)
        for outcome in ended:  # a sampler or the restarter that died is a broken run, not a clean one
            if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
                print(f"  a background task of the run failed: {outcome!r}", flush=True)
                harness_errors.append(repr(outcome))
        for service in (learner, front):
            if service is not None:
                await asyncio.to_thread(service.stop)
        if door_proxy is not None:
            await door_proxy.stop()
        await pipe.stop()
    door_section = {**stats.__dict__, "via_door": len(via_door)} if front is not None else {}
    learner_clean = not learned or (not learned["problems"] and learned["steps"] > 0
                                    and (learned["untrained"] == 0 or result.failed > 0))  # fmt: skip
    door_clean = not door_section or (not stats.wrong_reads and not stats.failed_requests
                                      and stats.waited == len(via_door))  # fmt: skip
    return {"seed": args.seed, "duration": args.duration, "rollouts": args.rollouts, "every": args.every,
            "brokers": args.brokers, "runner_hosts": args.runner_hosts,
            "processors_replicas": args.processors_replicas, "schedule": to_json(faults),
            "applied": applied.faults, "crashes": executor.crashes, "not_terminal": not_terminal, "stuck": stuck, "audit": result.__dict__,
            "learner": learned, "front_door": door_section,
            "harness_errors": harness_errors,
            "clean": clean(result) and not_terminal == 0 and learner_clean and door_clean and not harness_errors,
            "timeline": timeline}  # fmt: skip


def clean(result: Audit) -> bool:
    """0 lost, 0 duplicated, nothing else wrong; rollouts that failed after every retry are counted, not hidden."""
    return result.lost == 0 and result.duplicates == 0 and not result.problems


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.nemesis", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (the same seed, the same schedule)")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of workload under faults")
    parser.add_argument("--rollouts", type=int, default=2000, help="rollouts enqueued, spread over the duration")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between faults, on average")
    parser.add_argument("--brokers", type=int, default=3,
                        help="3: a Kafka cluster, each node's listeners behind a proxy; 1: one node behind a proxy")
    parser.add_argument("--processors-replicas", type=int, default=2,
                        help="processors services: the first runs every app, the others the state machine and triplets")
    parser.add_argument("--runner-hosts", type=int, default=2, help="runner services (hosts)")
    parser.add_argument("--learner", action=argparse.BooleanOptionalAction, default=True,
                        help="run the learner (the tiny model) on the triplets, and audit its checkpointed history")
    parser.add_argument("--front-door", action=argparse.BooleanOptionalAction, default=True,
                        help="run the store front door; half the rollouts go through it, their spans read back")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every rollout after the run")
    parser.add_argument("--learner-timeout", type=float, default=0.0,
                        help="seconds the learner may take to work off its backlog after the rollouts (at least "
                             "min(300, what --timeout leaves); it stops earlier once it trains nothing for 90 s)")
    parser.add_argument("--schedule-only", action="store_true", help="print the schedule for these targets and exit")
    parser.add_argument("--json", type=Path, default=None, help="write the schedule, what was applied and the audit here")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="keep the run's data and logs here (default: a temp dir, removed if the run is clean)")
    parser.add_argument("--plot", type=Path, default=None, help="write the faults over throughput here (PNG)")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.schedule_only:
        processes = process_names(args.processors_replicas, args.runner_hosts, learner=args.learner,
                                  front_door=args.front_door)  # fmt: skip
        targets = targets_for(processes, links="single" if args.brokers == 1 else "nodes",
                              broker_nodes=list(range(1, args.brokers + 1)), sql_door=args.front_door)  # fmt: skip
        print(format_schedule(args.seed, make_schedule(args.seed, args.duration, args.every, targets, quiet_tail=15.0)))
        return 0
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(run(args, args.data_dir))
    else:
        tmp = Path(tempfile.mkdtemp(prefix="agl-nemesis-"))
        result = asyncio.run(run(args, tmp))
        if result["clean"]:
            shutil.rmtree(tmp, ignore_errors=True)
        else:  # the evidence of a run that found something is worth more than the disk it takes
            print(f"the run is not clean: its data and logs are kept in {tmp}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2, default=str))
    if args.plot:
        from tests.faults.nemesis.plot import plot

        plot(result, args.plot)
    a = result["audit"]
    print(f"nemesis seed {args.seed}: enqueued {a['enqueued']}, succeeded {a['succeeded']}, failed {a['failed']}, "
          f"lost {a['lost']}, duplicated {a['duplicates']}, not terminal {result['not_terminal']}, "
          f"{len(result['applied'])} faults, {len(result['crashes'])} crashes restarted "
          f"-> {'clean' if result['clean'] else 'NOT CLEAN'}")  # fmt: skip
    if result["learner"]:
        ln = result["learner"]
        print(f"  learner: {ln['runs']} run(s), {ln['steps']} checkpointed steps, {ln['trained_rollouts']} rollouts "
              f"trained, {ln['twice']} twice, {ln['untrained']} succeeded but untrained")  # fmt: skip
        for problem in ln["problems"][:10]:
            print("  learner problem:", problem)
    if result["front_door"]:
        fd = result["front_door"]
        print(f"  front door: {fd['via_door']} rollouts through it, {fd['waited']} waited terminal, {fd['reads']} span "
              f"reads checked, {len(fd['wrong_reads'])} wrong, {fd['retries']} requests retried, "
              f"{fd['unanswered_batches']} enqueue batches unanswered, {len(fd['failed_requests'])} failed")  # fmt: skip
        for wrong in [*fd["wrong_reads"], *fd["failed_requests"]][:10]:
            print("  front door problem:", wrong)
    for problem in a["problems"][:20]:
        print("  problem:", problem)
    return 0 if result["clean"] else 1


if __name__ == "__main__":
    sys.exit(main())
