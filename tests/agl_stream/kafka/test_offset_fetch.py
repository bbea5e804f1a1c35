"""OffsetFetch answers: a group-level error is an error, never "no committed offset" (aiokafka 0.14 ignores it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as Errors
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.protocol.commit import OffsetFetchResponse_v3
from aiokafka.structs import TopicPartition

import agl_stream.kafka  # noqa: F401 - installs the reading
from agl_stream.kafka._offset_fetch import committed_from

TP0, TP1 = TopicPartition("agl.tasks", 0), TopicPartition("agl.tasks", 1)


def answer(group_error: int, offsets: tuple[int, int] = (-1, -1), partition_error: int = 0) -> Any:
    parts = [(0, offsets[0], "", partition_error), (1, offsets[1], "", 0)]
    return OffsetFetchResponse_v3(throttle_time_ms=0, topics=[("agl.tasks", parts)], error_code=group_error)


def test_a_loading_coordinator_is_an_error_not_an_empty_group() -> None:
    with pytest.raises(Errors.GroupLoadInProgressError):
        committed_from(answer(Errors.GroupLoadInProgressError.errno))
    with pytest.raises(Errors.NotCoordinatorForGroupError):
        committed_from(answer(Errors.NotCoordinatorForGroupError.errno))
    assert committed_from(answer(0, (5003, -1))) == {TP0: (5003, "")}  # -1: this partition has no commit
    assert committed_from(answer(0, (7, 8), partition_error=Errors.UnknownTopicOrPartitionError.errno)) == {TP1: (8, "")}


class FakeCoordinator:
    """Just what the installed reading and aiokafka's retry loop use: answers in order, a coordinator to find."""

    _do_fetch_commit_offsets = GroupCoordinator._do_fetch_commit_offsets
    fetch_committed_offsets = GroupCoordinator.fetch_committed_offsets

    def __init__(self, answers: list[Any]) -> None:
        self.group_id, self.answers, self.dead, self._retry_backoff_ms = "agl-state-machine", answers, 0, 1

    async def ensure_coordinator_known(self) -> None:
        return None

    def coordinator_dead(self) -> None:
        self.dead += 1

    async def _send_req(self, request: Any) -> Any:
        return self.answers.pop(0)


def test_the_consumer_retries_until_the_new_coordinator_has_loaded_the_group() -> None:
    """The nemesis: broker-1 SIGKILLed, the state machine restarted, and every input partition read as
    uncommitted (then replayed from offset 0 for ten minutes). Now the fetch waits for the real offsets."""
    coordinator = FakeCoordinator([answer(Errors.NotCoordinatorForGroupError.errno),
                                   answer(Errors.GroupLoadInProgressError.errno), answer(0, (5003, 5035))])  # fmt: skip
    offsets = asyncio.run(coordinator.fetch_committed_offsets([TP0, TP1]))  # type: ignore[arg-type]
    assert {tp: o.offset for tp, o in offsets.items()} == {TP0: 5003, TP1: 5035}
    assert coordinator.dead == 1 and coordinator.answers == []
