"""Map spans of the maintained instrumentations onto agl-stream's (= upstream's) span conventions at capture.

The OpenInference instrumentations record what happened in their own conventions; the pipeline
(adapters, ``TraceToMessages``, saved queries, dashboards) reads upstream's: an LLM call is an
``openai.chat.completion`` span with ``gen_ai.*`` attributes and ``prompt_token_ids`` /
``response_token_ids``, an agent span carries ``agent.name``. :func:`normalize` adds those, keeping
every original attribute (and the original span name under ``agl.source_span_name``):

* **OpenAI client calls** (``ChatCompletion`` spans of ``openinference-instrumentation-openai``,
  streamed or not): request fields from ``input.value``, response fields, token ids, logprobs and the
  serving policy version from ``output.value`` (the response as the server sent it; for streams,
  the chunks accumulated, so token ids arrive concatenated).
* **LangGraph nodes** (CHAIN spans of ``openinference-instrumentation-langchain`` named after their
  ``langgraph_node``) and **agents** (AGENT spans, e.g. of the OpenAI Agents SDK): ``agent.name``.

Pure functions of (name, attributes); spans without ``openinference.span.kind`` pass untouched.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

import agl_stream.semconv as semconv

KIND = "openinference.span.kind"
SOURCE_NAME = "agl.source_span_name"
AGENT_NAME = "agent.name"
#: OpenInference span names of OpenAI client calls whose output is a chat completion
OPENAI_CHAT_SPANS = frozenset({"ChatCompletion"})


def normalize(name: str, attributes: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, attributes)`` in agl-stream's conventions (the same objects when nothing applies)."""
    kind = attributes.get(KIND)
    if kind is None:
        return name, attributes
    if kind == "LLM" and name in OPENAI_CHAT_SPANS:
        mapped = _openai_chat(attributes)
        if mapped is not None:
            return semconv.LLM_CALL_SPAN_NAME, {**attributes, **mapped, SOURCE_NAME: name}
    elif kind == "CHAIN" and AGENT_NAME not in attributes and _langgraph_node(attributes) == name:
        return name, {**attributes, AGENT_NAME: name}
    elif kind == "AGENT" and AGENT_NAME not in attributes:
        return name, {**attributes, AGENT_NAME: name}
    return name, attributes


def json_or_none(value: Any) -> Optional[Any]:
    """The JSON a string attribute holds, or None (not a string, not JSON): span attributes are untrusted."""
    if not isinstance(value, str):
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None


def _langgraph_node(attributes: Mapping[str, Any]) -> Optional[str]:
    metadata = json_or_none(attributes.get("metadata"))
    node = metadata.get("langgraph_node") if isinstance(metadata, dict) else None
    return node if isinstance(node, str) else None


def _openai_chat(attributes: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    response = json_or_none(attributes.get("output.value"))
    if not isinstance(response, dict) or not isinstance(response.get("choices"), list):
        return None  # not a chat completion (an error, an unparsable body): leave the span as it is
    request = json_or_none(attributes.get("input.value"))
    out: dict[str, Any] = {semconv.GEN_AI_SYSTEM: str(attributes.get("llm.system") or "openai"),
                           semconv.GEN_AI_REQUEST_TYPE: "chat"}  # fmt: skip
    if isinstance(request, dict):
        out.update(_request(request))
    out.update(_response(response))
    return out


def _request(request: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        semconv.GEN_AI_REQUEST_MODEL: str(request.get("model", "")),
        "gen_ai.request.streaming": bool(request.get("stream", False)),
    }
    for key in ("max_tokens", "temperature", "top_p"):
        if request.get(key) is not None:
            attrs[f"gen_ai.request.{key}"] = request[key]
    for i, message in enumerate(request.get("messages") or []):
        if not isinstance(message, dict):
            continue
        attrs[f"gen_ai.prompt.{i}.role"] = str(message.get("role", ""))
        content = message.get("content")
        attrs[f"gen_ai.prompt.{i}.content"] = content if isinstance(content, str) else json.dumps(content)
        if isinstance(message.get("tool_call_id"), str):  # a tool result answers this call
            attrs[f"gen_ai.prompt.{i}.tool_call_id"] = message["tool_call_id"]
        for j, call in enumerate(c for c in message.get("tool_calls") or [] if isinstance(c, dict)):  # an assistant's calls
            function = call.get("function") if isinstance(call.get("function"), dict) else {}
            attrs[f"gen_ai.prompt.{i}.tool_calls.{j}.id"] = str(call.get("id", ""))
            attrs[f"gen_ai.prompt.{i}.tool_calls.{j}.name"] = str(function.get("name", ""))
            attrs[f"gen_ai.prompt.{i}.tool_calls.{j}.arguments"] = str(function.get("arguments", ""))
    if request.get("tools"):
        attrs["gen_ai.request.tools"] = json.dumps(request["tools"])
        # upstream's layout of the tool definitions, which TraceToMessages reads
        for k, tool in enumerate(request["tools"]):
            function = (tool.get("function") or {}) if isinstance(tool, dict) else {}
            attrs[f"gen_ai.request.functions.{k}.name"] = str(function.get("name", ""))
            attrs[f"gen_ai.request.functions.{k}.description"] = str(function.get("description", ""))
            attrs[f"gen_ai.request.functions.{k}.parameters"] = json.dumps(function.get("parameters", {}))
    return attrs


def _ints(value: Any) -> Optional[list[int]]:
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    return None


def _response(response: Mapping[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        semconv.GEN_AI_RESPONSE_ID: str(response.get("id") or ""),
        semconv.GEN_AI_RESPONSE_MODEL: str(response.get("model") or ""),
    }
    usage = response.get("usage")
    if isinstance(usage, dict):
        attrs[semconv.GEN_AI_USAGE_PROMPT_TOKENS] = int(usage.get("prompt_tokens") or 0)
        attrs[semconv.GEN_AI_USAGE_COMPLETION_TOKENS] = int(usage.get("completion_tokens") or 0)
        attrs["gen_ai.usage.total_tokens"] = int(usage.get("total_tokens") or 0)
    if (prompt_ids := _ints(response.get("prompt_token_ids"))) is not None:
        attrs[semconv.PROMPT_TOKEN_IDS] = prompt_ids
    version = response.get("policy_version")
    if isinstance(version, int) and not isinstance(version, bool):
        attrs[semconv.POLICY_VERSION] = version
    choices = sorted((c for c in response["choices"] if isinstance(c, dict)), key=lambda c: c.get("index", 0))
    if not choices:
        return attrs
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    attrs["gen_ai.completion.0.role"] = str(message.get("role") or "assistant")
    attrs["gen_ai.completion.0.content"] = str(message.get("content") or "")
    attrs["gen_ai.completion.0.finish_reason"] = str(choice.get("finish_reason") or "")
    if message.get("tool_calls"):
        attrs["gen_ai.completion.0.tool_calls"] = json.dumps(message["tool_calls"])
    provider = choice.get("provider_specific_fields")
    token_ids = _ints(choice.get("token_ids"))
    if token_ids is None and isinstance(provider, dict):
        token_ids = _ints(provider.get("token_ids"))
    if token_ids:
        attrs[semconv.RESPONSE_TOKEN_IDS] = token_ids
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(content, list) and content and all(isinstance(c, dict) and "logprob" in c for c in content):
        attrs[semconv.RESPONSE_LOGPROBS] = [float(c["logprob"]) for c in content]
    return attrs
