"""Fault injection on the ClickHouse side of the real pipeline: an outage, and a slow ClickHouse.

Same setup and audit as ``tests/faults/test_chaos.py`` (a real Tansu broker behind a TCP proxy, the
``agl-stream processors`` service owning the embedded chdb, ``agl-stream runner`` processes of the
benchmark workload, then :func:`tests.faults.harness.audit` from ClickHouse), with one difference:
how ClickHouse is broken.

chdb is embedded in the processors process (one process per data directory), so there is no
server to stop, and the tests run as root, so file permissions cannot take the data away either.
The fault is injected at the ClickHouse client seam instead, the way the TCP proxy does it for
Kafka: the processors start with ``AGL_CLICKHOUSE_FAILPOINT=<file>``
(:mod:`agl_stream_processors.clickhouse.failpoint`, read once at connect time; unset, it costs nothing).
While the file exists, every call through the sinks' client raises
``clickhouse_connect.driver.exceptions.OperationalError`` (what clickhouse-connect raises for an
unreachable server); if the file holds a number, every call first sleeps that many seconds and
then succeeds (a slow server).

* ``test_clickhouse_outage``: after a few rollouts succeeded, ClickHouse is "down" for 10 s. The
  sinks must retry with backoff (their health shows the injected error and growing ``retries``),
  commit nothing while down, keep the service running, and write everything afterwards.
* ``test_slow_clickhouse_backpressure``: every ClickHouse call takes 1.5 s for 20 s while the
  runners keep producing. The sinks (run with ``--sink-batch-size 32``, so that the backlog is
  far larger than what they may hold) must keep ``pending`` within ``max_pending`` (two batches),
  the processors' RSS must stay below baseline + 300 MB, and the backlog must sit in Kafka (the span
  sink's consumer lag exceeds its ``max_pending``) while rollouts keep succeeding.

Both end with the exactly-once audit: every enqueued rollout succeeded, 0 duplicates, 0 lost. Each
has a reduced size (16 rollouts, ``make test``) and a full size marked ``chaos`` (200, ``make chaos``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

import pytest

from agl_stream.client import StoreClient
from agl_stream_processors.clickhouse.failpoint import ENV as FAILPOINT_ENV
from tests.faults.audit import Audit, Enqueued, audit
from tests.faults.harness import (
    KafkaOffsets,
    Pipeline,
    ProcessorEnvPipeline,
    clear_clickhouse_failpoint,
    clickhouse_failpoint,
    enqueue,
    make_tasks,
    process_tree_rss,
)
from tests.faults.report import report
from tests.faults.scenario import assert_exactly_once, count, reduced_or_full, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

OUTAGE_S = 10.0
SLOW_WINDOW_S = 20.0
SLOW_CALL_S = 1.5  # every ClickHouse call in the slow window takes this long (calls are serialized)
SINK_BATCH = 32  # slow scenario: a small batch makes the sinks' bound (2 batches) smaller than the backlog
RSS_BOUND_MB = 300  # slow scenario: peak processors RSS may exceed the pre-window baseline by at most this
FAILPOINT_MESSAGE = "injected by failpoint"


# ---------------------------------------------------------------- observation


@dataclass
class Sample:
    at: float  # time.monotonic()
    sinks: dict[str, dict[str, Any]]  # the sinks' health report (one entry per sink)


@dataclass
class Watch:
    """What the scenario saw of the processors while it ran: health reports (each new one), RSS, span lag."""

    pipe: Pipeline
    offsets: KafkaOffsets
    pid: int
    health: list[Sample] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)
    span_lag: list[tuple[float, int]] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        mtime = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            self.rss.append((now, process_tree_rss(self.pid)))
            try:
                current = self.pipe.health_file.stat().st_mtime
            except OSError:
                current = mtime
            if current != mtime:
                mtime = current
                sinks = self.pipe.health().get("apps", {}).get("sinks", {})
                self.health.append(Sample(now, {k: v for k, v in sinks.items() if isinstance(v, dict)}))
            try:
                self.span_lag.append((now, await self.offsets.lag("agl-sink-spans", "spans")))
            except Exception:  # noqa: BLE001 - a sample missed (e.g. the group coordinator moving); keep sampling
                pass
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=0.25)
            except asyncio.TimeoutError:
                pass

    def stop(self) -> None:
        self._stop.set()

    def mark(self, name: str) -> None:
        self.marks[name] = time.monotonic()

    def between(self, series: list[Any], start: str, end: Optional[str] = None) -> list[Any]:
        lo, hi = self.marks[start], self.marks.get(end or "", float("inf"))
        return [s for s in series if lo <= (s.at if isinstance(s, Sample) else s[0]) <= hi]

    def latest_sinks(self) -> dict[str, dict[str, Any]]:
        return self.health[-1].sinks if self.health else {}


Fault = Callable[[Pipeline, StoreClient, Enqueued, Watch, Path], Awaitable[str]]


async def run_scenario(workdir: Path, name: str, n: int, fault: Fault, *, sleep: float = 0.05, runners: int = 2,
                       concurrency: int = 4, timeout: float = 240.0,
                       processor_args: tuple[str, ...] = ()) -> tuple[Audit, Watch, str]:  # fmt: skip
    """Start the pipeline with the failpoint variable set for the processors, run ``fault``, drain, audit.

    Returns the audit, what was observed, and the note for the scenario's summary line (the test
    reports the line, with what it measured, before it asserts)."""
    failpoint = workdir / "clickhouse.failpoint"
    pipe = ProcessorEnvPipeline(workdir / "agl", processor_env={FAILPOINT_ENV: str(failpoint)},
                                processor_args=processor_args)  # fmt: skip
    await pipe.start()
    started = time.monotonic()
    try:
        assert pipe.settings is not None and pipe.processors.pid is not None
        pid = pipe.processors.pid
        for i in range(runners):
            pipe.start_runner(concurrency=concurrency, name=f"runner-{i}")
        async with StoreClient(pipe.settings) as store, KafkaOffsets(pipe.settings) as offsets:
            watch = Watch(pipe, offsets, pid)
            watching = asyncio.create_task(watch.run())
            try:
                enq = await enqueue(store, make_tasks(n, seed=n, sleep=sleep, prefix=name), batch=32)
                try:
                    note = await fault(pipe, store, enq, watch, failpoint)
                finally:
                    clear_clickhouse_failpoint(failpoint)  # never leave ClickHouse broken behind a failed step
                watch.mark("recovered")
                done = await store.wait_for_rollouts(rollout_ids=list(enq.tasks), timeout=timeout)
                if len(done) != n:
                    note = f"{note}; {n - len(done)} rollouts not terminal after {timeout:.0f} s"
                watch.mark("terminal")
                await pipe.wait_drained(timeout=180)
                watch.mark("drained")
            finally:
                watch.stop()
                await watching
        # the same processors process ran the whole scenario: the fault did not crash it
        assert pipe.processors.alive and pipe.processors.pid == pid, pipe.processors.tail()
        # off the event loop: the TCP proxy in front of the broker runs on it, and the services' graceful
        # shutdown (final commits) needs the broker; a blocked loop would stall them into SIGKILL
        await asyncio.to_thread(pipe.stop_runners)
        await asyncio.to_thread(pipe.stop_processors)
        assert pipe.processors.returncode == 0, pipe.processors.tail()
        result = audit(pipe.settings.effective_clickhouse_dsn, enq)
    finally:
        await pipe.stop()
    timeline = ", ".join(f"{k} +{v - started:.0f} s" for k, v in watch.marks.items())
    return result, watch, f"{note}; {timeline}"


def total(sinks: dict[str, dict[str, Any]], key: str) -> int:
    return sum(int(v.get(key) or 0) for v in sinks.values())


# ---------------------------------------------------------------- ClickHouse unavailable for 10 s


@pytest.mark.parametrize("n", reduced_or_full(16, 200))
async def test_clickhouse_outage(workdir: Path, n: int) -> None:
    """ClickHouse down for 10 s mid-stream: the sinks retry, commit nothing meanwhile, and lose nothing."""
    # topic -> (committed offset, end offset) of its sink 3 s into the outage and at its end
    offsets: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {}

    async def outage(pipe: Pipeline, store: StoreClient, enq: Enqueued, watch: Watch, failpoint: Path) -> str:
        async def now(topic: str) -> tuple[int, int]:
            return await watch.offsets.committed(f"agl-sink-{topic}", topic), await watch.offsets.end(topic)

        await until(lambda: count(store, enq, "succeeded") >= 3, 120, "rollouts to succeed", pipe)
        succeeded = count(store, enq, "succeeded")
        clickhouse_failpoint(failpoint)
        watch.mark("fault")
        await asyncio.sleep(3.0)  # an insert that passed the failpoint just before it was armed is done by now
        early = {t: await now(t) for t in ("spans", "workers")}
        await asyncio.sleep(OUTAGE_S - 3.0)
        offsets.update({t: (early[t], await now(t)) for t in early})
        clear_clickhouse_failpoint(failpoint)
        return f"ClickHouse unavailable for {OUTAGE_S:.0f} s after {succeeded} rollouts succeeded"

    result, watch, note = await run_scenario(workdir, "clickhouse-outage", n, outage)

    during = watch.between(watch.health, "fault", "recovered")
    errors = {name for s in during for name, v in s.sinks.items() if FAILPOINT_MESSAGE in str(v.get("last_error"))}
    before = [s for s in watch.health if s.at < watch.marks["fault"]]
    retries_before = total(before[-1].sinks, "retries") if before else 0
    retries_at_end = total(watch.latest_sinks(), "retries")
    while_down = "; ".join(f"{topic} sink committed {a[0]}->{b[0]} while {a[1]}->{b[1]} produced"
                           for topic, (a, b) in offsets.items())  # fmt: skip
    report(result.line("clickhouse-outage") + f" [{note}; sinks that saw the outage: {','.join(sorted(errors))}; "
           f"{retries_at_end - retries_before} retries; {while_down}]")  # fmt: skip
    assert during, "no health report during the outage"
    assert errors, f"no sink reported the injected outage: {during[-1].sinks}"
    assert retries_at_end > retries_before, "the sinks did not retry during the outage"
    # nothing committed while ClickHouse was down, although new records kept arriving (heartbeats)
    (spans_early, spans_late), (workers_early, workers_late) = offsets["spans"], offsets["workers"]
    assert spans_early[0] == spans_late[0], offsets
    assert workers_early[0] == workers_late[0] and workers_late[1] > workers_early[1], offsets
    # every sink that failed recovered (a successful retry clears its error)
    assert not [k for k, v in watch.latest_sinks().items() if FAILPOINT_MESSAGE in str(v.get("last_error"))]
    assert_exactly_once(result)


# ---------------------------------------------------------------- slow ClickHouse: backpressure


@pytest.mark.parametrize("n", reduced_or_full(16, 200))
async def test_slow_clickhouse_backpressure(workdir: Path, n: int) -> None:
    """Every ClickHouse call takes 1.5 s for 20 s: the sinks stay within their bound and Kafka holds the backlog."""
    baseline: dict[str, int] = {}

    async def slow(pipe: Pipeline, store: StoreClient, enq: Enqueued, watch: Watch, failpoint: Path) -> str:
        await until(lambda: count(store, enq, "succeeded") >= 1, 120, "a rollout to succeed", pipe)
        baseline["rss"] = process_tree_rss(watch.pid)
        baseline["succeeded"] = count(store, enq, "succeeded")
        clickhouse_failpoint(failpoint, SLOW_CALL_S)
        watch.mark("fault")
        await asyncio.sleep(SLOW_WINDOW_S)
        clear_clickhouse_failpoint(failpoint)
        baseline["succeeded_in_window"] = count(store, enq, "succeeded") - baseline["succeeded"]
        return (f"every ClickHouse call took {SLOW_CALL_S} s for {SLOW_WINDOW_S:.0f} s "
                f"({baseline['succeeded_in_window']} rollouts succeeded meanwhile)")  # fmt: skip

    result, watch, note = await run_scenario(workdir, "slow-clickhouse", n, slow,
                                             processor_args=("--sink-batch-size", str(SINK_BATCH)))  # fmt: skip

    samples = watch.between(watch.health, "fault")
    assert samples, "no health report after the slow window began"
    over = [(s.at, k, v["pending"], v.get("max_pending")) for s in watch.health for k, v in s.sinks.items()
            if v.get("max_pending") != 2 * SINK_BATCH or v["pending"] > v["max_pending"]]  # fmt: skip
    peak_pending = max(v["pending"] for s in watch.health for v in s.sinks.values())
    peak_rss = max(r for _, r in watch.between(watch.rss, "fault"))  # the window and the drain after it
    window_rss = max(r for _, r in watch.between(watch.rss, "fault", "recovered"))
    window_lag = [lag for _, lag in watch.between(watch.span_lag, "fault", "recovered")]
    growth_mb = (peak_rss - baseline["rss"]) / 2**20  # over the window and the drain after it
    mb, retries = 2**20, total(watch.latest_sinks(), "retries")
    report(result.line("slow-clickhouse") + f" [{note}; peak pending {peak_pending} (bound {2 * SINK_BATCH} per "
           f"sink); processors RSS {baseline['rss'] / mb:.0f} MB before, peak {window_rss / mb:.0f} MB in the window, "
           f"{peak_rss / mb:.0f} MB with the drain (+{growth_mb:.0f} MB, bound +{RSS_BOUND_MB}); span sink lag in "
           f"the window up to {max(window_lag, default=0)}; sink retries {retries}]")  # fmt: skip
    assert not over, f"a sink held more than its bound (2 x batch size = {2 * SINK_BATCH}): {over[:10]}"
    assert growth_mb < RSS_BOUND_MB, f"processors RSS grew by {growth_mb:.0f} MB during the slow window and drain"
    # the backlog sat in Kafka: more span records were waiting than the span sink may hold, so the bound was tested
    assert max(window_lag, default=0) > 2 * SINK_BATCH, f"no backlog built up: span sink lag {window_lag}"
    # a slow ClickHouse is not an error, and it did not stall the Kafka side of the pipeline
    assert retries == 0, watch.latest_sinks()
    assert baseline["succeeded_in_window"] > 0, "no rollout succeeded while ClickHouse was slow"
    assert_exactly_once(result)
