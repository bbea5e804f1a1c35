"""OpenAI tool calling for the embedded engine, in the hermes format vLLM serves.

vLLM with ``--enable-auto-tool-choice --tool-call-parser hermes`` renders ``tools`` through the
chat template and reads the model's calls back from ``<tool_call>{"name": ..., "arguments":
{...}}</tool_call>`` blocks. This module is that contract for the CPU engine, kept free of
tokenizers and HTTP so it is unit-testable: :func:`plan_chat` checks a request and turns its
messages into what the chat template renders; :func:`parse_tool_calls` turns generated text back
into OpenAI ``tool_calls``.

Templates that render ``tools`` themselves (Qwen2.5, Hermes, ...) get the tools and the history in
Hugging Face's message format (assistant ``tool_calls`` with ``arguments`` as an object, ``tool``
messages with ``tool_call_id`` and ``name``). Templates that ignore ``tools`` (SmolLM2's: it only
concatenates ``role`` and ``content``) get plain messages in which everything is text, so the model
sees one format turn after turn:

- the tools, as a block appended (after a blank line) to the first system message, or as a new
  leading system message when there is none::

    # Tools

    You can call the functions described by the JSON schemas inside <tools></tools>:
    <tools>
    {"type": "function", "function": {"name": ..., "description": ..., "parameters": {...}}}
    </tools>

    To call a function, reply with its name and arguments as a JSON object inside <tool_call></tool_call> tags:
    <tool_call>
    {"name": "<function name>", "arguments": {"<argument>": <value>}}
    </tool_call>
    <one line for tool_choice>
    <one line for parallel_tool_calls>

- an assistant turn with ``tool_calls`` as its content (if any), a newline, then one block per
  call, ``<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>``, joined by newlines;
- a run of consecutive ``tool`` messages as one ``user`` turn (a role every template accepts) of
  ``<tool_response>\\n{"name": "f", "content": ...}\\n</tool_response>`` blocks joined by
  newlines, ``content`` being the result decoded from JSON when it is JSON, else the string.

JSON is written with ``json.dumps(..., ensure_ascii=False)`` in the order the client gave, so the
same request always renders the same prompt.

``tool_choice`` ``"required"`` and a named function cannot be enforced by guided decoding here;
the assistant turn is pre-filled instead (:attr:`ChatPlan.prefill`, appended to the prompt ids)
with ``<tool_call>\\n{"name": "`` or ``<tool_call>\\n{"name": "f", "arguments": ``, and the parser
reads the pre-fill plus the generated text. A model can still break the JSON; then, as for any
malformed block, the text is returned as content.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, Sequence

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.DOTALL)

ChoiceMode = Literal["auto", "none", "required", "named"]


class ToolRequestError(ValueError):
    """A request the engine refuses (answered with HTTP 400)."""


@dataclass(frozen=True)
class ToolChoice:
    mode: ChoiceMode
    name: Optional[str] = None  # the function, when mode is "named"


@dataclass
class ChatPlan:
    """What to render and how to read the answer back."""

    #: messages for ``apply_chat_template``
    messages: list[dict[str, Any]]
    #: ``tools=`` for a template that renders them, else None
    template_tools: Optional[list[dict[str, Any]]] = None
    #: text appended after the generation prompt (forces a call for "required" / a named function)
    prefill: str = ""
    #: function names whose calls are parsed from the output; empty: the output is plain content
    parse_names: frozenset[str] = frozenset()
    #: parallel_tool_calls=false: only the first valid block becomes a call
    first_call_only: bool = False


@dataclass
class ParsedOutput:
    content: Optional[str]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------- request side


def flatten_content(content: Any) -> str:
    """The text of a message's content (a string or a list of parts; only text parts count)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    raise ToolRequestError(f"message content must be a string, a list of parts or null, not {type(content).__name__}")


