"""The kit's one retry loop: backoff, the ends (success, a fatal error, timeout, tries, give-up, stop)."""

from __future__ import annotations

import asyncio
import time

import pytest

from agl_stream.service import Backoff, RetryStopped, retrying, retrying_blocking

FAST = Backoff(0.01, 0.04)


class Flaky:
    def __init__(self, failures: int, error: type[Exception] = ConnectionError) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "ok"


async def run(action: Flaky, **options: object) -> str:
    async for attempt in retrying("the action", **{"backoff": FAST, **options}):  # type: ignore[arg-type]
        with attempt:
            return await action()
    raise AssertionError("the loop ended without an outcome")


async def test_it_retries_until_the_action_succeeds_and_logs_each_retry(caplog: pytest.LogCaptureFixture) -> None:
    action = Flaky(3)
    assert await run(action) == "ok" and action.calls == 4
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["the action failed"] * 3


async def test_an_error_not_to_retry_is_raised_at_once() -> None:
    action = Flaky(5, ValueError)
    with pytest.raises(ValueError, match="failure 1"):
        await run(action, retry_if=lambda exc: isinstance(exc, ConnectionError))
    assert action.calls == 1


async def test_tries_and_timeout_bound_it_and_the_last_error_is_raised() -> None:
    action = Flaky(100)
    with pytest.raises(ConnectionError, match="failure 3"):
        await run(action, attempts=3)
    action = Flaky(10_000)
    began = time.monotonic()
    with pytest.raises(ConnectionError):
        await run(action, timeout=0.3)
    assert time.monotonic() - began < 0.3 + 1.0 and action.calls > 3  # it never waits past the timeout


async def test_give_up_if_is_asked_before_each_wait() -> None:
    action, ours = Flaky(100), {"still": 2}

    def moved() -> bool:
        ours["still"] -= 1
        return ours["still"] < 0

    with pytest.raises(ConnectionError, match="failure 3"):
        await run(action, give_up_if=moved)


async def test_a_stop_during_a_wait_ends_the_loop_at_once() -> None:
    stop, action = asyncio.Event(), Flaky(100)
    asyncio.get_running_loop().call_later(0.2, stop.set)
    began = time.monotonic()
    with pytest.raises(RetryStopped):
        await run(action, backoff=Backoff(5.0, 5.0), stop=stop)
    assert time.monotonic() - began < 3.0 and action.calls == 1


async def test_cancellation_is_never_retried() -> None:
    calls = 0

    async def cancelled() -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        async for attempt in retrying("x", backoff=FAST):
            with attempt:
                await cancelled()
    assert calls == 1


def test_the_blocking_loop_has_the_same_rules() -> None:
    calls = 0
    for attempt in retrying_blocking("x", backoff=FAST, attempts=5):
        with attempt:
            calls += 1
            if calls < 3:
                raise ConnectionError
    assert calls == 3
    with pytest.raises(OSError):
        for attempt in retrying_blocking("x", backoff=FAST, attempts=2):
            with attempt:
                raise OSError("always")
