"""Runner counters, the progress switch and structured log lines (pure logic)."""

from __future__ import annotations

import asyncio
import io
import json
import logging

from agl_stream.runner.logs import JsonFormatter
from agl_stream.runner.stats import RunnerStats, progress_wanted, show_progress


def test_stats_summary_and_rate() -> None:
    stats = RunnerStats(rollouts_succeeded=3, rollouts_failed=1, spans=40)
    assert stats.rollouts_done == 4 and stats.rate > 0
    assert "succeeded 3, failed 1" in stats.summary()


def test_progress_is_quiet_when_not_a_terminal() -> None:
    assert progress_wanted(None) is False  # pytest captures stderr: not a TTY
    assert progress_wanted(True) is True and progress_wanted(False) is False


async def test_progress_display_stops_when_asked() -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(show_progress(RunnerStats(), stop, max_rollouts=5))
    await asyncio.sleep(0.3)
    stop.set()
    await asyncio.wait_for(task, 5)


def test_json_log_lines_carry_extras() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("agl.test.json")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("rollout %s failed", "ro-1", extra={"rollout_id": "ro-1", "attempt_id": "at-1"})
    finally:
        log.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert line["msg"] == "rollout ro-1 failed" and line["level"] == "WARNING"
    assert (line["rollout_id"], line["attempt_id"]) == ("ro-1", "at-1")
