"""An upstream runner trains through agl-stream: upstream's rollouts, agl-stream's pipeline and learner.

Laid out as a deployment: the "cluster" is a local broker with the processors (state machine,
triplet adapter, ClickHouse sinks over the embedded ClickHouse) and the store front door
(``agl-stream ingest store``); agl-stream's ``Trainer`` runs in the ``algorithm`` role (no runner
processes of its own: scheduler, GRPO learner, embedded inference server, tiny model); the rollouts
are run by ``upstream_runner.py``, upstream Agent Lightning 0.3's ``Trainer`` in the runner role with
its ``LitAgentRunner``, AgentOps tracer and ``LightningStoreClient`` aimed at the front door's URL.

It proves the whole loop crosses the front door: the upstream runner dequeues the tasks agl-stream's
scheduler enqueued, its spans become triplets with token ids and its rewards in ClickHouse, the
learner steps on them, and the new policy version it publishes reaches the upstream runner (as
resources, and as the weights that answered).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest

from agl_stream.client.sql_ids import in_lists
from agl_stream.config import Settings
from agl_stream.execution.local_stack import LocalStack
from agl_stream.service import ServiceProcess, agl_command
from agl_stream.trainer import Trainer
from tests.upstream_venv import UPSTREAM_ENV, upstream_python

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RUNNER = Path(__file__).with_name("upstream_runner.py")
RUN_ID = "upstream-runner"
T = TypeVar("T")
WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "piano", "lemon", "ocean", "candle", "forest", "rocket"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, service: ServiceProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        service.check()
        try:
            with urllib.request.urlopen(url + "/v1/agl/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"store front door not healthy after {timeout}s:\n{service.tail()}")
        time.sleep(0.2)


def _wait_recorded_rollouts_finished(url: str, records: Path, timeout: float = 30.0) -> None:
    """Rollouts the runner answered may still be reporting their outcome: let them land before it stops."""
    deadline = time.monotonic() + timeout
    finished: set[str] = set()
    while time.monotonic() < deadline:
        pending = {r["rollout_id"] for r in _records(records) if r["kind"] == "rollout"} - finished
        if not pending:
            return
        for rollout_id in sorted(pending):
            with urllib.request.urlopen(f"{url}/v1/agl/rollouts/{rollout_id}", timeout=5) as resp:
                if (json.loads(resp.read()) or {}).get("status") in ("succeeded", "failed"):
                    finished.add(rollout_id)
        time.sleep(0.2)


def _until(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 60.0) -> T:
    """Poll ``read`` until ``done`` holds (the sinks write ClickHouse in batches); the last value either way."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


