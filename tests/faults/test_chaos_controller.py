"""A controller SIGKILLed mid-attempt: no agent process of it is left, and another replica runs its attempts.

Two ``agl-stream controller`` replicas run a command per attempt that starts a helper process of its own (a
grandchild of the controller) and works for 8 s. One replica is SIGKILLed while it runs attempts. SIGKILL
runs no clean-up code: the shepherd between the controller and each command hears of it from the kernel and
kills the command's tree. The state machine then finds the killed attempts silent and requeues them as new
attempts, which the other replica runs. Verdict: every rollout succeeded exactly once (one succeeded attempt,
one reward), at least one of them after a retry, and no process of the killed replica's attempts alive.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from agl_stream.client import StoreClient
from tests.faults.harness import Pipeline, enqueue
from tests.faults.report import report
from tests.faults.scenario import count, reduced_or_full, until
from tests.faults.test_chaos import ORPHAN_ARGS, RETRY_SILENT

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

AGENT = textwrap.dedent("""
    import json, os, subprocess, sys, time
    task = json.load(open(os.environ["AGL_TASK_FILE"]))
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # the agent's own child
    time.sleep(task["input"]["seconds"])
    open(os.environ["AGL_REWARD_FILE"], "w").write("1.0")
""")


def attempt_processes(logs_dir: Path) -> list[psutil.Process]:
    """Live processes of attempts run by the controller whose logs are under ``logs_dir`` (from their environment)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AGL_REWARD_FILE", "").startswith(str(logs_dir)) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


@pytest.mark.parametrize("n", reduced_or_full(12, 60))
async def test_sigkill_controller_mid_attempt(workdir: Path, n: int) -> None:
    pipe = await Pipeline(workdir / "agl", processor_args=ORPHAN_ARGS).start()
    try:
        controllers = [pipe.start_controller([sys.executable, "-c", AGENT], name=f"controller-{i}") for i in range(2)]
        assert pipe.settings is not None
        async with StoreClient(pipe.settings) as store:
            enq = await enqueue(store, [{"seconds": 8.0, "i": i} for i in range(n)], config=RETRY_SILENT)
            # an attempt mid-run is three processes: the shepherd, the command and the command's helper (the
            # rollouts' snapshots say "running" only at the end, when the command's spans come)
            def busiest() -> tuple[int, list[psutil.Process]]:
                trees = [attempt_processes(pipe.data_dir / f"controller-{i}") for i in range(2)]
                return max(enumerate(trees), key=lambda item: len(item[1]))

            await until(lambda: len(busiest()[1]) >= 6, 120, "a controller with 2 attempts mid-run", pipe)
            victim, before = busiest()
            logs = pipe.data_dir / f"controller-{victim}"
            running = len({p.environ().get("AGL_ATTEMPT_ID") for p in before})
            controllers[victim].kill()  # SIGKILL to its process group (the commands run in sessions of their own)
            deadline = time.monotonic() + 10
            while (left := attempt_processes(logs)) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert not left, f"processes of the killed controller's attempts still alive: {[p.pid for p in left]}"
            done = await store.wait_for_rollouts(rollout_ids=list(enq.tasks), timeout=240)
            assert len(done) == n and count(store, enq, "succeeded") == n, {r.rollout_id: r.status for r in done}
        await pipe.wait_drained(timeout=120)
        await asyncio.to_thread(pipe.stop_runners)  # the controllers; off the loop (it runs the TCP proxy)
        await asyncio.to_thread(pipe.stop_processors)  # the embedded ClickHouse opens in one process at a time
        from agl_stream_processors.clickhouse import connect

        ch = connect(str(pipe.settings.effective_clickhouse_dsn))
        try:
            _, per_rollout = ch.query_rows(
                "SELECT RolloutId, uniqExactIf(AttemptId, Kind = 'started') AS attempts, "
                "uniqExactIf(AttemptId, Kind = 'finished' AND Status = 'succeeded') AS succeeded "
                "FROM attempts FINAL GROUP BY RolloutId"
            )
        finally:
            ch.close()
        rows = {rid: (attempts, succeeded) for rid, attempts, succeeded in per_rollout if rid in enq.tasks}
        assert set(rows) == set(enq.tasks)
        duplicated = [rid for rid, (_, succeeded) in rows.items() if succeeded != 1]
        retried = sum(1 for attempts, _ in rows.values() if attempts > 1)
        report(f"[sigkill-controller] enqueued={n} succeeded={n} duplicated={len(duplicated)} lost=0 retried={retried} "
               f"[SIGKILLed controller-{victim} with {running} attempts running ({len(before)} processes); none left]")  # fmt: skip
        assert not duplicated and retried >= 1
    finally:
        await pipe.stop()
