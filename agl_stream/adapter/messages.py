"""``TraceToMessages``: spans -> OpenAI chat-completion messages (+ tools), one sample per LLM call.

Used for SFT and prompt optimization (APO). Reads the OpenTelemetry GenAI attributes LLM-call spans
carry (``gen_ai.prompt.{i}.*``, ``gen_ai.completion.{i}.*``, tools in ``llm.request.functions.{i}.*``).
Plain dicts in the OpenAI shapes are returned, so the ``openai`` package is not needed.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Optional, Sequence, TypedDict

from agl_stream.adapter.base import TraceAdapter, span_order_key
from agl_stream.types import Span


class OpenAIMessages(TypedDict):
    messages: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]]


_INDEXED = re.compile(r"^(?P<prefix>gen_ai\.(?:prompt|completion)|llm\.request\.functions)\.(?P<i>\d+)\.(?P<rest>.+)$")


def _indexed(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """``prefix.{i}.field`` attributes -> list of dicts ordered by i (gaps skipped, not fatal)."""
    items: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        match = _INDEXED.match(key)
        if match and match.group("prefix") == prefix:
            items.setdefault(int(match.group("i")), {})[match.group("rest")] = value
    return [items[i] for i in sorted(items)]


def _tool_calls(fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls: dict[int, dict[str, Any]] = {}
    for key, value in fields.items():
        match = re.match(r"^tool_calls\.(\d+)\.(.+)$", key)
        if match:
            calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
    out = []
    for i in sorted(calls):
        call = calls[i]
        out.append(
            {
                "id": str(call.get("id", f"call_{i}")),
                "type": "function",
                "function": {"name": str(call.get("name", "")), "arguments": str(call.get("arguments", ""))},
            }
        )
    return out


def _message(fields: Mapping[str, Any], default_role: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": str(fields.get("role") or default_role), "content": fields.get("content")}
    calls = _tool_calls(fields)
    if calls:
        message["tool_calls"] = calls
    if message["role"] == "tool" and "tool_call_id" in fields:
        message["tool_call_id"] = str(fields["tool_call_id"])
    return message


def _tools(attributes: Mapping[str, Any]) -> Optional[list[dict[str, Any]]]:
    functions = _indexed(attributes, "llm.request.functions")
    if not functions:
        return None
    tools = []
    for fn in functions:
        parameters: Any = fn.get("parameters")
        if isinstance(parameters, str):
            try:
                parameters = json.loads(parameters)
            except ValueError:
                parameters = {"raw": parameters}
        function: dict[str, Any] = {"name": str(fn.get("name", ""))}
        if fn.get("description") is not None:
            function["description"] = str(fn["description"])
        if parameters is not None:
            function["parameters"] = parameters
        tools.append({"type": "function", "function": function})
    return tools


class TraceToMessages(TraceAdapter[list[OpenAIMessages]]):
    """One ``{messages, tools}`` sample per LLM-call span: the prompt messages plus the completion."""

    def __init__(self, llm_call_match: str = r"openai\.chat\.completion") -> None:
        self.llm_call_match = llm_call_match
        self._call_re = re.compile(llm_call_match)

    def adapt(self, source: Sequence[Span]) -> list[OpenAIMessages]:
        samples: list[OpenAIMessages] = []
        for span in sorted(source, key=span_order_key):
            if not self._call_re.search(span.name):
                continue
            attrs = span.attributes
            messages = [_message(fields, "user") for fields in _indexed(attrs, "gen_ai.prompt")]
            completions = _indexed(attrs, "gen_ai.completion")
            if completions:
                messages.append(_message(completions[0], "assistant"))
            if messages:
                samples.append(OpenAIMessages(messages=messages, tools=_tools(attrs)))
        return samples
