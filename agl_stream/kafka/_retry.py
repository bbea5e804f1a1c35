"""Retrying a Kafka operation while the cluster is briefly unreachable (a node restarting, a partition)."""

from __future__ import annotations

import logging

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_delay, wait_exponential

from agl_stream.kafka._producer import is_retriable

logger = logging.getLogger(__name__)


def retrying_while_unreachable(what: str, timeout: float) -> AsyncRetrying:
    """Retry on aiokafka's retriable errors (exponential backoff 0.1-2 s) for up to ``timeout`` seconds, then re-raise.

        async for attempt in retrying_while_unreachable("topics", 60):
            with attempt:
                await operation()
    """

    def log(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        logger.warning("%s: Kafka not reachable (%r); retrying in %.1fs", what, error, state.upcoming_sleep)

    return AsyncRetrying(
        retry=retry_if_exception(is_retriable), stop=stop_after_delay(timeout),
        wait=wait_exponential(multiplier=0.1, max=2.0), before_sleep=log, reraise=True,
    )  # fmt: skip
