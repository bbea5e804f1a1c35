"""The ClickHouse failpoint (``AGL_CLICKHOUSE_FAILPOINT``): the fault-injection seam the chaos scenarios rely on.

If it silently did nothing, the ClickHouse-outage and slow-ClickHouse scenarios would test an
undisturbed pipeline; so: absent file = untouched, file = the error an unreachable server raises,
a number = that many seconds of delay, unset variable = the bare client.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from clickhouse_connect.driver.exceptions import OperationalError

from agl_stream.config import Settings
from agl_stream_processors.clickhouse import connect
from agl_stream_processors.clickhouse.failpoint import ENV, FailpointClient, wrap


class _Recorder:
    """Stands in for a clickhouse-connect client: records which methods were reached."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.database = "before"

    def insert_arrow(self, table: str, data: Any) -> str:
        self.calls.append("insert_arrow")
        return "inserted"

    def command(self, sql: str) -> str:
        self.calls.append("command")
        return "done"

    def close(self) -> None:
        self.calls.append("close")


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_unset_variable_returns_the_client_itself() -> None:
    client = _Recorder()
    assert wrap(client, env={}) is client  # type: ignore[arg-type]
    assert wrap(client, env={ENV: "  "}) is client  # type: ignore[arg-type]


def test_file_absent_passes_present_fails_number_delays(tmp_path: Path) -> None:
    path = tmp_path / "ch-down"
    inner = _Recorder()
    client: Any = wrap(inner, env={ENV: str(path)})  # type: ignore[arg-type]
    assert isinstance(client, FailpointClient)

    assert client.insert_arrow("t", None) == "inserted"  # no file: untouched

    _write(path, "")
    with pytest.raises(OperationalError, match="failpoint"):
        client.insert_arrow("t", None)
    with pytest.raises(OperationalError, match="command"):
        client.command("SELECT 1")
    assert inner.calls == ["insert_arrow"]  # the failing calls never reached the client
    client.close()  # not a server call: closing works during an outage
    client.database = "after"  # attributes are the wrapped client's
    assert inner.database == "after" and client.database == "after"

    _write(path, "0.3")
    started = time.monotonic()
    assert client.command("SELECT 1") == "done"
    assert time.monotonic() - started >= 0.3

    path.unlink()
    started = time.monotonic()
    assert client.command("SELECT 1") == "done"
    assert time.monotonic() - started < 0.2


@pytest.mark.parametrize("text", ["down", "-1", "nan", "inf"])
def test_anything_but_a_finite_delay_is_an_outage(tmp_path: Path, text: str) -> None:
    path = tmp_path / "ch-down"
    _write(path, text)
    client: Any = wrap(_Recorder(), env={ENV: str(path)})  # type: ignore[arg-type]
    with pytest.raises(OperationalError):
        client.command("SELECT 1")


def test_the_real_client_fails_and_recovers_under_the_failpoint(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through :func:`connect` and the embedded engine: the variable is read at connect time."""
    path = tmp_path / "ch-down"
    monkeypatch.setenv(ENV, str(path))
    ch = connect(settings.effective_clickhouse_dsn, create_database=True)
    monkeypatch.delenv(ENV)  # read once: later changes to the environment do not matter
    try:
        ch.command("CREATE TABLE t (n UInt8) ENGINE = MergeTree ORDER BY n")
        data = pa.table({"n": pa.array([1, 2], pa.uint8())})
        _write(path, "")
        with pytest.raises(OperationalError, match="injected by failpoint"):
            ch.insert_arrow("t", data)
        with pytest.raises(OperationalError):
            ch.scalar("SELECT count() FROM t")
        path.unlink()
        assert ch.insert_arrow("t", data) == 2
        _write(path, "0.25")
        started = time.monotonic()
        assert ch.scalar("SELECT count() FROM t") == 2
        assert time.monotonic() - started >= 0.25
        _write(path, "")
    finally:
        ch.close()  # works while the failpoint is on
    with connect(settings.effective_clickhouse_dsn) as plain:  # the variable is gone: a bare client
        assert not isinstance(plain.raw, FailpointClient)
        assert plain.scalar("SELECT count() FROM t") == 2
