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
* **LiteLLM SDK calls** that went to the server without the OpenAI client (``completion`` /
  ``acompletion`` spans of ``openinference-instrumentation-litellm`` on which
  :mod:`agl_stream.instrumentation.litellm_sdk` recorded the call as OpenAI-shaped JSON): mapped like
  an OpenAI call. A litellm call that went through the OpenAI client is its child ``ChatCompletion``
  span, and its own span is left as it is (one LLM call, one ``openai.chat.completion`` span).
* **Anthropic Messages calls** (``messages.create`` / ``messages.stream`` / ``messages.parse`` and their
  ``beta.`` forms, of ``openinference-instrumentation-anthropic``): the request and the message
  translated to the OpenAI layout (system prompt, tool results as ``tool`` turns, ``tool_use`` blocks as
  tool calls, ``stop_reason`` as ``finish_reason``), then mapped like an OpenAI call; token ids where
  the server sent them as extra fields of the message, vLLM's names (``prompt_token_ids``,
  ``token_ids``; see :mod:`agl_stream.instrumentation.anthropic`).
* **LangGraph nodes** (CHAIN spans of ``openinference-instrumentation-langchain`` named after their
  ``langgraph_node``) and **agents** (AGENT spans, e.g. of the OpenAI Agents SDK): ``agent.name``, the
  span's OpenInference ``graph.node.id`` where it has one (CrewAI's agent role, its span being named
  ``<role>.<task>._execute_core``; an AutoGen ``AssistantAgent``'s name), else its name (less AutoGen's
  ``.on_messages_stream``).

Pure functions of (name, attributes); spans without ``openinference.span.kind`` pass untouched.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

import agl_stream.semconv as semconv

KIND = "openinference.span.kind"
SOURCE_NAME = "agl.source_span_name"
AGENT_NAME = "agent.name"
#: OpenInference's graph node: the agent an AGENT span stands for, where its instrumentation sets it (CrewAI: the role)
GRAPH_NODE_ID = "graph.node.id"
#: AutoGen's AGENT spans are ``<agent>.on_messages_stream`` (agent names are identifiers)
AUTOGEN_TURN_SUFFIX = ".on_messages_stream"
#: OpenInference span names of OpenAI client calls whose output is a chat completion
OPENAI_CHAT_SPANS = frozenset({"ChatCompletion"})
#: a litellm SDK call as agl-stream's wrapper recorded it (OpenAI-shaped JSON), when no OpenAI client span did
LITELLM_REQUEST = "agl.litellm.request"
LITELLM_RESPONSE = "agl.litellm.response"
#: OpenInference span names of Anthropic Messages API calls
ANTHROPIC_MESSAGES_SPANS = frozenset({"messages.create", "messages.stream", "messages.parse", "beta.messages.create",
                                      "beta.messages.stream", "beta.messages.parse"})  # fmt: skip


def normalize(name: str, attributes: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, attributes)`` in agl-stream's conventions (the same objects when nothing applies)."""
    kind = attributes.get(KIND)
    if kind is None:
        return name, attributes
    if kind == "LLM":
        mapped = _llm_call(name, attributes)
        if mapped is not None:
            return semconv.LLM_CALL_SPAN_NAME, {**attributes, **mapped, SOURCE_NAME: name}
    elif kind == "CHAIN" and AGENT_NAME not in attributes and _langgraph_node(attributes) == name:
        return name, {**attributes, AGENT_NAME: name}
    elif kind == "AGENT" and AGENT_NAME not in attributes:
        return name, {**attributes, AGENT_NAME: _agent_name(name, attributes)}
    return name, attributes


def _agent_name(name: str, attributes: Mapping[str, Any]) -> str:
    """The agent an AGENT span stands for: OpenInference's ``graph.node.id`` where it set one (CrewAI's role, an
    AutoGen ``AssistantAgent``'s name), else the span name, less AutoGen's ``.on_messages_stream`` turn suffix."""
    node = attributes.get(GRAPH_NODE_ID)
    if isinstance(node, str) and node:
        return node
    return name.removesuffix(AUTOGEN_TURN_SUFFIX)


