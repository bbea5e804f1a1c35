"""Fault injection against the real pipeline: nothing enqueued is lost, nothing is written twice.

Every scenario runs the benchmark's rollout workload (``tests/benchmarks/workload_agent.py``)
through the real local broker (Apache Kafka, behind a TCP proxy), the ``agl-stream processors`` service with the
embedded ClickHouse, and ``agl-stream runner`` processes; breaks one part mid-stream; then audits
ClickHouse against the tasks' ground truth (:func:`tests.faults.harness.audit`) and prints
``enqueued, succeeded, failed, spans, triplets, duplicates, lost``.

Each scenario has a reduced size that runs in ``make test`` and a full size marked ``chaos``
(``make chaos``). Outages last 10 s in both.

"The broker stops" is a SIGKILL of the Kafka broker and a restart 10 s later on the same data. On
the Tansu fallback (memory engine: a restarted process comes back empty) the broker is cut off the
network for 10 s instead. A three-node cluster's faults (a node, the active controller, a rolling
restart) are in ``test_chaos_kafka_cluster.py``.

The other scenarios live next to this file: the learner SIGKILLed mid-step and resumed from its
checkpoint (``test_chaos_learner.py``), ClickHouse unavailable and ClickHouse slow enough to back
the pipeline up (``test_chaos_clickhouse.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Awaitable, Callable, Optional

import pytest

from agl_stream.broker import KafkaBroker
from agl_stream.client import StoreClient
from agl_stream.types import RolloutConfig
from tests.faults.audit import Audit, Enqueued, audit
from tests.faults.harness import Pipeline, enqueue, make_tasks
from tests.faults.report import report
from tests.faults.scenario import assert_exactly_once, count, reduced_or_full, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

Fault = Callable[[Pipeline, StoreClient, Enqueued], Awaitable[Optional[str]]]
OUTAGE_S = 10.0
# longer than RETRY_SILENT's unresponsive_seconds (5 s) and the runners' group session (6 s)
PARTITION_S = 12.0


def running_on(store: StoreClient, enq: Enqueued, worker_suffix: str) -> int:
    """Rollouts of ``enq`` running an attempt on the worker whose id ends with ``worker_suffix``."""
    snaps = [store.view.snapshot(rid) for rid in enq.tasks]  # the client's view of agl.rollouts
    return sum(1 for s in snaps if s is not None and s.rollout.status == "running" and s.attempt is not None
               and (s.attempt.worker_id or "").endswith(worker_suffix))  # fmt: skip


async def busy_runner(pipe: Pipeline, store: StoreClient, enq: Enqueued, *, running: int, succeeded: int) -> tuple[int, int]:
    """Wait until ``succeeded`` rollouts are done and some runner has ``running`` attempts; (its index, count).

    Either runner will do: the group may give every partition to one runner for a while, so
    waiting for a particular one can outlast the whole workload. A worker id ends in its process id.
    """
    def busiest() -> tuple[int, int]:
        counts = [running_on(store, enq, f"-{r.pid}") for r in pipe.runners]
        return max(enumerate(counts), key=lambda item: item[1])

    await until(lambda: count(store, enq, "succeeded") >= succeeded and busiest()[1] >= running, 120,
                f"a runner with {running} attempts running", pipe)  # fmt: skip
    return busiest()


async def run_scenario(tmp_path: Path, name: str, n: int, fault: Fault, *, runners: int = 2, concurrency: int = 4,
                       sleep: float = 0.02, timeout: float = 240.0, processor_args: tuple[str, ...] = (),
                       config: Optional[RolloutConfig] = None, brokers: int = 1,
                       drain_timeout: float = 120.0) -> tuple[Audit, Pipeline]:  # fmt: skip
    """``brokers`` > 1: a Kafka cluster of that many nodes (``test_chaos_kafka_cluster.py``)."""
    pipe = await Pipeline(tmp_path / "agl", processor_args=processor_args, brokers=brokers).start()
    try:
        for i in range(runners):
            pipe.start_runner(concurrency=concurrency, name=f"runner-{i}")
        assert pipe.settings is not None
        async with StoreClient(pipe.settings) as store:
            enq = await enqueue(store, make_tasks(n, seed=n, sleep=sleep, prefix=name), batch=32, config=config)
            note = await fault(pipe, store, enq)
            done = await store.wait_for_rollouts(rollout_ids=list(enq.tasks), timeout=timeout)
            if len(done) != n:
                note = f"{note}; {n - len(done)} rollouts not terminal after {timeout:.0f} s"
        await pipe.wait_drained(timeout=drain_timeout)
        # off the event loop: it also runs the TCP proxy every client connects through
        await asyncio.to_thread(pipe.stop_runners)
        await asyncio.to_thread(pipe.stop_processors)
        assert pipe.processors.returncode == 0, f"the processors did not stop cleanly:\n{pipe.processors.tail()[-3000:]}"
        result = audit(pipe.settings.effective_clickhouse_dsn, enq)
    finally:
        await pipe.stop()
    report(result.line(name) + (f" [{note}]" if note else ""))
    return result, pipe


# A killed runner's attempt stops heartbeating: the state machine closes it as ``unresponsive`` after
# 5 s and requeues the rollout as a new attempt (upstream's retry rules, opted into per rollout).
# The triplet processor gives up on the dead attempt's buffered spans after 15 s (dead letter).
RETRY_SILENT = RolloutConfig(unresponsive_seconds=5.0, max_attempts=3, retry_condition=["unresponsive"])
ORPHAN_ARGS = ("--orphan-seconds", "15")


# ---------------------------------------------------------------- runner SIGKILL


@pytest.mark.parametrize("n", reduced_or_full(16, 200))
async def test_sigkill_runner_mid_rollout(workdir: Path, n: int) -> None:
    async def kill_runner(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> str:
        # mid-stream: some rollouts done, and attempts running on the victim
        victim, running = await busy_runner(pipe, store, enq, running=2, succeeded=2)
        pipe.runners[victim].kill()
        return f"SIGKILLed runner-{victim} with {running} of its attempts running"

    result, pipe = await run_scenario(workdir, "sigkill-runner", n, kill_runner, sleep=0.05, config=RETRY_SILENT,
                                      processor_args=ORPHAN_ARGS)  # fmt: skip
    # the kill interrupted attempts that another runner then ran to success
    from agl_stream_processors.clickhouse import connect

    ch = connect(str(pipe.settings.effective_clickhouse_dsn))  # type: ignore[union-attr]
    try:
        retried = ch.scalar(
            "SELECT count() FROM (SELECT RolloutId FROM attempts FINAL WHERE Kind = 'started' "
            "GROUP BY RolloutId HAVING uniqExact(AttemptId) > 1)"
        )
    finally:
        ch.close()
    assert retried >= 1, "no rollout was interrupted by the kill and retried as a new attempt"
    assert_exactly_once(result)


# ---------------------------------------------------------------- runner network partition


@pytest.mark.parametrize("n", reduced_or_full(16, 200))
async def test_runner_network_partition(workdir: Path, n: int) -> None:
    """A runner keeps running but cannot reach the broker for longer than ``unresponsive_seconds``.

    Its running attempts go unresponsive and are retried on the other runner; when the link heals,
    their spans and ``finished`` events (buffered by the cut-off runner's producer) arrive after the
    retries. Exactly one trajectory per rollout may be trainable: the retries' trajectories are
    ``final``, the late ones ``superseded``.
    """

    async def partition(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> str:
        victim, running = await busy_runner(pipe, store, enq, running=2, succeeded=2)
        assert pipe.proxy is not None and pipe.runners[victim].pid is not None
        frozen = pipe.proxy.partition([pipe.runners[victim].pid])
        await asyncio.sleep(PARTITION_S)
        pipe.proxy.heal()
        return (f"runner-{victim} cut off the broker for {PARTITION_S:.0f} s with {running} attempts running "
                f"({frozen} connections frozen)")  # fmt: skip

    # the cut-off runner delivers everything once healed: its attempts are not orphans (unlike a killed runner's)
    result, _ = await run_scenario(workdir, "runner-partition", n, partition, sleep=0.05, config=RETRY_SILENT,
                                   processor_args=("--orphan-seconds", "120"))  # fmt: skip
    assert_exactly_once(result)
    assert result.superseded >= 1, "no attempt of the cut-off runner reported after its retry: the race was not exercised"


# ---------------------------------------------------------------- processors SIGKILL


@pytest.mark.parametrize("n", reduced_or_full(16, 200))
async def test_sigkill_processors_and_restart(workdir: Path, n: int) -> None:
    async def kill_processors(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> str:
        await until(lambda: count(store, enq, "succeeded") >= max(3, n // 5), 120, "rollouts to succeed", pipe)
        done = count(store, enq, "succeeded")
        pipe.processors.kill()
        await asyncio.sleep(2.0)
        pipe.restart_processors()
        return f"SIGKILLed the processors after {done} succeeded, restarted 2 s later"

    result, _ = await run_scenario(workdir, "sigkill-processors", n, kill_processors, timeout=120 if n < 100 else 240)
    assert_exactly_once(result)


# ---------------------------------------------------------------- broker outage


@pytest.mark.parametrize("n", reduced_or_full(16, 200))
async def test_broker_crash_and_restart(workdir: Path, n: int) -> None:
    """The broker is SIGKILLed mid-stream and started again 10 s later with its data (Apache Kafka).

    On the Tansu fallback a restart would come back empty (memory engine), so there the broker is
    cut off the network for the same 10 s instead: what clients see of a restart, without the loss."""
    async def outage(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> str:
        await until(lambda: count(store, enq, "succeeded") >= 3, 120, "rollouts to succeed", pipe)
        if isinstance(pipe.broker, KafkaBroker):
            await asyncio.to_thread(pipe.broker.kill)
            await asyncio.sleep(OUTAGE_S)
            await asyncio.to_thread(pipe.broker.start)
            return f"broker SIGKILLed, restarted {OUTAGE_S:.0f} s later"
        assert pipe.proxy is not None
        await pipe.proxy.cut()
        await asyncio.sleep(OUTAGE_S)
        await pipe.proxy.restore()
        return f"broker (Tansu) unreachable for {OUTAGE_S:.0f} s"

    # Runners lose their group session during the outage and the group rebalances after it: claimed
    # attempts run on where they are, unclaimed tasks go to whichever runner owns their partition then.
    result, _ = await run_scenario(workdir, "broker-restart", n, outage, sleep=0.05)
    assert_exactly_once(result)
