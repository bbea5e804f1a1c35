"""Load the agent a runner executes from a ``module:object`` path."""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from agl_stream.litagent import FunctionalLitAgent, LitAgent


def load_agent(path: str) -> LitAgent[Any]:
    """``pkg.module:name`` (or ``file.py:name``) -> a LitAgent instance.

    ``name`` may be a LitAgent instance, a LitAgent subclass (instantiated without arguments), a
    function (wrapped like ``@rollout``) or a zero-argument factory returning one of those.
    """
    return as_agent(load_object(path), path)


def load_object(path: str) -> Any:
    """The object ``pkg.module:name`` (or ``file.py:name``) names, the current directory importable."""
    module_name, sep, attr = path.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--agent must look like 'module:object', got {path!r}")
    if module_name.endswith(".py"):
        file = Path(module_name).resolve()
        sys.path.insert(0, str(file.parent))
        module_name = file.stem
    elif "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None


def as_agent(obj: Any, path: str) -> LitAgent[Any]:
    """A LitAgent from what ``path`` named: an agent, a LitAgent subclass, a function or a factory."""
    if isinstance(obj, LitAgent):
        return obj
    if inspect.isclass(obj) and issubclass(obj, LitAgent):
        return obj()
    if inspect.isfunction(obj) or inspect.iscoroutinefunction(obj):
        params = inspect.signature(obj).parameters
        if not params:  # a factory
            return as_agent(obj(), path)
        return FunctionalLitAgent(obj)
    raise TypeError(f"{path} is a {type(obj).__name__}; expected a LitAgent, a LitAgent subclass or a function")
