"""The nemesis: the benchmark workload under a seeded random schedule of faults, then the audit.

    python -m tests.faults.nemesis --seed 7 --duration 300 --rollouts 2000 --every 30

Topology (this first version): the local broker (one node behind a TCP proxy, or ``--brokers 3`` for a
Kafka cluster), the processors service, and ``--runner-hosts`` runner services. Faults, from
:mod:`tests.faults.nemesis.schedule`:
- ``processors``, ``runners-N``: SIGKILL then a restart, SIGSTOP/SIGCONT, or a partition from the broker
  (their connections through the proxy freeze, one node only);
- ``broker-link``: every client's connection to the broker cut (one node only);
- ``broker-N`` (a cluster only: a broker that replicates): SIGKILL then a restart, or SIGSTOP/SIGCONT.
Rollouts are retried when their attempt goes silent (5 s), up to 10 attempts. The run prints its schedule
first (the same from the same seed), and ends with the audit of every rollout from ClickHouse: 0 lost,
0 duplicated, every rollout terminal. Exit status 0 when the audit is clean, 1 when not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
from agl_stream.types import RolloutConfig
from tests.faults.audit import Audit, Enqueued, audit
from tests.faults.harness import Pipeline, make_tasks
from tests.faults.nemesis.schedule import Fault, Target, format_schedule, make_schedule, to_json

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


def targets_for(processes: list[str], *, links: str, broker_nodes: list[int]) -> list[Target]:
    """What the faults can hit. ``links``: ``single`` (one node behind one proxy), ``nodes`` (a cluster with a
    proxy per node listener) or ``none`` (a cluster, no proxies: no partitions). Broker faults need a cluster."""
    cut = ("partition",) if links != "none" else ()
    out = [Target(name, ("kill", "pause", *cut)) for name in processes]
    if links == "single":
        out.append(Target("broker-link", ("partition",)))
    if len(broker_nodes) > 1:
        out += [Target(f"broker-{n}", ("kill", "pause", *cut)) for n in broker_nodes]
    return out


class Executor:
    """Applies faults to a running :class:`Pipeline` and undoes them when their hold is over."""

    def __init__(self, pipe: Pipeline) -> None:
        self.pipe = pipe
        self.partitioned: dict[str, int] = {}  # service -> pid cut off from every broker node
        self.isolated: set[int] = set()  # broker nodes cut off from everyone (clients and the other nodes)
        self.killed: set[str] = set()  # services down by a kill fault, until its restart
        self.crashes: list[dict[str, Any]] = []  # services that exited on their own, restarted as a supervisor would

    def services(self) -> list[ServiceProcess]:
        return [self.pipe.processors, *self.pipe.replicas, *self.pipe.runners]

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

    @property
    def links(self) -> str:
        return "single" if self.pipe.proxy is not None else "nodes" if self.pipe.proxies else "none"

    def targets(self) -> list[Target]:
        pipe = self.pipe
        nodes = [n.node_id for n in pipe.broker.nodes] if isinstance(pipe.broker, KafkaBroker) else []
        processes = ["processors", *(r.name for r in pipe.replicas), *(r.name for r in pipe.runners)]
        return targets_for(processes, links=self.links, broker_nodes=nodes)

    def _service(self, name: str) -> ServiceProcess:
        if name == "processors":
            return self.pipe.processors
        return next(s for s in [*self.pipe.replicas, *self.pipe.runners] if s.name == name)

    def _cut_links(self) -> int:
        """Set every proxy to the partitions in effect; returns the connections frozen."""
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


async def feed(store: StoreClient, tasks: list[dict[str, Any]], enq: Enqueued, spread: float, batch: int = 32) -> None:
    """Enqueue ``tasks`` in batches spread evenly over ``spread`` seconds (an offered load, not saturation)."""
    chunks = [tasks[i : i + batch] for i in range(0, len(tasks), batch)]
    t0 = time.monotonic()
    for i, chunk in enumerate(chunks):
        await asyncio.sleep(max(0.0, t0 + i * spread / len(chunks) - time.monotonic()))
        rollouts = await store.enqueue_many_rollouts([{"input": t, "config": NEMESIS_RETRIES} for t in chunk])
        for task, ro in zip(chunk, rollouts):
            enq.tasks[ro.rollout_id] = task
            enq.enqueued_at[ro.rollout_id] = ro.start_time


async def sample_throughput(store: StoreClient, enq: Enqueued, t0: float, out: list[tuple[float, int]]) -> None:
    while True:
        done = sum(1 for rid in enq.tasks if (s := store.view.snapshot(rid)) is not None and s.rollout.status == "succeeded")
        out.append((round(time.monotonic() - t0, 1), done))
        await asyncio.sleep(1.0)


async def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    pipe = await Pipeline(data_dir / "agl", partitions=4, brokers=args.brokers, processor_args=PROCESSOR_ARGS,
                          node_proxies=args.brokers > 1, processors_replicas=args.processors_replicas).start()  # fmt: skip
    applied, timeline = Applied(), []
    try:
        for i in range(args.runner_hosts):
            pipe.start_runner(concurrency=4, name=f"runners-{i}")
        executor = Executor(pipe)
        faults = make_schedule(args.seed, args.duration, args.every, executor.targets(), quiet_tail=15.0)
        print(format_schedule(args.seed, faults), flush=True)
        assert pipe.settings is not None
        enq = Enqueued()
        async with StoreClient(pipe.settings) as store:
            t0 = time.monotonic()
            sampler = asyncio.create_task(sample_throughput(store, enq, t0, timeline))
            supervisor = asyncio.create_task(executor.restart_crashed(t0))
            tasks = make_tasks(args.rollouts, seed=args.seed, sleep=0.02, prefix=f"nemesis{args.seed}")
            await asyncio.gather(feed(store, tasks, enq, spread=max(1.0, args.duration - 20.0)),
                                 run_schedule(executor, faults, t0, applied))  # fmt: skip
            done = await store.wait_for_rollouts(rollout_ids=list(enq.tasks), timeout=args.timeout)
            sampler.cancel()
            await pipe.wait_drained(timeout=180, check_alive=False)  # the supervisor task restarts what exits
            supervisor.cancel()
        not_terminal = len(enq.tasks) - len(done)
        await asyncio.to_thread(pipe.stop_runners)
        await asyncio.to_thread(pipe.stop_processors)
        result = audit(pipe.settings.effective_clickhouse_dsn, enq)
    finally:
        await pipe.stop()
    return {"seed": args.seed, "duration": args.duration, "rollouts": args.rollouts, "every": args.every,
            "brokers": args.brokers, "runner_hosts": args.runner_hosts,
            "processors_replicas": args.processors_replicas, "schedule": to_json(faults),
            "applied": applied.faults, "crashes": executor.crashes, "not_terminal": not_terminal, "audit": result.__dict__,
            "clean": clean(result) and not_terminal == 0, "timeline": timeline}  # fmt: skip


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
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every rollout after the run")
    parser.add_argument("--schedule-only", action="store_true", help="print the schedule for these targets and exit")
    parser.add_argument("--json", type=Path, default=None, help="write the schedule, what was applied and the audit here")
    parser.add_argument("--data-dir", type=Path, default=None, help="keep the run's data and logs here (default: a temp dir)")
    parser.add_argument("--plot", type=Path, default=None, help="write the faults over throughput here (PNG)")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.schedule_only:
        processes = ["processors", *(f"processors-{i}" for i in range(1, args.processors_replicas)),
                     *(f"runners-{i}" for i in range(args.runner_hosts))]
        targets = targets_for(processes, links="single" if args.brokers == 1 else "nodes",
                              broker_nodes=list(range(1, args.brokers + 1)))  # fmt: skip
        print(format_schedule(args.seed, make_schedule(args.seed, args.duration, args.every, targets, quiet_tail=15.0)))
        return 0
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(run(args, args.data_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="agl-nemesis-") as tmp:
            result = asyncio.run(run(args, Path(tmp)))
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
    for problem in a["problems"][:20]:
        print("  problem:", problem)
    return 0 if result["clean"] else 1


if __name__ == "__main__":
    sys.exit(main())
