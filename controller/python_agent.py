"""``python -m agl_stream_controller.python_agent module:Class``: run an agent class as upstream v1.0's local runner does.

Upstream v1.0's local controller takes ``local.agent_class`` (``package.module.Class`` or ``module:Class``) and runs
it per rollout in a fresh Python process: import the module, build the class with no arguments, call ``run()``,
and await it when it returns an awaitable. The agent finds its task in ``env_map`` variables and its endpoints in
``AGL_OPENAI_BASE_URL`` / ``AGL_EVENT_URL`` / ``AGL_KEY``, which our controller sets too. So an upstream agent class
trains here unchanged: ``agl-stream controller --agent-class module:Class`` (or this module as the command).

Exit status: 0 when ``run()`` returned; 1 when it raised (the traceback goes to stderr, which the controller keeps
with the attempt); 2 when the class cannot be found or built.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
import traceback
from typing import Any, Optional, Sequence

USAGE = "usage: python -m agl_stream_controller.python_agent package.module.Class | module:Class"


class AgentClassError(Exception):
    """The named class cannot be imported or is not a class."""


def load_agent_class(path: str) -> type:
    """The class named ``module:Class`` or ``package.module.Class`` (upstream v1.0's two spellings)."""
    module_name, sep, class_name = path.partition(":") if ":" in path else path.rpartition(".")
    if not sep or not module_name or not class_name:
        raise AgentClassError(f"{path!r} names no class: write module:Class or package.module.Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentClassError(f"cannot import {module_name!r} (for {path!r}): {exc}") from exc
    loaded: Any = getattr(module, class_name, None)
    if not isinstance(loaded, type):
        raise AgentClassError(f"{path!r}: {module_name} has no class {class_name!r}")
    return loaded


def run_agent_class(path: str) -> int:
    """Build the class, run it to its end; the exit status as the module's docstring says."""
    try:
        agent = load_agent_class(path)()
    except AgentClassError as exc:
        print(f"agl-stream python_agent: {exc}", file=sys.stderr)
        return 2
    try:
        result = agent.run()
        if inspect.isawaitable(result):
            asyncio.run(_awaited(result))
    except Exception:  # the agent's own failure: the attempt fails with its traceback in the attempt's log
        traceback.print_exc()
        return 1
    return 0


async def _awaited(result: Any) -> None:
    await result


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if len(args) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    return run_agent_class(args[0])


if __name__ == "__main__":
    sys.exit(main())