def check_tools(tools: Optional[Sequence[Any]]) -> list[dict[str, Any]]:
    """The function tools as ``{"type": "function", "function": {name, description?, parameters?}}``."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools or ()):
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function":
            kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
            raise ToolRequestError(f"tools[{i}]: only function tools are supported, not {kind!r}")
        fn = tool.get("function")
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ToolRequestError(f"tools[{i}]: a function tool needs function.name")
        name = fn["name"]
        if name in seen:
            raise ToolRequestError(f"tools[{i}]: the function name {name!r} is given twice")
        seen.add(name)
        parameters = fn.get("parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ToolRequestError(f"tools[{i}]: function.parameters must be a JSON schema object")
        function: dict[str, Any] = {"name": name}
        if fn.get("description") is not None:
            function["description"] = str(fn["description"])
        if parameters is not None:
            function["parameters"] = dict(parameters)
        out.append({"type": "function", "function": function})
    return out


def check_tool_choice(choice: Any, names: Sequence[str]) -> ToolChoice:
    """OpenAI's ``tool_choice``; left out it is "auto" with tools and "none" without, as in OpenAI's API."""
    if choice is None or choice == "auto":
        return ToolChoice("auto") if names else ToolChoice("none")
    if choice == "none":
        return ToolChoice("none")
    if choice == "required":
        if not names:
            raise ToolRequestError("tool_choice 'required' needs tools")
        return ToolChoice("required")
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or name not in names:
            raise ToolRequestError(f"tool_choice names the function {name!r}, which is not among the tools")
        return ToolChoice("named", name)
    raise ToolRequestError(f"unsupported tool_choice {choice!r}: use 'auto', 'none', 'required' or "
                           "{'type': 'function', 'function': {'name': ...}}")


def _arguments_object(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolRequestError(f"{where}: arguments are not valid JSON ({exc.msg})") from None
        if isinstance(value, dict):
            return value
    raise ToolRequestError(f"{where}: arguments must be a JSON object")


@dataclass
class _Call:
    id: str
    name: str
    arguments: dict[str, Any]


def _history_calls(raw: Any, where: str) -> list[_Call]:
    if not isinstance(raw, list):
        raise ToolRequestError(f"{where}.tool_calls must be a list")
    calls = []
    for j, call in enumerate(raw):
        here = f"{where}.tool_calls[{j}]"
        if not isinstance(call, Mapping) or call.get("type", "function") != "function":
            raise ToolRequestError(f"{here}: only function calls are supported")
        fn = call.get("function")
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ToolRequestError(f"{here}: needs function.name")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise ToolRequestError(f"{here}: needs an id")
        calls.append(_Call(call["id"], fn["name"], _arguments_object(fn.get("arguments"), here)))
    return calls


def _call_text(name: str, arguments: Mapping[str, Any]) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _response_text(name: str, content: str) -> str:
    try:
        value: Any = json.loads(content)
    except json.JSONDecodeError:
        value = content  # a plain-text result is rendered as a JSON string
    body = json.dumps({"name": name, "content": value}, ensure_ascii=False)
    return f"<tool_response>\n{body}\n</tool_response>"


def tools_system_block(tools: Sequence[Mapping[str, Any]], choice: ToolChoice, parallel: bool) -> str:
    """The system text that offers ``tools`` to a model whose template ignores them."""
    schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    rule = {
        "auto": "Call a function only when it helps; otherwise answer in plain text.",
        "none": "Do not call any function in this reply; answer in plain text.",
        "required": "You must call at least one function in this reply.",
        "named": f'You must call the function "{choice.name}" in this reply.',
    }[choice.mode]
    per_reply = "Call at most one function per reply." if not parallel else \
        "To call several functions, write one <tool_call></tool_call> block for each."
    return (
        "# Tools\n\n"
        "You can call the functions described by the JSON schemas inside <tools></tools>:\n"
        f"<tools>\n{schemas}\n</tools>\n\n"
        "To call a function, reply with its name and arguments as a JSON object inside <tool_call></tool_call> tags:\n"
        f'{TOOL_CALL_OPEN}\n{{"name": "<function name>", "arguments": {{"<argument>": <value>}}}}\n{TOOL_CALL_CLOSE}\n'
        f"{rule}\n{per_reply}"
    )


def plan_chat(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Optional[Sequence[Any]] = None,
    tool_choice: Any = None,
    parallel_tool_calls: Optional[bool] = None,
    template_renders_tools: bool,
) -> ChatPlan:
    """Check a chat request's tool fields and history and say what to render.

    ``messages`` are OpenAI chat messages as dicts. Without tools and tool history the result is
    exactly ``[{"role", "content"}]`` per message, what the engine rendered before tools existed.
    """
    offered = check_tools(tools)
    names = [t["function"]["name"] for t in offered]
    choice = check_tool_choice(tool_choice, names)
    parallel = parallel_tool_calls is not False

    rendered: list[dict[str, Any]] = []
    calls_by_id: dict[str, _Call] = {}
    pending_results: list[str] = []  # text form: tool results waiting to become one user turn

    def flush_results() -> None:
        if pending_results:
            rendered.append({"role": "user", "content": "\n".join(pending_results)})
            pending_results.clear()

    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role")
        if role == "function":
            raise ToolRequestError(f"{where}: role 'function' (the legacy functions API) is not supported; use tools")
        content = flatten_content(m.get("content"))
        if role == "tool":
            call_id = m.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise ToolRequestError(f"{where}: a tool message needs tool_call_id")
            call = calls_by_id.get(call_id)
            if call is None:
                raise ToolRequestError(f"{where}: tool_call_id {call_id!r} answers no earlier assistant tool call")
            if template_renders_tools:
                rendered.append({"role": "tool", "content": content, "tool_call_id": call_id, "name": call.name})
            else:
                pending_results.append(_response_text(call.name, content))
            continue
        flush_results()
        if role == "assistant" and m.get("tool_calls"):
            calls = _history_calls(m["tool_calls"], where)
            calls_by_id.update((c.id, c) for c in calls)
            if template_renders_tools:
                rendered.append({"role": "assistant", "content": content, "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in calls]})
            else:
                blocks = "\n".join(_call_text(c.name, c.arguments) for c in calls)
                rendered.append({"role": "assistant", "content": f"{content}\n{blocks}" if content else blocks})
            continue
        rendered.append({"role": role, "content": content})
    flush_results()

    plan = ChatPlan(messages=rendered, first_call_only=not parallel)
    if not offered:
        return plan
    if template_renders_tools:
        plan.template_tools = offered
    else:
        block = tools_system_block(offered, choice, parallel)
        if rendered and rendered[0]["role"] == "system":
            first = rendered[0]
            rendered[0] = {**first, "content": f"{first['content']}\n\n{block}" if first["content"] else block}
        else:
            rendered.insert(0, {"role": "system", "content": block})
    if choice.mode != "none":
        plan.parse_names = frozenset(names)
    if choice.mode == "required":
        plan.prefill = TOOL_CALL_OPEN + '\n{"name": "'
    elif choice.mode == "named":
        opening = json.dumps({"name": choice.name}, ensure_ascii=False)[:-1]  # '{"name": "f"'
        plan.prefill = f'{TOOL_CALL_OPEN}\n{opening}, "arguments": '
    return plan


# ---------------------------------------------------------------- response side


def _call_from_block(body: str, names: frozenset[str]) -> Optional[tuple[str, dict[str, Any]]]:
    """(name, arguments) of a well-formed block for an offered function, else None."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return value["name"], arguments


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex}"


def parse_tool_calls(text: str, names: frozenset[str], *, first_only: bool = False) -> ParsedOutput:
    """Split generated text into content and OpenAI ``tool_calls``.

    Each ``<tool_call>...</tool_call>`` block (the last may lack its closing tag, as when the model
    stops right after the JSON) whose JSON names an offered function and has object ``arguments``
    (or none, or a JSON string of an object) becomes a call. Any other block - malformed JSON, an
    unknown function - stays in the content as written, as vLLM's hermes parser leaves it. With
    calls, content is the remaining text stripped, or None when nothing is left; without calls it
    is ``text`` unchanged.
    """
    calls: list[dict[str, Any]] = []
    pieces: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        found = None if (first_only and calls) else _call_from_block(match.group(1).strip(), names)
        if found is None:
            continue
        name, arguments = found
        pieces.append(text[pos:match.start()])
        pos = match.end()
        calls.append({"id": new_call_id(), "type": "function",
                      "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}})
    if not calls:
        return ParsedOutput(content=text)
    pieces.append(text[pos:])
    content = "".join(pieces).strip()
    return ParsedOutput(content=content or None, tool_calls=calls)
