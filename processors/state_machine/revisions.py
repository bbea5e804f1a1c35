"""The changelog keeps the most advanced state of each rollout, not the last one written.

Without transactions (the default, at-least-once), a state machine instance that was paused past its
group session (SIGSTOP, a long GC, a frozen VM) wakes up as a *zombie*: until its next heartbeat tells it
that the group moved on, it goes on processing the partitions it held, from its stale table, and writes
the resulting states to the changelog after the new owner's. A later recovery replays the changelog and,
last write winning, brings back the zombie's stale state. The nemesis saw exactly this: a rollout whose
first attempt had succeeded (its snapshot published, its trajectory decided ``final``) came back as
``running`` after the next rebalance; the watchdog then found the attempt silent and ran the rollout
again: two ``final`` trajectories for one rollout, 27 rollouts in one run.

So every state carries a ``revision``: the owner writes the stored revision + 1 with each update. A
zombie derives its writes from an older state, so they carry revisions the owner has already passed,
and the table's changelog replay (:func:`revision_table`) skips a record whose revision is below what the
key already holds. Equal revisions are the same step of the same input sequence; the later record wins,
as before. The zombie published its stale states as snapshots too, and their ``updated_at`` (its clock,
after the pause) is newer than the owner's: every reader of ``agl.rollouts`` (the rollouts table, clients'
views) keeps the newest ``updated_at``. So the recovery that skipped a key's stale record publishes the
key's state again, stamped with the recovery's time: the rebalance that the zombie's return causes comes
after its last write, and so does that snapshot. With ``AGL_KAFKA_TRANSACTIONS=true`` faust's exactly-once processing fences zombies instead.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

#: the field every stored state ends with (RolloutState's last field: nothing of the user's follows it)
REVISION_FIELD = b'"revision":'


def revision_of(raw: Optional[bytes]) -> Optional[int]:
    """The revision of a stored state (its JSON), 0 for a state written before revisions; None: no state."""
    if not raw:
        return None
    at = raw.rfind(REVISION_FIELD)
    if at < 0:
        return 0
    digits = bytearray()
    for byte in raw[at + len(REVISION_FIELD) :]:
        if 48 <= byte <= 57:
            digits.append(byte)
        elif digits or byte not in b" ":
            break
    return int(digits) if digits else 0


def newest_revisions(events: Iterable[Any], stored: Callable[[Any], Optional[bytes]]) -> tuple[list[Any], list[Any]]:
    """The changelog ``events`` (faust events: ``.key``, ``.value`` raw bytes) worth applying, in order, and the
    keys of those skipped: a value whose revision is below the key's highest so far (``stored``: what the table
    holds now). Deletions always apply."""
    highest: dict[Any, int] = {}
    kept: list[Any] = []
    skipped: list[Any] = []
    for event in events:
        key = event.key
        revision = revision_of(event.value)
        if revision is None:  # a tombstone
            highest.pop(key, None)
            kept.append(event)
            continue
        if key not in highest:
            current = revision_of(stored(key))
            highest[key] = -1 if current is None else current
        if revision < highest[key]:
            skipped.append(key)
            continue
        highest[key] = revision
        kept.append(event)
    return kept, skipped


def revision_table(on_skipped: Callable[[list[Any]], None]) -> type:
    """faust's ``Table`` whose changelog replay (recovery and standbys) applies :func:`newest_revisions` only;
    ``on_skipped`` gets the keys whose stale records were skipped (their snapshots need asserting again)."""
    import faust

    class RevisionTable(faust.Table):  # type: ignore[misc]
        def apply_changelog_batch(self, batch: Iterable[Any]) -> None:
            kept, skipped = newest_revisions(batch, lambda key: self.data.get(key))
            if skipped:
                on_skipped(skipped)
            super().apply_changelog_batch(kept)

    return RevisionTable
