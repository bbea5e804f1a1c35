"""Which owned changelog partitions faust's recovery has not read yet (pure logic; the wiring is tested in
test_state_machine against a real broker)."""

from __future__ import annotations

from typing import NamedTuple

from agl_stream_processors.state_machine.recovery_gate import partitions_behind


class TP(NamedTuple):
    topic: str
    partition: int


CHANGELOG = "agl.state-machine-changelog"
P0, P1, P2, P3 = (TP(CHANGELOG, p) for p in range(4))


def test_a_finished_recovery_leaves_nothing_behind() -> None:
    highwaters = {P0: 120, P1: -1}  # P1 was empty when measured
    offsets = {P0: 120, P1: None}
    assert partitions_behind({P0, P1}, highwaters, offsets) == []


def test_partitions_assigned_by_a_rebalance_in_the_middle_have_no_high_watermark_yet() -> None:
    """Seed 303: the instance held P0, P1 (recovered); a second rebalance gave it P2, P3 instead. faust dropped
    P0, P1 and added P2, P3 with neither a high watermark nor an offset, saw nothing left and reported the
    recovery complete."""
    assert partitions_behind({P2, P3}, {}, {P2: None, P3: None}) == [P2, P3]


def test_a_partition_read_part_way_is_behind() -> None:
    assert partitions_behind({P0, P1}, {P0: 5000, P1: 10}, {P0: 1200, P1: 10}) == [P0]
    assert partitions_behind({P0}, {P0: 10}, {P0: None}) == [P0]  # measured, not read at all
