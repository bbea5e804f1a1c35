"""AIR rules: plain functions that turn what a tool call did into an intermediate reward.

A rule is registered for one event (``success``, ``failure`` or ``code_execution``), optionally for
some tools only, and is called with a :class:`ToolCall` (a :class:`CodeExecution` for code-running
tools) after the call. It returns a number (the reward) or None (no reward). This module is pure
logic (no tracing, no Kafka): what a rule returned or raised comes back as :class:`RuleOutcome`
values, and :mod:`agl_stream.air.tool` records them, so a rule that raises never reaches the agent.
"""

from __future__ import annotations

import inspect
import math
import numbers
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping, Optional, Sequence, Union

ToolEvent = Literal["success", "failure", "code_execution"]
EVENTS: tuple[ToolEvent, ...] = ("success", "failure", "code_execution")


@dataclass(frozen=True)
class ToolCall:
    """One finished tool call, as rules see it."""

    tool_name: str
    #: the call's arguments by parameter name (positional ones included)
    args: Mapping[str, Any]
    result: Any = None
    #: what the tool raised (None if it returned); it re-raises in the agent after the rules ran
    error: Optional[BaseException] = None
    #: wall-clock seconds the tool ran
    duration: float = 0.0
    #: when the call started (epoch seconds): the anchor that ties its rewards to the requesting LLM call
    started_at: float = 0.0
    #: the tool span's id, when the call was traced
    span_id: Optional[str] = None

    @property
    def succeeded(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class CodeExecution(ToolCall):
    """A call of a tool marked ``code_execution=True``: the code it ran, beside what :class:`ToolCall` has."""

    code: str = ""

    @property
    def stdout(self) -> Optional[str]:
        """The output text: a ``str`` result, else a ``stdout`` key or attribute of the result."""
        result = self.result
        if isinstance(result, str):
            return result
        value = result.get("stdout") if isinstance(result, Mapping) else getattr(result, "stdout", None)
        return value if isinstance(value, str) else None


RuleFunction = Callable[[Any], Optional[float]]


@dataclass(frozen=True)
class Rule:
    """A registered rule: ``fn`` for ``event`` on the tools named in ``tools`` (None: every tool)."""

    event: ToolEvent
    fn: RuleFunction
    tools: Optional[frozenset[str]] = None
    name: str = ""

    def matches(self, event: ToolEvent, tool_name: str) -> bool:
        return event == self.event and (self.tools is None or tool_name in self.tools)


@dataclass(frozen=True)
class RuleOutcome:
    """What one rule gave for one call: a reward (None: no reward) or the error it raised (or
    :class:`RuleError` for a return value that is not a reward)."""

    rule: Rule
    event: ToolEvent
    reward: Optional[float] = None
    error: Optional[BaseException] = None


class RuleError(TypeError):
    """A rule returned something that is not a finite number or None."""


@dataclass
class RuleRegistry:
    """The rules of a process, in registration order (thread-safe: agents run in threads)."""

    _rules: list[Rule] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: Union[Rule, RuleFunction]) -> int:
        """Unregister a rule, or every rule of a function; returns how many were removed."""
        with self._lock:
            kept = [r for r in self._rules if r is not rule and r.fn is not rule]
            removed = len(self._rules) - len(kept)
            self._rules = kept
        return removed

    def clear(self) -> None:
        with self._lock:
            self._rules = []

    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def matching(self, event: ToolEvent, tool_name: str) -> list[Rule]:
        with self._lock:
            return [rule for rule in self._rules if rule.matches(event, tool_name)]

    def evaluate(self, call: ToolCall, events: Sequence[ToolEvent]) -> list[RuleOutcome]:
        """Call every matching rule, event by event in the order given; never raises for a rule."""
        return [_run(rule, event, call) for event in events for rule in self.matching(event, call.tool_name)]


#: the process's rules (what ``air.on_tool_success`` & co. register)
REGISTRY = RuleRegistry()


def events_for(call: ToolCall, code_execution: bool) -> list[ToolEvent]:
    """The events one call fires: success or failure, then code_execution for code-running tools."""
    events: list[ToolEvent] = ["success" if call.succeeded else "failure"]
    if code_execution:
        events.append("code_execution")
    return events