def _records(path: Path) -> list[dict[str, Any]]:
    """The runner's records so far (a line it is still writing is left for the next read)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.split("\n")[:-1]]


def _config() -> dict[str, Any]:
    from examples.demo import trainer_config

    config = trainer_config(steps=2, model="tiny", seed=0)
    config["run_id"] = RUN_ID
    config["idle_timeout_s"] = 20
    # groups of 2, one group a step: the single sequential upstream runner feeds a step every 2 rollouts
    config["scheduler"].update(group_size=2, max_in_flight=4)
    config["batcher"].update(group_size=2, batch_groups=1, min_group_size=2, group_timeout_s=60)
    # rewards are graded, but two answers of a group may still tie: this test is about the path
    config["batcher"]["drop_zero_variance"] = False
    return config


def test_upstream_runner_trains_through_the_front_door(tmp_path: Path) -> None:
    python = upstream_python()
    from agl_stream.client.sql_door import door_dsn_for
    from agl_stream_processors.clickhouse import connect
    from agl_stream_trainer.rl import RL

    rows = [{"question": f"Repeat exactly this word: {w}", "word": w} for w in WORDS]
    base = Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)
    logs = tmp_path / "logs"
    records = tmp_path / "upstream-runner.jsonl"
    stack = LocalStack(base, log_dir=logs)  # no AGL_KAFKA_BOOTSTRAP: broker, topics and processors start here
    services: list[ServiceProcess] = []
    try:
        cluster = asyncio.run(stack.start())
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        door = ServiceProcess("store-front-door", agl_command("ingest", "store", "--port", str(port)),
                              env=stack.env(), log_path=logs / "store.log").start()  # fmt: skip
        services.append(door)
        _wait_healthy(url, door)
        runner = ServiceProcess("upstream-runner", [str(python), str(RUNNER), url, str(records)],
                                env=UPSTREAM_ENV, log_path=logs / "upstream-runner.log").start()  # fmt: skip
        services.append(runner)

        # the cluster is up: agl-stream's trainer joins it in the algorithm role and starts no runner of its
        # own. The evaluation after training runs while the engine still serves the last policy: its
        # rollouts (the upstream runner's too) show that policy reached the runner, whatever the timing.
        algorithm = cluster.model_copy(update={"current_role": "algorithm"})
        rl = RL(_config(), output_dir=tmp_path / "run", validate_before=False, eval_timeout=120)
        report = Trainer(rl, settings=algorithm, log_dir=tmp_path / "trainer-logs", dashboard=False).fit(
            f"{RUNNER}:repeat_word", rows[:10], rows[10:])  # fmt: skip
        runner.check()  # it ran the whole time
        door.check()
        _wait_recorded_rollouts_finished(url, records)
        log = (logs / "upstream-runner.log").read_text(errors="replace")[-3000:]

        assert report["steps"] == 2 and report["policy_version"] == 2, report
        seen = _records(records)
        resources = [r for r in seen if r["kind"] == "resources"]
        rollouts = {r["rollout_id"]: r for r in seen if r["kind"] == "rollout"}
        # two steps of one group of 2 and the evaluation's 2; a rollout that started after the trainer
        # stopped its inference server has resources but no answer
        assert len(rollouts) >= 6, log
        # the learner's new resources reached the upstream runner: version 0 (announced at start), then newer
        versions = [r["version"] for r in resources]
        assert versions[0] == 0 and versions[-1] == 2 and versions == sorted(versions), versions
        assert {r["resources_id"] for r in resources} == {"policy"}, resources
        assert all(r["llm"] == {"main_llm": "tiny"} for r in resources), resources
        # ...and so did the weights: the server answered with at least the announced policy (it serves a
        # version before the announcement names it, so an answer may come from a newer one than announced)
        pairs = [(r["version"], rollouts[r["rollout_id"]]["served_policy_version"]) for r in resources
                 if r["rollout_id"] in rollouts]  # fmt: skip
        assert all(served is not None and served >= announced for announced, served in pairs), pairs
        val = [r for r in rollouts.values() if r["mode"] == "val"]
        assert len(val) == 2 and all(r["served_policy_version"] == 2 for r in val), val
        # the algorithm's evaluation read the upstream runner's rewards back from the pipeline
        assert sorted(report["val_after"]["rewards"]) == pytest.approx(sorted(r["reward"] for r in val)), report
        worker = resources[0]["worker_id"]

        # ClickHouse, read through the processors' SQL door while they run
        dsn = door_dsn_for(base.effective_clickhouse_dsn)
        assert dsn is not None, "the processors serve no SQL door"
        ch = connect(dsn)
        try:
            ids = sorted(rollouts)
            # the rollouts were agl-stream's tasks, dequeued and finished by the upstream runner
            found = _until(lambda: [row for in_ids in in_lists(ids) for row in ch.query_rows(
                "SELECT RolloutId, Status, WorkerId, Mode, JSONExtractString(Metadata, 'group_id') FROM rollouts FINAL "
                f"WHERE RolloutId IN {in_ids} AND Status = 'succeeded'")[1]],
                lambda got: len(got) == len(ids))  # fmt: skip
            assert sorted(r[0] for r in found) == ids, found
            for rollout_id, _status, worker_id, mode, group in found:
                assert (worker_id, mode) == (worker, rollouts[rollout_id]["mode"]), found
                assert bool(group) == (mode == "train"), found  # the scheduler's GRPO groups
            # their spans became triplets with the token ids the server returned and the runner's rewards
            triplets = _until(lambda: [row for in_ids in in_lists(ids) for row in ch.query_rows(
                "SELECT RolloutId, length(PromptTokenIds), length(ResponseTokenIds), FinalReward, Reward "
                f"FROM triplets FINAL WHERE RolloutId IN {in_ids} AND Decision = 'final' "
                "AND Status = 'succeeded'")[1]],
                lambda got: len(got) == len(ids))  # fmt: skip
            assert sorted(t[0] for t in triplets) == ids, triplets
            for rollout_id, prompt, response, final, reward in triplets:
                mine = rollouts[rollout_id]
                assert prompt == mine["prompt_tokens"] > 0, (mine, prompt)
                assert response == mine["response_tokens"] > 0, (mine, response)
                assert final == pytest.approx(mine["reward"]) == reward, (mine, final, reward)
            # and the learner stepped on them, with a gradient (the graded rewards differ within a group)
            steps = _until(lambda: ch.query_rows(
                "SELECT Step, PolicyVersion, GradNorm FROM training_steps FINAL WHERE RunId = {run:String} "
                "ORDER BY Step", {"run": RUN_ID})[1], lambda got: len(got) == 2)  # fmt: skip
            assert [s[:2] for s in steps] == [(1, 1), (2, 2)] and any(s[2] > 0 for s in steps), steps
        finally:
            ch.close()
    finally:
        for service in reversed(services):
            service.stop(timeout=10)
        stack.stop()
