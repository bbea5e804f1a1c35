"""The training service end to end on a real local stack: ``agl_stream.Client`` against ``agl-stream server``.

Upload a JSONL, train the tiny model for two steps with an ``agent_func(resource, task)`` running in
this machine's runner processes, check the ``TrainingResult`` against the ``training_steps`` table,
evaluate a checkpoint, download the model and generate with transformers exactly what the served
policy generated; bad input gets one clear error and changes nothing; a restarted server still lists
the data and the checkpoints.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

import agl_stream as agl
from agl_stream.service import agl_command
from agl_stream.training_service import TrainingResult, TrainingServiceError

from tests.trainer.server.agents import SERVED_LOG, graded_agent
from tests.trainer.server.running import RunningServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TRAIN = [{"question": f"What is {i} + {i + 1}?", "ground_truth": str(2 * i + 1), "topic": "add"} for i in range(6)]
TEST = [{"question": f"What is {i} times 3?", "ground_truth": str(3 * i)} for i in range(3)]
ROOT = Path(__file__).resolve().parents[3]
FAST = {"batcher": {"drop_zero_variance": False, "max_staleness": 4}, "checkpoint_every": 1, "idle_timeout_s": 20}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[RunningServer]:
    # a job whose client is silent for 30 s is stopped (the clients here ask every second)
    running = RunningServer(tmp_path_factory.mktemp("training-server") / "agl", str(tiny_model_dir), client_timeout=30).start()
    try:
        yield running
    finally:
        running.stop()


@dataclass(frozen=True)
class Trained:
    """The data set "adds" uploaded and a two-step job trained on it: what the later tests read."""

    data_id: str
    result: TrainingResult
    served: Path  # what the served policy generated (one JSON line per answer, from the runner processes)


@pytest.fixture(scope="module")
def trained(server: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Trained:
    """Upload and train once per server (per xdist worker, should the module's tests be spread over several)."""
    folder = tmp_path_factory.mktemp("trained")
    served = folder / "served.jsonl"
    with pytest.MonkeyPatch.context() as env, agl.Client(server.url, token=server.token, timeout=60,
                                                         data_dir=folder / "client") as client:  # fmt: skip
        env.setenv(SERVED_LOG, str(served))  # the runner processes inherit it
        data_id = client.upload_data(_jsonl(folder / "train.jsonl", TRAIN), _jsonl(folder / "test.jsonl", TEST), data_id="adds")
        result = client.train(graded_agent, nworkers=1, epochs=1, batch_size=1, data_id="adds", eval_interval=1,
                              group_size=2, max_steps=2, config=FAST, concurrency=4, progress=False)  # fmt: skip
    return Trained(data_id, result, served)


@pytest.fixture
def client(server: RunningServer, tmp_path: Path) -> Iterator[agl.Client]:
    with agl.Client(server.url, token=server.token, timeout=60, data_dir=tmp_path / "client") as c:
        yield c


def _refused(call, status: int, code: str, *words: str) -> TrainingServiceError:  # type: ignore[no-untyped-def]
    with pytest.raises(TrainingServiceError) as info:
        call()
    assert (info.value.status, info.value.code) == (status, code), info.value
    for word in words:
        assert word in str(info.value), info.value
    return info.value


def test_bad_input_gets_one_clear_error_and_changes_nothing(server: RunningServer, client: agl.Client, tmp_path: Path) -> None:
    before = (client.list_data(), client.list_jobs(), client.list_checkpoints())
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "fine"}) + "\n\n" + '{"question": "cut short"\n')
    _refused(lambda: client.upload_data(bad, data_id="bad"), 400, "bad_jsonl", "line 3", "not JSON")
    bad.write_text(json.dumps({"question": "fine"}) + "\n" + json.dumps({"ground_truth": "4"}) + "\n")
    _refused(lambda: client.upload_data(bad), 400, "bad_jsonl", "line 2", "'question'")
    good = _jsonl(tmp_path / "good.jsonl", TRAIN)
    _refused(lambda: client.upload_data(good, bad), 400, "bad_jsonl", "test file, line 2")  # a bad test file: nothing kept
    _refused(lambda: client.upload_data(good, data_id="../etc"), 400, "bad_request", "data_id")
    _refused(lambda: client.train(graded_agent, data_id="no-such-data"), 404, "unknown_data_id", "no-such-data")
    _refused(lambda: client.evaluate(graded_agent, good, checkpoint="no-such-job/step-00000001"), 404, "unknown_checkpoint")
    _refused(lambda: client.download_model(tmp_path / "m", checkpoint="no-such-job/step-1"), 404, "unknown_checkpoint")
    with agl.Client(server.url, token="wrong") as stranger:
        _refused(stranger.list_data, 401, "unauthorized", "token")
        _refused(lambda: stranger.upload_data(good, data_id="intruder"), 401, "unauthorized")
    with agl.Client(server.url, token="") as anonymous:
        _refused(anonymous.list_jobs, 401, "unauthorized")
    assert (client.list_data(), client.list_jobs(), client.list_checkpoints()) == before
    assert not (tmp_path / "m").exists()


