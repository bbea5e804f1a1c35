"""Hooks: user callbacks around each rollout (upstream's ``Hook`` names and keyword arguments).

Errors raised by a hook are logged and counted, never fatal to the rollout or the runner.
"""

from __future__ import annotations

import logging
from typing import Any, Sequence

from agl_stream.types.upstream import ParallelWorkerBase

logger = logging.getLogger(__name__)

HOOK_METHODS = ("on_rollout_start", "on_trace_start", "on_trace_end", "on_rollout_end")


class Hook(ParallelWorkerBase):
    """Override any of the async callbacks; all arguments are keyword-only."""

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Any) -> None:
        """Before tracing starts."""

    async def on_trace_start(self, *, agent: Any, runner: Any, tracer: Any, rollout: Any) -> None:
        """Inside the trace context, before the agent runs."""

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Any) -> None:
        """Inside the trace context, after the agent returned or raised."""

    async def on_rollout_end(self, *, agent: Any, runner: Any, rollout: Any, spans: Sequence[Any]) -> None:
        """After tracing, before the attempt is reported finished."""


class HookRunner:
    def __init__(self, hooks: Sequence[Hook]) -> None:
        self.hooks = list(hooks)
        self.errors = 0

    async def fire(self, method: str, **kwargs: Any) -> None:
        if method not in HOOK_METHODS:
            raise ValueError(f"unknown hook {method!r}")
        for hook in self.hooks:
            try:
                await getattr(hook, method)(**kwargs)
            except Exception:
                self.errors += 1
                logger.exception("hook %s.%s failed (ignored)", type(hook).__name__, method)