def _run(rule: Rule, event: ToolEvent, call: ToolCall) -> RuleOutcome:
    try:
        return RuleOutcome(rule, event, reward=_as_reward(rule, rule.fn(call)))
    except Exception as exc:  # a rule must never break the agent: the caller records the error
        return RuleOutcome(rule, event, error=exc)


def _as_reward(rule: Rule, value: Any) -> Optional[float]:
    if value is None:
        return None
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()  # never awaited: close it so Python does not warn
        raise RuleError(f"rule {rule.name!r} returned an awaitable; rules are plain functions that return a number")
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, numbers.Real):
        raise RuleError(f"rule {rule.name!r} returned {type(value).__name__}, not a number or None")
    reward = float(value)
    if not math.isfinite(reward):
        raise RuleError(f"rule {rule.name!r} returned {reward}, not a finite number")
    return reward


def _tool_filter(tool: Any) -> Optional[frozenset[str]]:
    if tool is None:
        return None
    names = frozenset([tool] if isinstance(tool, str) else tool)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"tool= takes a tool name or a collection of names, not {tool!r}")
    return names


ToolFilter = Union[str, Iterable[str], None]


def register(
    event: ToolEvent,
    fn: Union[RuleFunction, str, Iterable[str], None] = None,
    *,
    tool: ToolFilter = None,
    name: Optional[str] = None,
    registry: Optional[RuleRegistry] = None,
) -> Any:
    """Register ``fn`` for ``event``: ``fn`` itself when given (returned unchanged), else a decorator.
    A string (or list of strings) in place of ``fn`` is the tool filter: ``@on_tool_failure("search")``."""
    if event not in EVENTS:
        raise ValueError(f"unknown tool event {event!r}; use one of {EVENTS}")
    target = registry if registry is not None else REGISTRY
    if fn is not None and not callable(fn):
        if tool is not None:
            raise TypeError("give the tool filter once: positionally or as tool=")
        fn, tool = None, fn
    tools = _tool_filter(tool)

    def add(function: RuleFunction) -> RuleFunction:
        if not callable(function):
            raise TypeError(f"a rule is a function, not {type(function).__name__}")
        target.add(Rule(event, function, tools, name or getattr(function, "__qualname__", repr(function))))
        return function

    return add(fn) if fn is not None else add  # type: ignore[arg-type]


def on_tool_success(fn: Any = None, *, tool: ToolFilter = None, name: Optional[str] = None,
                    registry: Optional[RuleRegistry] = None) -> Any:  # fmt: skip
    """Register ``fn(call: ToolCall) -> float | None`` for tool calls that returned.

    As ``@on_tool_success``, ``@on_tool_success("search")`` / ``@on_tool_success(tool=["a", "b"])``
    (those tools only) or ``on_tool_success(fn)``; ``fn`` is returned unchanged."""
    return register("success", fn, tool=tool, name=name, registry=registry)


def on_tool_failure(fn: Any = None, *, tool: ToolFilter = None, name: Optional[str] = None,
                    registry: Optional[RuleRegistry] = None) -> Any:  # fmt: skip
    """Register ``fn(call: ToolCall) -> float | None`` for tool calls that raised (``call.error``); the
    exception still reaches the agent after the rules ran. Same forms as :func:`on_tool_success`."""
    return register("failure", fn, tool=tool, name=name, registry=registry)


def on_code_execution(fn: Any = None, *, tool: ToolFilter = None, name: Optional[str] = None,
                      registry: Optional[RuleRegistry] = None) -> Any:  # fmt: skip
    """Register ``fn(run: CodeExecution) -> float | None`` for every run of a ``code_execution=True``
    tool, successful or not (``run.code``, ``run.stdout`` / ``run.result``, ``run.error``); such a
    tool fires its success or failure rules too. Same forms as :func:`on_tool_success`."""
    return register("code_execution", fn, tool=tool, name=name, registry=registry)


def registered_rules() -> list[Rule]:
    """The process's rules, in registration order."""
    return REGISTRY.rules()


def remove_rule(rule: Union[Rule, RuleFunction]) -> int:
    """Unregister a rule (or every rule of a function) from the process's rules; returns how many."""
    return REGISTRY.remove(rule)


def clear_rules() -> None:
    """Forget every rule of the process (tests, notebooks)."""
    REGISTRY.clear()
