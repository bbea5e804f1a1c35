"""The SQL door: read-only SQL into an embedded engine another process owns, behind a token, on loopback."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from agl_stream.config import Settings
from agl_stream_processors.clickhouse import connect, migrate
from agl_stream_processors.clickhouse.door import SqlDoor
from agl_stream_processors.clickhouse.door_file import DoorOptions, door_file, engine_directory, read_door_file
from agl_stream_processors.clickhouse.reader import EngineUnavailable, open_reader
from tests.processors.clickhouse.store import make_snapshot, insert_records, populate

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]
ROLLOUTS = "SELECT RolloutId, Status, Attempts FROM rollouts FINAL ORDER BY RolloutId"


async def test_clickhouse_clients_read_through_the_door_and_cannot_write(settings: Settings) -> None:
    dsn = settings.effective_clickhouse_dsn
    writer = connect(dsn)  # what the sinks hold
    migrate(writer)
    populate(writer)
    door = await SqlDoor(writer.target).start()
    try:
        address = door.address
        assert address is not None and address.url.startswith("http://127.0.0.1:") and address.pid == os.getpid()
        path = door_file(engine_directory(dsn))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and read_door_file(engine_directory(dsn)) == address

        def read() -> tuple:
            with open_reader(dsn) as ch:  # finds the door by its file, as `agl-stream sql` does
                assert ch.door == address and ch.target.dsn.startswith("http://")
                rows = ch.query_rows(ROLLOUTS)
                param = ch.scalar("SELECT count() FROM spans FINAL WHERE RolloutId = {r:String}", {"r": "ro-000000000001"})
                arrow = ch.query_arrow("SELECT SourceTopic, Reason FROM dead_letters FINAL")
                refused = []
                for sql in ("INSERT INTO workers (WorkerId) VALUES ('w-x')", "DROP TABLE spans", "SET readonly = 0",
                            "CREATE TABLE t (a Int8) ENGINE = Memory", "SELECT 1 SETTINGS readonly = 0"):  # fmt: skip
                    with pytest.raises(DatabaseError) as err:
                        ch.command(sql)
                    refused.append(getattr(err.value, "code", None))
                return rows, param, arrow.to_pylist(), refused

        rows, param, arrow, refused = await asyncio.to_thread(read)
        assert rows == writer.query_rows(ROLLOUTS) and len(rows[1]) == 6
        assert param == 3 and arrow == [{"SourceTopic": "agl.spans", "Reason": "not JSON"}]
        assert refused == [164] * 5  # READONLY: ClickHouse itself refuses, whatever the statement
        # the owner's own connection is untouched by the door's read-only session
        insert_records(writer, "rollouts", [make_snapshot("ro-00000000bbbb")])
        assert writer.scalar("SELECT count() FROM rollouts FINAL") == 7
        assert await asyncio.to_thread(lambda: open_reader(dsn).scalar("SELECT count() FROM rollouts FINAL")) == 7
    finally:
        await door.stop()
        writer.close()
    assert not door_file(engine_directory(dsn)).exists()


async def test_the_door_refuses_a_missing_or_wrong_token(settings: Settings) -> None:
    writer = connect(settings.effective_clickhouse_dsn)
    migrate(writer)
    door = await SqlDoor(writer.target, DoorOptions(token="s3cret-token")).start()
    try:
        assert door.address is not None
        url = door.address.url
        async with httpx.AsyncClient(timeout=10) as client:
            assert (await client.get(f"{url}/ping")).text == "Ok.\n"  # liveness carries no data
            missing = await client.post(url, content="SELECT 1")
            wrong_basic = await client.post(url, content="SELECT 1", auth=("agl", "guess"))
            wrong_bearer = await client.post(url, content="SELECT 1", headers={"Authorization": "Bearer guess"})
            wrong_key = await client.get(url, params={"query": "SELECT 1"}, headers={"X-ClickHouse-Key": "guess"})
            right = await client.post(url, content="SELECT 40 + 2", headers={"Authorization": "Bearer s3cret-token"})
            right_basic = await client.get(url, params={"query": "SELECT 'x' FORMAT JSONEachRow"}, auth=("any", "s3cret-token"))
        assert missing.status_code == 401 and "REQUIRED_PASSWORD" in missing.text and missing.headers["www-authenticate"]
        assert {r.status_code for r in (wrong_basic, wrong_bearer, wrong_key)} == {403}
        assert all("AUTHENTICATION_FAILED" in r.text for r in (wrong_basic, wrong_bearer, wrong_key))
        assert right.status_code == 200 and right.text == "42\n"
        assert right_basic.json() == {"'x'": "x"} and right_basic.headers["x-clickhouse-format"] == "JSONEachRow"
    finally:
        await door.stop()
        writer.close()


@pytest.fixture
def owner(settings: Settings, request: pytest.FixtureRequest) -> Iterator[str]:
    """Another process owning the engine (with its door when the test is parametrized ``door=True``)."""
    dsn = settings.effective_clickhouse_dsn
    args = [sys.executable, "-m", "tests.processors.clickhouse.engine_owner", dsn, *(["--door"] if request.param else [])]
    proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield dsn
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)


def agl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agl_stream.cli.main", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("owner", [True], indirect=True)
def test_sql_and_replay_commands_read_while_another_process_owns_the_engine(owner: str) -> None:
    counts = agl("sql", "SELECT Status AS status, count() AS n FROM rollouts FINAL GROUP BY status ORDER BY status",
                 "-f", "csv", "--dsn", owner)  # fmt: skip
    assert counts.returncode == 0, counts.stderr
    assert counts.stdout.splitlines() == ["status,n", "failed,1", "running,1", "succeeded,4"]
    saved = agl("sql", "--saved", "rollout_outcomes", "-f", "json", "--dsn", owner)
    assert saved.returncode == 0 and '"status": "succeeded"' in saved.stdout
    param = agl("sql", "SELECT count() AS n FROM spans FINAL WHERE RolloutId = {r:String}", "-p", "r=ro-000000000002",
                "-f", "csv", "--dsn", owner)  # fmt: skip
    assert param.stdout.splitlines() == ["n", "3"], param.stderr
    write = agl("sql", "INSERT INTO workers (WorkerId) VALUES ('w-9')", "--dsn", owner)
    assert write.returncode == 1 and "READONLY" in write.stderr and "Traceback" not in write.stderr
    dry = agl("replay", "--adapter", "tracer", "--dry-run", "--from", owner)
    assert dry.returncode == 0 and '"attempts": 4' in dry.stdout, dry.stderr
    into_table = agl("replay", "--adapter", "tracer", "--from", owner)
    assert into_table.returncode == 1 and len(into_table.stderr.strip().splitlines()) == 1
    assert "read-only" in into_table.stderr and "--dry-run or --to-topic" in into_table.stderr


@pytest.mark.parametrize("owner", [False], indirect=True)
def test_an_owned_engine_without_a_door_is_one_clear_line(owner: str) -> None:
    result = agl("sql", "SELECT count() FROM spans", "--dsn", owner)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: the embedded ClickHouse at ") and "is owned by process " in line and "no SQL door" in line
    with pytest.raises(EngineUnavailable, match="serves no SQL door"):
        open_reader(owner)
    migrate_owned = agl("clickhouse", "migrate", "--dsn", owner)
    assert migrate_owned.returncode == 1 and "Traceback" not in migrate_owned.stderr
    assert migrate_owned.stderr.strip().splitlines() == [migrate_owned.stderr.strip()] and "need it idle" in migrate_owned.stderr


def test_a_reader_whose_door_went_away_says_unavailable(settings: Settings) -> None:
    """A front door reading spans through the SQL door, cut off from it (the nemesis's ``sql-door``
    partition): the reader raises SpanReaderUnavailable (a 503 with Retry-After), not a bare driver error."""
    import asyncio

    from agl_stream.client import SpanReaderUnavailable
    from agl_stream.client.clickhouse_reader import ClickHouseSpanReader

    dsn = settings.effective_clickhouse_dsn
    args = [sys.executable, "-m", "tests.processors.clickhouse.engine_owner", dsn, "--door"]
    proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    reader = ClickHouseSpanReader(dsn)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert asyncio.run(reader.count_spans()) > 0
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(30)
        with pytest.raises(SpanReaderUnavailable, match="unreachable"):
            asyncio.run(reader.count_spans())
    finally:
        proc.kill()
        proc.wait(30)
