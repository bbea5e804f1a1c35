"""A module next to the user's script (copied beside it by the test): imported by name in the children."""

from __future__ import annotations

import agl_stream as agl


class RecordingHook(agl.Hook):
    """Appends one line per rollout to ``path``: the tracer's label proves the tracer object arrived too."""

    def __init__(self, path: str, prefix: str) -> None:
        self.path = path
        self.prefix = prefix

    async def on_trace_start(self, *, agent, runner, tracer, rollout) -> None:  # type: ignore[no-untyped-def]
        with open(self.path, "a") as fh:
            fh.write(f"{self.prefix} start {rollout.rollout_id} tracer={getattr(tracer, 'label', None)}\n")

    async def on_rollout_end(self, *, agent, runner, rollout, spans) -> None:  # type: ignore[no-untyped-def]
        with open(self.path, "a") as fh:
            fh.write(f"{self.prefix} end {rollout.rollout_id} spans={len(spans)}\n")
