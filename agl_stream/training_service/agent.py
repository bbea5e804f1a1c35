"""``agent_func(resource, task) -> float`` as the LitAgent the runner processes execute."""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Mapping, Optional, Union

from agl_stream.litagent import LitAgent
from agl_stream.training_service.types import Resource, Task
from agl_stream.types import LLM, NamedResources, Rollout

AgentFunc = Callable[[Resource, Task], Union[float, None, Awaitable[Optional[float]]]]


def _llm(resources: NamedResources) -> LLM:
    llm = resources.get("main_llm")
    if isinstance(llm, LLM):
        return llm
    found = [r for r in resources.values() if isinstance(r, LLM)]
    if not found:
        raise RuntimeError(f"the server published no LLM resource (got {sorted(resources)})")
    return found[0]


class ServiceAgent(LitAgent[Any]):
    """Calls ``agent_func`` with the served policy as a :class:`Resource` and the item as a :class:`Task`;
    its return value is the rollout's final reward."""

    def __init__(self, agent_func: AgentFunc) -> None:
        super().__init__()
        if not callable(agent_func):
            raise TypeError(f"agent_func must be callable, got {type(agent_func).__name__}")
        self.agent_func = agent_func

    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.agent_func)

    def _arguments(self, task: Any, resources: NamedResources, rollout: Rollout) -> tuple[Resource, Task]:
        llm = _llm(resources)
        runner = self._runner  # None when called outside a runner (a unit test)
        resource = Resource(
            model_api=llm.endpoint,
            model_name=llm.model,
            task_id=rollout.rollout_id,
            worker_id=getattr(runner, "worker_id", "") or "",
            metadata={"policy_version": llm.policy_version, "sampling_parameters": dict(llm.sampling_parameters),
                      "mode": rollout.mode, "api_key": llm.api_key},  # fmt: skip
        )
        return resource, Task(task if isinstance(task, Mapping) else {"question": task})

    def rollout(self, task: Any, resources: NamedResources, rollout: Rollout) -> Optional[float]:
        value = self.agent_func(*self._arguments(task, resources, rollout))
        return None if value is None else float(value)  # type: ignore[arg-type]

    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> Optional[float]:
        value = await self.agent_func(*self._arguments(task, resources, rollout))  # type: ignore[misc]
        return None if value is None else float(value)
