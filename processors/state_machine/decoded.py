"""The rollout states this state machine wrote, kept decoded beside the table's JSON.

Every input loads its rollout's state, and the watchdog loads every running rollout each second; each
load validated the table's JSON with pydantic again. A state written here is kept with the very bytes
object stored in the table: a load that finds that same object (an identity check, so a value faust's
recovery or the changelog catch-up put there is decoded afresh) reuses the state. The rules never
modify a state they are given (they copy it first), so handing the same object out again is safe.
Only rollouts that are not terminal are kept (a terminal one sees almost no input), at most ``limit``.
"""

from __future__ import annotations

from typing import Optional

from agl_stream_processors.state_machine.rules import RolloutState


class DecodedStates:
    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._states: dict[bytes, tuple[bytes, RolloutState]] = {}  # key -> (the table's bytes, their state)

    def __len__(self) -> int:
        return len(self._states)

    def load(self, key: bytes, raw: Optional[bytes]) -> Optional[RolloutState]:
        """The state ``raw`` (the table's value for ``key``) encodes."""
        if not raw:
            return None
        kept = self._states.get(key)
        if kept is not None and kept[0] is raw:
            return kept[1]
        return RolloutState.model_validate_json(raw)

    def remember(self, key: bytes, raw: bytes, state: RolloutState) -> None:
        """``raw`` (just stored in the table for ``key``) encodes ``state``."""
        self._states.pop(key, None)  # re-inserted last: the least recently written go first
        if state.terminal:
            return
        if len(self._states) >= self.limit:
            del self._states[next(iter(self._states))]
        self._states[key] = (raw, state)

    def forget(self, key: bytes) -> None:
        self._states.pop(key, None)

    def clear(self) -> None:
        self._states.clear()