def _llm_call(name: str, attributes: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """Upstream's LLM-call attributes for an OpenInference LLM span that stands for one LLM call, else None."""
    if name in OPENAI_CHAT_SPANS:
        return _openai_chat(attributes)
    if LITELLM_RESPONSE in attributes:
        return _litellm_call(attributes)
    if name in ANTHROPIC_MESSAGES_SPANS and attributes.get("llm.system") == "anthropic":
        return _anthropic_messages(name, attributes)
    return None


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
        if content is not None:  # a turn that only calls tools has none; upstream's spans leave it out too
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


def _litellm_call(attributes: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    response = json_or_none(attributes.get(LITELLM_RESPONSE))
    if not isinstance(response, dict) or not isinstance(response.get("choices"), list):
        return None
    request = json_or_none(attributes.get(LITELLM_REQUEST))
    out: dict[str, Any] = {semconv.GEN_AI_SYSTEM: str(attributes.get("llm.provider") or "litellm"),
                           semconv.GEN_AI_REQUEST_TYPE: "chat"}  # fmt: skip
    if isinstance(request, dict):
        out.update(_request(request))
    out.update(_response(response))
    return out


#: Anthropic stop reasons as OpenAI finish reasons (the layout upstream's spans and adapters read)
_FINISH_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def _anthropic_messages(name: str, attributes: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """A Messages API call in the chat layout: the request (``input.value``) and the message (``output.value``)
    translated to their OpenAI counterparts, then mapped like an OpenAI call."""
    message = json_or_none(attributes.get("output.value"))
    if not isinstance(message, dict) or message.get("type") != "message":
        return None  # an error, or a call whose message was not recorded
    request = json_or_none(attributes.get("input.value"))
    out: dict[str, Any] = {semconv.GEN_AI_SYSTEM: "anthropic", semconv.GEN_AI_REQUEST_TYPE: "chat"}
    if isinstance(request, dict):
        out.update(_request(_anthropic_request(request, streamed=name.endswith(".stream"))))
    out.update(_response(_anthropic_response(message)))
    return out


def _anthropic_request(request: Mapping[str, Any], streamed: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if request.get("system"):
        messages.append({"role": "system", "content": _anthropic_text(request["system"])})
    for turn in request.get("messages") or []:
        if isinstance(turn, dict):
            messages.extend(_anthropic_turn(turn))
    doc: dict[str, Any] = {k: request[k] for k in ("model", "max_tokens", "temperature", "top_p") if k in request}
    doc.update(messages=messages, stream=streamed or bool(request.get("stream")))
    tools = [{"type": "function", "function": {"name": str(t.get("name", "")),
                                               "description": str(t.get("description", "")),
                                               "parameters": t.get("input_schema") or {}}}
             for t in request.get("tools") or [] if isinstance(t, dict)]  # fmt: skip
    if tools:
        doc["tools"] = tools
    return doc


def _anthropic_turn(turn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One Messages turn as OpenAI turns: its tool results first (a ``tool`` turn each), then the rest."""
    role, content = str(turn.get("role", "")), turn.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": content if isinstance(content, str) else ""}]
    blocks = [b for b in content if isinstance(b, dict)]
    turns: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")), "content": _anthropic_text(b.get("content"))}
        for b in blocks if b.get("type") == "tool_result"
    ]  # fmt: skip
    calls = [_anthropic_tool_call(b) for b in blocks if b.get("type") == "tool_use"]
    rest = [b for b in blocks if b.get("type") not in ("tool_result", "tool_use")]
    if rest or calls or not turns:
        out: dict[str, Any] = {"role": role, "content": _anthropic_content(rest)}
        if calls:
            out["tool_calls"] = calls
        turns.append(out)
    return turns


def _anthropic_content(blocks: list[dict[str, Any]]) -> Any:
    """One text block as text; several blocks (or images) as OpenAI content parts."""
    if len(blocks) == 1 and blocks[0].get("type") == "text":
        return str(blocks[0].get("text", ""))
    parts: list[Any] = []
    for block in blocks:
        source = block.get("source") if isinstance(block.get("source"), dict) else {}
        if block.get("type") == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif block.get("type") == "image" and source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        elif block.get("type") == "image" and source.get("type") == "url":
            parts.append({"type": "image_url", "image_url": {"url": str(source.get("url", ""))}})
        else:
            parts.append(block)  # documents, thinking, ...: kept as the API has them
    return parts if parts else ""


def _anthropic_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(str(b.get("text", "")) for b in value if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _anthropic_tool_call(block: Mapping[str, Any]) -> dict[str, Any]:
    function = {"name": str(block.get("name", "")), "arguments": json.dumps(block.get("input") or {})}
    return {"id": str(block.get("id", "")), "type": "function", "function": function}


def _anthropic_response(message: Mapping[str, Any]) -> dict[str, Any]:
    blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    reply: dict[str, Any] = {"role": "assistant", "content": text}
    calls = [_anthropic_tool_call(b) for b in blocks if b.get("type") == "tool_use"]
    if calls:
        reply["tool_calls"] = calls
    stop = message.get("stop_reason")
    choice: dict[str, Any] = {"index": 0, "message": reply, "finish_reason": _FINISH_REASONS.get(str(stop), stop)}
    if "token_ids" in message:
        choice["token_ids"] = message["token_ids"]
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    prompt = sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_creation_input_tokens",
                                                  "cache_read_input_tokens"))  # fmt: skip
    completion = int(usage.get("output_tokens") or 0)
    doc: dict[str, Any] = {"id": message.get("id"), "model": message.get("model"), "choices": [choice],
                           "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion}}  # fmt: skip
    for key in ("prompt_token_ids", "policy_version"):
        if key in message:
            doc[key] = message[key]
    return doc
