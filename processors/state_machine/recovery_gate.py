"""Whether faust's changelog recovery really finished for the changelog partitions this instance owns now.

faust (0.15.3) can report a recovery complete that a newer rebalance interrupted. Its recovery loop waits
for "nothing left to read", computed over the partitions it has a high watermark *and* a read offset for.
A rebalance in the middle drops the revoked partitions from both and adds the newly assigned ones with
neither, so for a moment nothing seems left: the loop finishes the old generation's recovery and calls
the tables' recovery callbacks while the new generation's recovery has not read anything yet.

The nemesis (seed 303) saw it: a processors instance restarted, was assigned two changelog partitions,
and six seconds later, in a second rebalance, two others. faust called the callbacks at once; the state
machine went live, and its span reader applied spans to partitions whose states were still being read
(the real recovery ended 21 s later). A span of a running attempt whose state had not been read yet
created a state without its task; the recovered state (revision 1) then lost to it, and ten succeeded
rollouts never got their final snapshot (their task records had long been committed).

So the state machine checks, when faust calls it, that every owned changelog partition was read to the
high watermark this generation measured, and goes live only then (faust calls again when the new
recovery ends).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional


def partitions_behind(
    active: set[Any], highwaters: Mapping[Any, Optional[int]], offsets: Mapping[Any, Optional[int]]
) -> list[Any]:
    """The owned changelog partitions (``active``) not yet read to their high watermark.

    ``highwaters`` and ``offsets`` are faust's: the last offset of each partition (-1: empty) as measured
    at the start of this generation's recovery, and the last offset the recovery applied (None: none). A
    partition with no high watermark at all was assigned after the recovery that is ending measured them.
    """
    behind = []
    for tp in active:
        if tp not in highwaters:
            behind.append(tp)
            continue
        highwater = highwaters[tp]
        if highwater is None or highwater < 0:
            continue  # empty when measured: nothing to read
        offset = offsets.get(tp)
        if offset is None or offset < highwater:
            behind.append(tp)
    return sorted(behind, key=lambda tp: (tp.topic, tp.partition))


def recovery_behind(app: Any, changelog_topic: str) -> list[Any]:
    """:func:`partitions_behind` for ``changelog_topic`` from faust ``app``'s recovery service."""
    recovery = app.tables.recovery
    active = {tp for tp in recovery.active_tps if tp.topic == changelog_topic}
    return partitions_behind(active, recovery.active_highwaters, recovery.active_offsets)
