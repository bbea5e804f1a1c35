"""Retrying a Kafka operation while the cluster is briefly unreachable (a node restarting, a partition)."""

from __future__ import annotations

import logging

from tenacity import AsyncRetrying

from agl_stream.kafka._producer import is_retriable
from agl_stream.service import Backoff, retrying

logger = logging.getLogger(__name__)


def retrying_while_unreachable(what: str, timeout: float) -> AsyncRetrying:
    """The kit's retry loop on aiokafka's retriable errors (backoff 0.1-2 s) for up to ``timeout`` seconds.

        async for attempt in retrying_while_unreachable("topics", 60):
            with attempt:
                await operation()
    """
    return retrying(f"{what}: Kafka not reachable", backoff=Backoff(0.1, 2.0), timeout=timeout, retry_if=is_retriable,
                    log=logger)  # fmt: skip
