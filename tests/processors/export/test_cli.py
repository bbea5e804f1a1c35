"""``agl-stream export trajectories``: output, filters and exit codes, against the real embedded engine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agl_stream.config import Settings
from agl_stream_processors.clickhouse import ClickHouse, connect, migrate
from agl_stream_processors.export.cli import export
from tests.processors.export.data import EXPECTED, populate
from tests.processors.export.test_trajectories import write_tokenizer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
runner = CliRunner()


def _export(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(export, ["trajectories", *args])
    return result.exit_code, result.stdout, result.stderr


def _lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_writes_one_s3_trajectory_per_line(ch: ClickHouse, store_dsn: str, tmp_path: Path) -> None:
    populate(ch)
    code, out, err = _export("--dsn", store_dsn)
    assert code == 0, err
    assert _lines(out) == [EXPECTED["ro-alpha"], EXPECTED["ro-beta"], EXPECTED["ro-gamma"]]
    assert "exported 3 trajectories to stdout" in err

    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "trajectories.jsonl"
    code, out, err = _export("--dsn", store_dsn, "--output", str(target), "-r", "ro-beta", "-r", "ro-alpha")
    assert code == 0 and out == "", err
    assert _lines(target.read_text()) == [EXPECTED["ro-alpha"], EXPECTED["ro-beta"]]
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no partial file left

    code, out, _ = _export("--dsn", store_dsn, "--format", "json", "--mode", "test")
    assert code == 0 and json.loads(out) == [EXPECTED["ro-gamma"]]
    code, out, _ = _export("--dsn", store_dsn, "--since", "2023-11-14T22:13:35", "--limit", "1")
    assert code == 0 and _lines(out) == [EXPECTED["ro-beta"]]
    code, out, _ = _export("--dsn", store_dsn, "--adapter", "replay:tracer")
    assert code == 0 and [(t["trajectory_id"], t["total_reward"]) for t in _lines(out)] == [("ro-alpha", 0.5)]
    code, out, _ = _export("--dsn", store_dsn, "--mode", "val", "--rollout-id", "ro-alpha")
    assert code == 0 and out == ""


def test_settings_come_from_the_environment(ch: ClickHouse, store_dsn: str, tmp_path: Path) -> None:
    populate(ch)
    tokenizer = write_tokenizer(tmp_path / "tokenizer.json")
    result = runner.invoke(export, ["trajectories", "-r", "ro-alpha", "--tokenizer", str(tokenizer)],
                           env={"AGL_CLICKHOUSE_DSN": store_dsn})  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (alpha,) = _lines(result.stdout)
    assert [(t["input"]["text"], t["output"]["text"]) for t in alpha["transitions"]] == [
        ("what is two", "plus four"), ("what is two plus four ?", "the"), ("what is two plus four ? the", "answer 4")]  # fmt: skip


@pytest.mark.parametrize(
    "args, message",
    [
        (["--format", "xml"], "--format must be one of jsonl, json"),
        (["--mode", "eval"], "--mode must be one of train, val, test"),
        (["--since", "yesterday"], "--since 'yesterday'"),
        (["--limit", "0"], "--limit"),
        (["--tokenizer", "/no/such/tokenizer.json"], "no such file"),
        (["--output", "/no/such/folder/out.jsonl"], "does not exist"),
        (["--output", "/"], "is a folder"),
        (["--dsn", "ftp://host/db"], "DSN"),
        (["--no-such-option"], "No such option"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    code, out, err = _export("--dsn", f"chdb://{tmp_path / 'agl'}", *args)  # refused before any engine is opened
    assert code == 2 and out == "" and message in err, err


def test_an_unreachable_engine_exits_1_with_one_clear_line(tmp_path: Path) -> None:
    code, out, err = _export("--dsn", "http://default:secret@127.0.0.1:1/agl")
    assert code == 1 and out == ""
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: cannot reach ClickHouse at http://127.0.0.1:1 (database agl)") and "secret" not in err
    code, _, err = _export("--dsn", f"chdb://{tmp_path / 'empty'}")  # an engine nothing was ever written to
    assert code == 1 and "nothing was written here yet" in err


async def test_the_command_reads_through_the_sql_door_of_a_running_engine(settings: Settings) -> None:
    """While the sinks own the embedded engine, the installed command goes through their SQL door."""
    from agl_stream_processors.clickhouse.door import SqlDoor

    dsn = settings.effective_clickhouse_dsn
    owner = connect(dsn)
    migrate(owner)
    populate(owner)
    door = await SqlDoor(owner.target).start()
    try:
        cmd = [sys.executable, "-m", "agl_stream.cli.main", "export", "trajectories", "--dsn", dsn, "--rollout-id", "ro-alpha"]
        done = await asyncio.to_thread(subprocess.run, cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        await door.stop()
        owner.close()
    assert done.returncode == 0, done.stderr
    assert _lines(done.stdout) == [EXPECTED["ro-alpha"]]
