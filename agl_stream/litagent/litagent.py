"""``LitAgent``: the base class of agents the runner executes (upstream's names and dispatch rules).

The runner calls ``training_rollout[_async]`` for ``mode == "train"`` and
``validation_rollout[_async]`` otherwise; both default to ``rollout[_async]``. An agent is async
when it overrides any of the ``*_async`` methods. A rollout returns a ``float`` (the final reward),
``None`` (spans were traced, rewards emitted with ``emit_reward``) or a list of spans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar, Union

from opentelemetry.sdk.trace import ReadableSpan

from agl_stream.types import NamedResources, Rollout, Span, SpanCoreFields

if TYPE_CHECKING:
    from agl_stream.tracer.base import Tracer

T = TypeVar("T")

RolloutRawResult = Union[None, float, list[ReadableSpan], list[SpanCoreFields], list[Span]]

_ASYNC_METHODS = ("rollout_async", "training_rollout_async", "validation_rollout_async")


class LitAgent(Generic[T]):
    """Subclass and implement ``rollout`` (sync) or ``rollout_async`` (async)."""

    def __init__(self, *, trained_agents: Optional[str] = None) -> None:
        self.trained_agents = trained_agents
        self._runner: Any = None
        self._trainer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for the runner processes with its constructor state, never its runner or trainer."""
        state = dict(self.__dict__)
        state["_runner"] = None
        state["_trainer"] = None
        return state

    # ---------------------------------------------------------------- wiring

    def set_trainer(self, trainer: Any) -> None:
        self._trainer = trainer

    def get_trainer(self) -> Any:
        if getattr(self, "_trainer", None) is None:
            raise RuntimeError("this agent is not attached to a trainer (in runner processes it never is)")
        return self._trainer

    @property
    def trainer(self) -> Any:
        return self.get_trainer()

    def set_runner(self, runner: Any) -> None:
        self._runner = runner

    def get_runner(self) -> Any:
        if self._runner is None:
            raise RuntimeError("this agent is not attached to a runner")
        return self._runner

    @property
    def runner(self) -> Any:
        return self.get_runner()

    @property
    def tracer(self) -> "Tracer":
        return self.get_runner().tracer

    def is_async(self) -> bool:
        """True when a ``*_async`` rollout method is overridden, so the runner awaits it on its loop."""
        cls = type(self)
        return any(getattr(cls, m) is not getattr(LitAgent, m) for m in _ASYNC_METHODS)

    # ---------------------------------------------------------------- rollouts

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        raise NotImplementedError(f"{type(self).__name__} must implement rollout() or rollout_async()")

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        raise NotImplementedError(f"{type(self).__name__} must implement rollout() or rollout_async()")

    def training_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        return self.rollout(task, resources, rollout)

    def validation_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        return self.rollout(task, resources, rollout)

    async def training_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        return await self.rollout_async(task, resources, rollout)
