"""Committed offsets that never read "none" when the group coordinator said "not now".

An OffsetFetch answer (v2 and later) carries a group-level error beside its partitions: a coordinator that
was just elected after a node's death answers ``COORDINATOR_LOAD_IN_PROGRESS`` (or ``NOT_COORDINATOR``)
there, with every partition at offset -1. aiokafka 0.14 reads the partitions and not that error, so it
reports "no committed offset" for every partition of the group. Readers that start where their group
left off then start over: the nemesis saw the state machine, restarted just after a broker node's SIGKILL,
replay its four input partitions from offset 0, and file the task records of 2,529 rollouts that had long
succeeded (and left its table) as ``queuing`` again.

:func:`install` makes aiokafka's coordinator raise the group-level error instead (retriable ones are retried
by its own fetch loop, after rediscovering the coordinator where that is the error). Every consumer of the
process gets it, faust's included: it is installed when :mod:`agl_stream.kafka` is imported.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from aiokafka import errors as Errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetFetchRequest
from aiokafka.structs import OffsetAndMetadata, TopicPartition

NO_COMMITTED_OFFSET = -1
_COORDINATOR_MOVED = (Errors.NotCoordinatorForGroupError, Errors.GroupCoordinatorNotAvailableError)


def group_error(response: Any) -> type[Errors.KafkaError]:
    """The group-level error of an OffsetFetch answer (``NoError`` for v0-v1, which have none)."""
    return Errors.for_code(getattr(response, "error_code", 0))


def committed_from(response: Any) -> dict[TopicPartition, OffsetAndMetadata]:
    """The committed offsets an OffsetFetch answer holds; raises its group-level or a partition's error.

    A partition at -1 has no committed offset and is left out (as aiokafka does); an unknown topic is
    left out too (aiokafka logs it), any other partition error is raised.
    """
    error = group_error(response)
    if error is not Errors.NoError:
        raise error()
    offsets = {}
    for topic, partitions in response.topics:
        for partition, offset, metadata, error_code in partitions:
            partition_error = Errors.for_code(error_code)
            if partition_error is Errors.UnknownTopicOrPartitionError:
                continue
            if partition_error is not Errors.NoError:
                raise partition_error()
            if offset != NO_COMMITTED_OFFSET:
                offsets[TopicPartition(topic, partition)] = OffsetAndMetadata(offset, metadata)
    return offsets


async def _fetch_committed_offsets(self: GroupCoordinator, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetAndMetadata]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    response = await self._send_req(OffsetFetchRequest(self.group_id, list(by_topic.items())))
    try:
        return committed_from(response)
    except _COORDINATOR_MOVED:
        self.coordinator_dead()  # the loop that called us finds the new coordinator, then asks again
        raise


def install() -> None:
    """Replace aiokafka's OffsetFetch reading with :func:`committed_from`'s (idempotent).

    It replaces a private method of the pinned aiokafka (0.14.0): an upgrade that renames it fails here, at
    import, instead of silently going back to reading "none"."""
    if not hasattr(GroupCoordinator, "_do_fetch_commit_offsets"):
        raise ImportError("aiokafka's GroupCoordinator._do_fetch_commit_offsets is gone: agl_stream/kafka/_offset_fetch.py "
                          "must follow the new aiokafka")  # fmt: skip
    GroupCoordinator._do_fetch_commit_offsets = _fetch_committed_offsets  # type: ignore[method-assign]
