"""``TraceToMessages``: spans -> OpenAI chat-completion samples (``{messages, tools}``), for SFT and APO.

Upstream's rules (``agentlightning.adapter.messages``, 0.3.0): every span that records a chat call
in the OpenTelemetry GenAI attributes (``gen_ai.prompt.*``, ``gen_ai.completion.*``,
``gen_ai.request.*``, ``gen_ai.response.*``) is one sample, in store order (the order spans ended).
Its messages are the prompt messages plus each assistant completion; an assistant completion
carries the tool calls recorded by the span's child spans (``tool.name``, ``tool.parameters``,
``tool.call.id``, ``tool.call.type``, as AgentOps records them); tools come from
``gen_ai.request.functions.*``. Plain dicts in the OpenAI shapes are returned, so the ``openai``
package is not needed.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, TypedDict

from agl_stream._porting import module_getattr
from agl_stream.adapter.attributes import group_indexed
from agl_stream.adapter.base import TraceAdapter
from agl_stream.adapter.rewards import store_order
from agl_stream.types import Span

_ROLES_WITH_CONTENT_ONLY = ("system", "developer", "user", "assistant")


class OpenAIMessages(TypedDict):
    messages: list[dict[str, Any]]
    tools: Optional[list[dict[str, Any]]]


def _prompt_message(fields: Mapping[str, Any]) -> dict[str, Any]:
    """One prompt message as the OpenAI message types keep it (other recorded keys are dropped)."""
    role = fields.get("role")
    if role == "assistant" and "tool_calls" in fields:
        calls = fields["tool_calls"] if isinstance(fields["tool_calls"], list) else []
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call.get("id"), "type": "function",
                 "function": {"name": call.get("name"), "arguments": call.get("arguments")}}
                for call in calls if isinstance(call, Mapping)
            ],
        }  # fmt: skip
    content = fields.get("content", "")
    if role in _ROLES_WITH_CONTENT_ONLY:
        return {"role": role, "content": content}
    if role == "tool":
        if not isinstance(fields.get("tool_call_id"), str):
            raise ValueError(f"tool message without a tool_call_id: {dict(fields)!r}")
        return {"role": "tool", "content": content, "tool_call_id": fields["tool_call_id"]}
    raise ValueError(f"prompt message with unsupported role {role!r}: {dict(fields)!r}")


def _tool_calls(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"id": (tool.get("call") or {}).get("id"), "type": (tool.get("call") or {}).get("type"),
         "function": {"name": tool.get("name"), "arguments": tool.get("parameters")}}
        for tool in tools
    ]  # fmt: skip


def _tool_definitions(request: Mapping[str, Any]) -> Optional[list[dict[str, Any]]]:
    if "functions" not in request:
        return None
    functions = request["functions"] if isinstance(request["functions"], list) else []
    definitions = []
    for fn in functions:
        parameters = fn.get("parameters", {})
        if isinstance(parameters, str):
            parameters = json.loads(parameters)
        definitions.append({"type": "function", "function": {"name": fn.get("name"),
                            "description": fn.get("description", ""), "parameters": parameters}})  # fmt: skip
    return definitions


def _grouped(attributes: Mapping[str, Any], prefix: str, kind: type, what: str) -> Any:
    value = group_indexed(attributes, prefix) or kind()
    if not isinstance(value, kind):
        raise ValueError(f"{prefix} attributes do not form a {what}: {value!r}")
    return value


class TraceToMessages(TraceAdapter[list[OpenAIMessages]]):
    """One ``{messages, tools}`` sample per span that records a chat call (see the module doc).

    ``llm_call_match`` names the LLM-call spans (consumers such as APO wait for them); samples are
    limited to spans whose name matches it only when ``match_names`` is true (upstream takes every
    span with chat attributes, e.g. the proxy's ``litellm_request`` spans too).
    """

    def __init__(self, llm_call_match: str = r"openai\.chat\.completion", match_names: bool = False) -> None:
        self.llm_call_match = llm_call_match
        self.match_names = match_names
        self._call_re = re.compile(llm_call_match)

    def adapt(self, source: Sequence[Span]) -> list[OpenAIMessages]:
        spans = store_order({span.span_id: span for span in source}.values())
        samples: list[OpenAIMessages] = []
        for span in spans:
            if self.match_names and not self._call_re.search(span.name):
                continue
            attrs = span.attributes
            prompt = _grouped(attrs, "gen_ai.prompt", list, "list")
            completion = _grouped(attrs, "gen_ai.completion", list, "list")
            request = _grouped(attrs, "gen_ai.request", dict, "dict")
            response = _grouped(attrs, "gen_ai.response", dict, "dict")
            if not (prompt or completion or request or response):
                continue
            tools = self._child_tool_calls(span, spans)
            messages = [_prompt_message(fields) for fields in prompt]
            for choice in completion:
                if choice.get("role") != "assistant":
                    continue
                message: dict[str, Any] = {"role": "assistant", "content": choice.get("content")}
                if tools:
                    message["tool_calls"] = _tool_calls(tools)
                messages.append(message)
            samples.append(OpenAIMessages(messages=messages, tools=_tool_definitions(request)))
        return samples

    @staticmethod
    def _child_tool_calls(completion: Span, spans: Sequence[Span]) -> list[dict[str, Any]]:
        """``tool.*`` attributes of the completion span's children (the tool calls it made)."""
        calls = []
        for child in spans:
            if child.parent_id == completion.span_id:
                call = group_indexed(child.attributes, "tool")
                if not isinstance(call, dict):
                    raise ValueError(f"tool call attributes of span {child.span_id} are not a dict: {call!r}")
                if call:
                    calls.append(call)
        return calls


#: upstream's name of the GenAI attribute grouping (``gen_ai.prompt.0.role`` -> ``[{"role": ...}]``)
group_genai_dict = group_indexed

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
