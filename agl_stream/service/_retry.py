"""One way to retry with backoff (tenacity underneath), for every service and client.

    async for attempt in retrying("insert into spans", backoff=Backoff(0.5, 30), stop=stop_event):
        with attempt:
            await insert()

Exponential backoff from ``backoff.initial`` doubling to ``backoff.maximum``; it ends when the action
succeeds, when an error is not one to retry (``retry_if``), when the next wait would pass ``timeout``
seconds from the first try, after ``attempts`` tries, when ``give_up_if()`` says so (checked before each
wait: the partition moved away, the service is stopping), or when ``stop`` is set during a wait
(:class:`RetryStopped`). Every end but success re-raises the last error, except ``stop``; every retry is
logged with what failed and the next wait.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_before_delay,
    stop_never,
    wait_exponential,
)
from tenacity.stop import stop_base

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backoff:
    """Waits between tries: ``initial`` seconds, doubled each time, at most ``maximum``."""

    initial: float = 0.1
    maximum: float = 2.0


class RetryStopped(Exception):
    """The service began to stop while an action waited to be retried."""


class _GiveUpIf(stop_base):
    def __init__(self, condition: Callable[[], bool]) -> None:
        self.condition = condition

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.condition()


def _stop_rule(timeout: Optional[float], attempts: Optional[int], give_up_if: Optional[Callable[[], bool]]) -> Any:
    rule: Any = stop_never
    if timeout is not None:
        rule = rule | stop_before_delay(timeout)
    if attempts is not None:
        rule = rule | stop_after_attempt(attempts)
    if give_up_if is not None:
        rule = rule | _GiveUpIf(give_up_if)
    return rule


def _log_retry(what: str, log: logging.Logger, level: int) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.log(level, "%s failed (try %d: %r); retrying in %.1fs", what, state.attempt_number, error, state.upcoming_sleep)

    return before_sleep


def retrying(what: str, *, backoff: Backoff = Backoff(), timeout: Optional[float] = None, attempts: Optional[int] = None,
             retry_if: Callable[[BaseException], bool] = lambda exc: True,
             give_up_if: Optional[Callable[[], bool]] = None, stop: Optional[asyncio.Event] = None,
             log: logging.Logger = logger, level: int = logging.WARNING,
             before_sleep: Optional[Callable[[RetryCallState], None]] = None) -> AsyncRetrying:  # fmt: skip
    """An ``async for`` retry loop (see the module's docstring). ``before_sleep`` replaces the log line."""

    async def sleep(seconds: float) -> None:
        if stop is None:
            await asyncio.sleep(seconds)
            return
        try:
            await asyncio.wait_for(stop.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            return
        raise RetryStopped(what)

    return AsyncRetrying(
        sleep=sleep,
        stop=_stop_rule(timeout, attempts, give_up_if),
        wait=wait_exponential(multiplier=backoff.initial, min=backoff.initial, max=backoff.maximum),
        retry=retry_if_exception(lambda exc: not isinstance(exc, asyncio.CancelledError) and retry_if(exc)),
        before_sleep=before_sleep or _log_retry(what, log, level),
        reraise=True,
    )


def retrying_blocking(what: str, *, backoff: Backoff = Backoff(), timeout: Optional[float] = None,
                      attempts: Optional[int] = None, retry_if: Callable[[BaseException], bool] = lambda exc: True,
                      log: logging.Logger = logger, level: int = logging.WARNING,
                      before_sleep: Optional[Callable[[RetryCallState], None]] = None) -> Retrying:  # fmt: skip
    """The same loop for synchronous code (``for attempt in retrying_blocking(...): with attempt: ...``)."""
    return Retrying(
        stop=_stop_rule(timeout, attempts, None),
        wait=wait_exponential(multiplier=backoff.initial, min=backoff.initial, max=backoff.maximum),
        retry=retry_if_exception(retry_if),
        before_sleep=before_sleep or _log_retry(what, log, level),
        reraise=True,
    )
