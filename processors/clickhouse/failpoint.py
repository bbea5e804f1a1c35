"""Fault injection at the ClickHouse client seam: a file that makes ClickHouse "unavailable" or "slow".

The embedded engine (chdb) lives inside the processors process, so unlike Kafka (a TCP proxy in
front of the broker) there is no server to stop. This failpoint is the nearest real thing: set
``AGL_CLICKHOUSE_FAILPOINT=/path/to/file`` in the environment of a process; every client that
process opens afterwards (:func:`agl_stream_processors.clickhouse.connect`) consults the file before each call
that would reach the server (queries, commands, inserts):

* the file is absent: the call goes through unchanged;
* the file holds a number (seconds, e.g. ``1.5``): the call sleeps that long first, then goes
  through (a slow ClickHouse; the sleep happens under the client's lock, as a slow server holds it);
* the file exists with anything else (empty): the call raises
  :class:`clickhouse_connect.driver.exceptions.OperationalError`, the type clickhouse-connect's
  HTTP client raises for an unreachable server.

The variable is read once, when the client is created; with it unset the client is returned as it
is (no wrapper, no per-call file check). Write the file atomically (``os.replace``) so a reader
never sees it half-written. Operators can use it to rehearse an outage against a real deployment.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from pathlib import Path
from typing import Any, Mapping, Optional

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import OperationalError

from agl_stream.config import Settings, env_name

logger = logging.getLogger(__name__)

ENV = env_name("clickhouse_failpoint")

#: Client methods that reach the server; everything else (close, settings, attributes) passes through.
SERVER_CALLS = frozenset(
    {
        "command", "ping", "query", "query_arrow", "query_arrow_stream", "query_column_block_stream",
        "query_df", "query_df_stream", "query_np", "query_np_stream", "query_row_block_stream",
        "query_rows_stream", "query_df_arrow", "query_df_arrow_stream", "raw_query", "raw_stream", "insert",
        "insert_arrow", "insert_df", "insert_df_arrow", "data_insert", "raw_insert",
    }
)  # fmt: skip


class Failpoint:
    """The state of one failpoint file, read at every guarded call."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> Optional["Failpoint"]:
        path = Settings.from_env(env).clickhouse_failpoint
        return cls(path) if path is not None else None

    def check(self, call: str) -> None:
        """Sleep (slow mode) or raise (outage) according to the file; return at once when it is absent."""
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return
        except OSError as exc:  # unreadable (e.g. a directory): treat as an outage, the file exists
            text = f"<unreadable: {exc!r}>"
        delay = _seconds(text)
        if delay is not None:
            time.sleep(delay)
            return
        raise OperationalError(f"ClickHouse unavailable: injected by failpoint {self.path} ({ENV}) on {call}()")


def _seconds(text: str) -> Optional[float]:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


class FailpointClient:
    """Delegates everything to a clickhouse-connect client; server calls consult the failpoint first."""

    def __init__(self, client: Client, failpoint: Failpoint) -> None:
        self.__dict__["_client"] = client
        self.__dict__["_failpoint"] = failpoint

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.__dict__["_client"], name)
        if name not in SERVER_CALLS or not callable(attr):
            return attr
        failpoint: Failpoint = self.__dict__["_failpoint"]

        @functools.wraps(attr)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            failpoint.check(name)
            return attr(*args, **kwargs)

        return guarded

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_client"], name, value)  # e.g. ``client.database = ...``


def wrap(client: Client, env: Optional[Mapping[str, str]] = None) -> Client:
    """``client`` itself when ``AGL_CLICKHOUSE_FAILPOINT`` is unset, else a :class:`FailpointClient` around it."""
    failpoint = Failpoint.from_env(env)
    if failpoint is None:
        return client
    logger.warning("ClickHouse failpoint armed: calls fail or slow down while %s exists (%s)", failpoint.path, ENV)
    return FailpointClient(client, failpoint)  # type: ignore[return-value]  # a duck-typed Client


__all__ = ["ENV", "SERVER_CALLS", "Failpoint", "FailpointClient", "wrap"]
