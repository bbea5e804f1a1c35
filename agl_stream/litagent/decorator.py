"""``@rollout``: turn a plain function into a :class:`LitAgent` by injecting what it asks for.

Parameters are filled by name or by type annotation:

* ``task`` (or the first unannotated parameter): the rollout's input;
* ``llm`` / annotated ``LLM``: the first LLM resource (a ``ProxyLLM`` is stripped into the
  per-attempt ``LLM`` unless ``strip_proxy=False``);
* ``prompt_template`` / annotated ``PromptTemplate``: the first prompt template;
* ``rollout`` / annotated ``Rollout``: the (attempted) rollout being run;
* ``resources`` / annotated ``NamedResources``: every resource by name;
* any other parameter named like a resource key (``main_llm``): that resource.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from typing import Any, Callable, Optional, get_type_hints

from agl_stream.litagent.litagent import LitAgent, RolloutRawResult
from agl_stream.types import LLM, AttemptedRollout, NamedResources, PromptTemplate, ProxyLLM, Rollout

_RESOURCE_CLASSES = {"llm": LLM, "prompt_template": PromptTemplate}


def _strip(resource: Any, rollout: Rollout, strip_proxy: bool) -> Any:
    if strip_proxy and isinstance(resource, ProxyLLM) and isinstance(rollout, AttemptedRollout):
        return resource.with_attempt(rollout.rollout_id, rollout.attempt.attempt_id)
    return resource


class FunctionalLitAgent(LitAgent[Any]):
    """A :class:`LitAgent` around one function; calling it calls the function unchanged."""

    def __init__(self, rollout_func: Callable[..., Any], *, strip_proxy: bool = True) -> None:
        super().__init__()
        self.rollout_func = rollout_func
        self.strip_proxy = strip_proxy
        self._is_async = inspect.iscoroutinefunction(rollout_func)
        self._signature = inspect.signature(rollout_func)
        try:
            self._hints = get_type_hints(rollout_func)
        except Exception:  # unresolvable forward references: fall back to names only
            self._hints = {}
        self._plan = self._make_plan()
        functools.update_wrapper(self, rollout_func)  # type: ignore[arg-type]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.rollout_func(*args, **kwargs)

    def __reduce__(self) -> Any:
        """Pickle as a reference to the decorated module attribute (``@rollout def f``: the name ``f``
        is this agent, so the function itself cannot be pickled by reference), else rebuilt from the
        function. This is how agents reach the runner processes (see ``agl_stream.execution.components``)."""
        module_name = getattr(self.rollout_func, "__module__", None)
        qualname = getattr(self.rollout_func, "__qualname__", "")
        if module_name and "<" not in qualname and _lookup(sys.modules.get(module_name), qualname) is self:
            return (_agent_by_reference, (module_name, qualname))
        return (_rebuild_agent, (self.rollout_func, self.strip_proxy, self.trained_agents))

    def is_async(self) -> bool:
        return self._is_async

    @property
    def needs_resources(self) -> bool:
        """Whether any parameter asks for a resource (runners then wait for resources to be published)."""
        return any(kind not in ("task", "rollout") for _, kind in self._plan)

    def _kind(self, name: str) -> str:
        hint = self._hints.get(name)
        if name in ("task", "llm", "prompt_template", "rollout", "resources"):
            return name
        if isinstance(hint, type):
            if issubclass(hint, Rollout):
                return "rollout"
            if issubclass(hint, LLM):
                return "llm"
            if issubclass(hint, PromptTemplate):
                return "prompt_template"
        if hint is NamedResources:
            return "resources"
        return "named:" + name

    def _make_plan(self) -> list[tuple[str, str]]:
        plan: list[tuple[str, str]] = []
        for name, param in self._signature.parameters.items():
            if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            plan.append((name, self._kind(name)))
        if plan and not any(kind == "task" for _, kind in plan) and plan[0][1].startswith("named:"):
            plan[0] = (plan[0][0], "task")  # upstream: the first parameter receives the task
        return plan

    def _arguments(self, task: Any, resources: NamedResources, rollout: Rollout) -> dict[str, Any]:
        args: dict[str, Any] = {}
        for name, kind in self._plan:
            if kind == "task":
                args[name] = task
            elif kind == "rollout":
                args[name] = rollout
            elif kind == "resources":
                args[name] = {k: _strip(v, rollout, self.strip_proxy) for k, v in resources.items()}
            elif kind in _RESOURCE_CLASSES:
                found = resources.get(name)
                if not isinstance(found, _RESOURCE_CLASSES[kind]):
                    found = next((r for r in resources.values() if isinstance(r, _RESOURCE_CLASSES[kind])), None)
                if found is None:
                    if self._signature.parameters[name].default is not inspect.Parameter.empty:
                        continue
                    raise ValueError(f"{self.rollout_func.__name__} needs a {kind} resource but none was provided")
                args[name] = _strip(found, rollout, self.strip_proxy)
            else:  # named:<resource key>
                key = kind.split(":", 1)[1]
                if key in resources:
                    args[name] = _strip(resources[key], rollout, self.strip_proxy)
                elif self._signature.parameters[name].default is inspect.Parameter.empty:
                    raise ValueError(f"{self.rollout_func.__name__}: no resource named {key!r} (have {sorted(resources)})")
        return args

    def rollout(self, task: Any, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        if self._is_async:
            raise RuntimeError(f"{self.rollout_func.__name__} is async; use rollout_async")
        return self.rollout_func(**self._arguments(task, resources, rollout))

    async def rollout_async(self, task: Any, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        if not self._is_async:
            raise RuntimeError(f"{self.rollout_func.__name__} is not async; use rollout")
        return await self.rollout_func(**self._arguments(task, resources, rollout))


def _lookup(module: Any, qualname: str) -> Any:
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _agent_by_reference(module_name: str, qualname: str) -> "FunctionalLitAgent":
    agent = _lookup(importlib.import_module(module_name), qualname)
    if not isinstance(agent, FunctionalLitAgent):
        raise TypeError(f"{module_name}.{qualname} is a {type(agent).__name__}, not a @rollout agent")
    return agent


def _rebuild_agent(func: Callable[..., Any], strip_proxy: bool, trained_agents: Optional[str]) -> "FunctionalLitAgent":
    agent = FunctionalLitAgent(func, strip_proxy=strip_proxy)
    agent.trained_agents = trained_agents
    return agent


def rollout(func: Optional[Callable[..., Any]] = None, *, strip_proxy: bool = True) -> Any:
    """Decorator: ``@rollout`` or ``@rollout(strip_proxy=False)``."""
    if func is None:
        return lambda f: FunctionalLitAgent(f, strip_proxy=strip_proxy)
    return FunctionalLitAgent(func, strip_proxy=strip_proxy)


def llm_rollout(func: Optional[Callable[..., Any]] = None, *, strip_proxy: bool = True) -> Any:
    """``@rollout`` for functions of ``(task, llm[, rollout])``."""
    return rollout(func, strip_proxy=strip_proxy)


def prompt_rollout(func: Optional[Callable[..., Any]] = None) -> Any:
    """``@rollout`` for functions of ``(task, prompt_template[, rollout])``."""
    return rollout(func)
