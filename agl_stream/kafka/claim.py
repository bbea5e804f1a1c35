"""Claiming a task from ``agl.tasks``: the protocol every consumer in the runners' group follows.

An attempt id names one execution, so a task must be *claimed* before anything runs it: its
``started`` event is acknowledged on ``agl.attempts`` and its offset is committed, in that order.
From then on the attempt is the state machine's business (a silent attempt becomes
``unresponsive``). Until the claim completes nothing ran, so redelivery is harmless: if the
partition is revoked mid-claim (even if assigned back since) the task is left to its new owner and
the only trace is a repeated ``started`` event, which the state machine ignores. One exception: a
rebalance commits what is done before giving a partition away, so a claim whose own commit failed
(the broker was down) may be completed by that commit; then the record goes to nobody else and the
claim holds.

A commit whose response is lost although it landed (the broker died between the two), followed by a
rebalance whose own commit fails too, leaves the claim in doubt: the record may be committed (then
nobody else gets it) or not (then the partition's next owner does). The group's committed offset settles
it once the group has moved on a generation (:meth:`RecordConsumer.claim_landed`: every commit carries
its generation and where its tenure began). Where even that cannot tell (the coordinator unreachable for
10 s, or two generations passed), the claim is given up and logged as an error; should it have landed, the
state machine's watchdog (``unresponsive_seconds``) closes its attempt and retries it when the rollout's
config asks for that.

Shared by :class:`~agl_stream.runner.LitAgentRunner` and by ``StoreClient.dequeue_rollout`` (a
hand-written runner is a member of the same consumer group and claims the same way).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Optional

from aiokafka.structs import ConsumerRecord

from agl_stream.kafka._consumer import RecordConsumer
from agl_stream.service import Backoff, retrying

logger = logging.getLogger(__name__)

#: the consumer group of everything that runs tasks (runner processes and hand-written runners) with the
#: default topic prefix; in general ``Settings.group("runners")``
RUNNERS_GROUP = "agl-runners"

#: header of a task record that was claimed when it was written (``start_rollout``/``start_attempt``):
#: its writer runs it, so consumers of the runners' group skip it
CLAIMED_HEADER = "agl-claimed"



class _Moved(Exception):
    """The record's partition moved to another member before its ``started`` was acknowledged."""

def is_preclaimed(headers: dict[str, bytes]) -> bool:
    return CLAIMED_HEADER in headers


async def claim_record(
    consumer: RecordConsumer,
    record: ConsumerRecord,
    report_started: Callable[[], Awaitable[Any]],
    commit: Callable[[], Awaitable[Any]],
    what: str,
    tenure: Optional[int],
) -> bool:
    """Report ``started`` then commit ``record``'s offset, both acknowledged; False: the partition moved first.

    ``tenure``: :meth:`RecordConsumer.ownership` when the record was fetched (``Decoded.tenure``). A
    record fetched before a rebalance that took its partition away and gave it back is stale: the
    new tenure redelivers it from the committed offset, and only that delivery may claim it.
    """
    owner = tenure
    try:
        # the producer already retried; keep trying, with no end, while the partition is ours
        async for attempt in retrying(f"report {what} started", backoff=Backoff(0.2, 5.0), log=logger,
                                      retry_if=lambda exc: not isinstance(exc, _Moved)):  # fmt: skip
            with attempt:
                if owner is None or consumer.ownership(record) != owner:
                    raise _Moved
                await report_started()
    except _Moved:
        return False
    consumer.done(record)
    delay = 0.01  # an earlier claim in flight usually commits within milliseconds: look again soon
    while not consumer.is_committed(record):
        if consumer.ownership(record) != owner:
            # The rebalance commits what is done before it gives the partition away: if that commit
            # covered this record, nobody gets it again and the claim is complete after all.
            if consumer.committed_in_tenure(record, owner):  # type: ignore[arg-type]
                logger.info("the claim of %s was committed by the rebalance that took its partition; it holds", what)
                return True
            # A failed commit may have landed with its answer lost: the group's committed offset tells.
            landed = await consumer.claim_landed(record, owner)  # type: ignore[arg-type]
            if landed:
                logger.info("the claim of %s had landed though its commit seemed to fail; it holds", what)
                return True
            if landed is None:
                logger.error("the claim of %s is in doubt (the group's committed offset could not settle it): giving it "
                             "up; if it had landed, the state machine's watchdog retries its attempt "
                             "(RolloutConfig.unresponsive_seconds)", what)  # fmt: skip
            return False
        try:
            await commit()
        except Exception as exc:  # a stale group generation fails here, then the rebalance revokes
            logger.warning("could not commit the claim of %s (%r); retrying", what, exc)
        if not consumer.is_committed(record):  # an earlier task's claim may still be in flight
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
    return True