def test_upload_train_evaluate_download(server: RunningServer, client: agl.Client, trained: Trained, tmp_path: Path) -> None:
    from agl_stream.client.sql_door import door_dsn_for
    from agl_stream.config import Settings
    from agl_stream_processors.clickhouse import connect

    assert trained.data_id == "adds"
    [info] = [d for d in client.list_data() if d.data_id == "adds"]
    assert (info.train_lines, info.test_lines, info.train_file) == (6, 3, "train.jsonl")

    result, served = trained.result, trained.served
    assert result.state == "succeeded" and result.stop_reason == "max_steps", result
    assert (result.steps, result.policy_version) == (2, 2)
    # the curves are the training_steps table's rows for this run
    settings = Settings.from_env(env={"AGL_DATA_DIR": str(server.data_dir)})
    ch = connect(door_dsn_for(settings.effective_clickhouse_dsn))
    try:
        _, rows = ch.query_rows("SELECT Step, PolicyVersion, RewardMean, Loss FROM training_steps FINAL "
                                "WHERE RunId = {r:String} ORDER BY Step", {"r": result.job_id})  # fmt: skip
        # every rollout of the job (training and held-out) named the job's own resources, never "latest":
        # on a long-lived broker "latest" can be an earlier job's higher policy version, whose engine is gone
        _, used = ch.query_rows("SELECT Mode, groupUniqArray(ResourcesId) FROM rollouts FINAL GROUP BY Mode ORDER BY Mode")
    finally:
        ch.close()
    assert [r[0] for r in rows] == [1, 2] and [p.step for p in result.history] == [1, 2]
    assert [(mode, list(ids)) for mode, ids in used] == [("train", [f"policy-{result.job_id}"]), ("val", [f"policy-{result.job_id}"])]
    assert result.reward_curve == pytest.approx([r[2] for r in rows]) and result.loss_curve == pytest.approx([r[3] for r in rows])
    # checkpoints every step, evaluations every step (eval_interval=1) and before/after on the test split
    assert [c.name.split("/")[1] for c in result.checkpoints] == ["step-00000001", "step-00000002"]
    assert result.final_checkpoint == f"{result.job_id}/step-00000002"
    assert [e.step for e in result.evaluations] == [1, 2] and all(e.n == 3 and e.missing == 0 for e in result.evaluations)
    assert result.validation["val_after"]["failed"] == 0 and result.training_time_s > 0

    evaluation = client.evaluate(graded_agent, checkpoint=result.final_checkpoint, nworkers=1, progress=False)
    assert (evaluation.checkpoint, evaluation.policy_version, evaluation.n) == (result.final_checkpoint, 2, 3)
    assert evaluation.failed == evaluation.missing == 0 and evaluation.n_with_ground_truth == 3
    assert evaluation.mean_reward == pytest.approx(sum(evaluation.rewards) / 3)
    assert evaluation.accuracy == pytest.approx(sum(r >= 1.0 for r in evaluation.rewards) / 3)

    # the downloaded model generates, greedily, what the served policy generated for the same prompt
    model_dir = client.download_model(tmp_path / "model", checkpoint=result.final_checkpoint)
    greedy = [json.loads(line) for line in served.read_text().splitlines()]
    greedy = [g for g in greedy if g["policy_version"] == 2]
    assert len(greedy) >= 3, greedy
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for answer in greedy[:3]:
        prompt = tokenizer.apply_chat_template(answer["messages"], add_generation_prompt=True, tokenize=True)
        prompt = list(prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt)
        assert prompt == answer["prompt_token_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False)
        generated = out[0, len(prompt):].tolist()
        assert generated[: len(answer["token_ids"])] == answer["token_ids"], (generated, answer)
    assert json.loads((model_dir / "agl_export.json").read_text())["policy_version"] == 2


def _cli(server: RunningServer, *args: str, token: str = "", timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env.update(AGL_SERVER_URL=server.url, AGL_SERVER_TOKEN=token or server.token, AGL_DATA_DIR=str(server.data_dir.parent / "cli"),
               PYTHONPATH=str(ROOT))  # fmt: skip
    return subprocess.run(agl_command(*args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_the_cli_speaks_for_the_client(server: RunningServer, trained: Trained, tmp_path: Path) -> None:
    listed = _cli(server, "data", "list")
    assert listed.returncode == 0, listed.stderr
    assert [d["data_id"] for d in json.loads(listed.stdout)] == ["adds"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "ok"}\n[1, 2]\n')
    refused = _cli(server, "data", "upload", str(bad))
    assert refused.returncode == 1 and "line 2" in refused.stderr and "expected a JSON object" in refused.stderr, refused.stderr
    stranger = _cli(server, "model", "list", token="wrong")
    assert stranger.returncode == 1 and "token" in stranger.stderr
    usage = _cli(server, "model", "download", str(tmp_path / "m"), "--format", "gguf")
    assert usage.returncode == 2 and "gguf" in usage.stderr
    checkpoints = json.loads(_cli(server, "model", "list").stdout)
    assert [c["step"] for c in checkpoints] == [1, 2]
    downloaded = _cli(server, "model", "download", str(tmp_path / "m"), "--checkpoint", checkpoints[0]["name"],
                      "--format", "safetensors")  # fmt: skip
    assert downloaded.returncode == 0, downloaded.stderr
    assert json.loads((tmp_path / "m" / "agl_export.json").read_text())["step"] == 1
    evaluated = _cli(server, "evaluate", "--agent", "tests.trainer.server.agents:graded_agent", "--test-file",
                     str(_jsonl(tmp_path / "t.jsonl", TEST[:2])), "--checkpoint", "base")  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    result = json.loads(evaluated.stdout)
    assert (result["checkpoint"], result["policy_version"], result["n"], result["missing"]) == (None, 0, 2, 0)


def test_ctrl_c_stops_the_job_on_the_server_and_the_local_runners(server: RunningServer, trained: Trained, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env.update(AGL_SERVER_URL=server.url, AGL_SERVER_TOKEN=server.token, AGL_DATA_DIR=str(tmp_path / "cli"), PYTHONPATH=str(ROOT))
    argv = agl_command("train", "--agent", "tests.trainer.server.agents:graded_agent", "--data-id", "adds",
                       "--group-size", "2", "--batch-size", "1", "--epochs", "50", "--output", str(tmp_path / "result.json"))  # fmt: skip
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    with agl.Client(server.url, token=server.token) as client:
        deadline = time.monotonic() + 180
        while not any(j.state == "running" and j.step >= 1 for j in client.list_jobs()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err[-3000:]  # the job did not succeed: it was stopped
        result = json.loads((tmp_path / "result.json").read_text())
        assert result["state"] == "stopped" and result["steps"] >= 1, result
        job = client.job(result["job_id"])
        assert job.state == "stopped" and job.stop_reason == "stopped by the client"
        assert not [j for j in client.list_jobs() if not j.done]
    runners = subprocess.run(["pgrep", "-f", str(tmp_path / "cli")], capture_output=True, text=True)
    assert runners.stdout.strip() == "", "runner processes outlived the client"


def test_a_job_whose_client_went_silent_is_stopped(server: RunningServer, trained: Trained) -> None:
    """A client killed outside Python (no Ctrl-C) leaves a job nobody runs: the server stops it."""
    import httpx

    headers = {"Authorization": f"Bearer {server.token}"}
    started = httpx.post(f"{server.url}/v1/jobs/train", headers=headers, timeout=30,
                         json={"data_id": "adds", "epochs": 1, "batch_size": 1, "group_size": 2})  # fmt: skip
    assert started.status_code == 201, started.text
    job_id = started.json()["job_id"]
    with agl.Client(server.url, token=server.token) as client:
        deadline = time.monotonic() + 150
        while True:  # only the job list, which is no word from this job's client
            [job] = [j for j in client.list_jobs() if j.job_id == job_id]
            if job.done or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        assert job.state == "stopped" and "silent" in (job.stop_reason or ""), job
        listed = _cli(server, "jobs", "list")
        assert listed.returncode == 0 and job_id in listed.stdout


def test_a_restarted_server_still_lists_the_data_and_the_checkpoints(server: RunningServer, trained: Trained, tmp_path: Path) -> None:
    with agl.Client(server.url, token=server.token) as before_restart:
        data, checkpoints, jobs = before_restart.list_data(), before_restart.list_checkpoints(), before_restart.list_jobs()
    assert [d.data_id for d in data] == ["adds"] and len(checkpoints) >= 2, (data, checkpoints)
    assert server.stop() == 0
    server.start()
    with agl.Client(server.url, token=server.token) as after_restart:
        assert after_restart.list_data() == data
        assert after_restart.list_checkpoints() == checkpoints
        assert [(j.job_id, j.state) for j in after_restart.list_jobs()] == [(j.job_id, j.state) for j in jobs]
        train = next(j for j in jobs if j.kind == "train")
        assert after_restart.training_result(train.job_id).final_checkpoint == checkpoints[-1].name
        model = after_restart.download_model(tmp_path / "weights", checkpoint="latest", format="safetensors")
        assert sorted(p.name for p in model.iterdir()) == ["agl_export.json", "config.json", "model.safetensors"]
        with pytest.raises(TrainingServiceError, match="onnx") as refused:
            after_restart.download_model(tmp_path / "onnx", format="onnx")
        assert refused.value.code == "format_unavailable" and not (tmp_path / "onnx").exists()
