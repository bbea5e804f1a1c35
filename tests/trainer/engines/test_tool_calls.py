"""Hermes tool calling, pure: request checks, the text prompt for templates without tools, parsing."""

from __future__ import annotations

import json

import pytest

from agl_stream_trainer.engines.tool_calls import (
    ToolChoice,
    ToolRequestError,
    check_tool_choice,
    parse_tool_calls,
    plan_chat,
    tools_system_block,
)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLOCK = {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
NAMES = frozenset({"get_weather", "now"})

HISTORY = [
    {"role": "user", "content": "Weather in Paris and the time?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "now", "arguments": "{}"}},
    ]},
    {"role": "tool", "tool_call_id": "call_a", "content": '{"temp_c": 21}'},
    {"role": "tool", "tool_call_id": "call_b", "content": "12:00"},
]


def test_without_tools_messages_render_as_before() -> None:
    parts = [{"type": "text", "text": "hi"}]
    plan = plan_chat([{"role": "system", "content": "Be terse."}, {"role": "user", "content": parts}],
                     template_renders_tools=False)
    assert plan.messages == [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}]
    assert plan.template_tools is None and plan.prefill == "" and not plan.parse_names


def test_text_prompt_for_a_template_without_tools() -> None:
    plan = plan_chat([{"role": "system", "content": "Be terse."}, *HISTORY], tools=[WEATHER, CLOCK],
                     template_renders_tools=False)
    system, user, assistant, results = plan.messages
    assert system["role"] == "system"
    assert system["content"] == "Be terse.\n\n" + tools_system_block([WEATHER, CLOCK], ToolChoice("auto"), True)
    assert json.dumps(WEATHER) in system["content"] and "<tools>\n" in system["content"]
    assert user == HISTORY[0]
    assert assistant == {"role": "assistant", "content":
                         '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                         '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'}
    # consecutive tool results: one user turn; JSON results embedded as JSON, text as a string
    assert results == {"role": "user", "content":
                       '<tool_response>\n{"name": "get_weather", "content": {"temp_c": 21}}\n</tool_response>\n'
                       '<tool_response>\n{"name": "now", "content": "12:00"}\n</tool_response>'}
    assert plan.template_tools is None and plan.parse_names == NAMES and plan.prefill == ""


def test_the_tool_block_becomes_the_system_message_when_there_is_none() -> None:
    plan = plan_chat([{"role": "user", "content": "hi"}], tools=[WEATHER], tool_choice="none",
                     parallel_tool_calls=False, template_renders_tools=False)
    assert plan.messages[0]["role"] == "system" and plan.messages[1] == {"role": "user", "content": "hi"}
    assert plan.messages[0]["content"].endswith("answer in plain text.\nCall at most one function per reply.")
    assert not plan.parse_names  # tool_choice none: the output is never read as calls
    assert plan.first_call_only


def test_assistant_text_before_its_calls_is_kept() -> None:
    history = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Checking.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "now", "arguments": {}}}]}]
    plan = plan_chat(history, template_renders_tools=False)  # tool history renders without tools offered
    assert plan.messages[1]["content"] == 'Checking.\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'


def test_template_that_renders_tools_gets_hugging_face_messages() -> None:
    plan = plan_chat(HISTORY, tools=[WEATHER, CLOCK], template_renders_tools=True)
    assert plan.template_tools == [WEATHER, CLOCK]
    assert plan.messages[1] == {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
        {"id": "call_b", "type": "function", "function": {"name": "now", "arguments": {}}}]}
    assert plan.messages[2] == {"role": "tool", "content": '{"temp_c": 21}', "tool_call_id": "call_a",
                                "name": "get_weather"}
    assert plan.messages[0] == HISTORY[0]


def test_rendering_is_deterministic() -> None:
    first = plan_chat(HISTORY, tools=[WEATHER, CLOCK], template_renders_tools=False)
    again = plan_chat(HISTORY, tools=[WEATHER, CLOCK], template_renders_tools=False)
    assert first.messages == again.messages


def test_required_and_named_choices_prefill_the_call() -> None:
    required = plan_chat(HISTORY[:1], tools=[WEATHER], tool_choice="required", template_renders_tools=False)
    assert required.prefill == '<tool_call>\n{"name": "'
    assert "You must call at least one function" in required.messages[0]["content"]
    named = plan_chat(HISTORY[:1], tools=[WEATHER, CLOCK], template_renders_tools=True,
                      tool_choice={"type": "function", "function": {"name": "now"}})
    assert named.prefill == '<tool_call>\n{"name": "now", "arguments": '
    parsed = parse_tool_calls(named.prefill + "{}}\n</tool_call>", named.parse_names)
    assert [c["function"] for c in parsed.tool_calls] == [{"name": "now", "arguments": "{}"}]


@pytest.mark.parametrize("kwargs, message", [
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "only function tools"),
    ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "needs function.name"),
    ({"tools": [WEATHER, WEATHER]}, "given twice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not among the tools"),
    ({"tool_choice": "required"}, "needs tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "allowed_tools": {}}}, "unsupported tool_choice"),
])
def test_refused_requests(kwargs: dict, message: str) -> None:
    with pytest.raises(ToolRequestError, match=message):
        plan_chat(HISTORY[:1], template_renders_tools=False, **kwargs)


@pytest.mark.parametrize("history, message", [
    ([{"role": "tool", "tool_call_id": "call_zz", "content": "1"}], "answers no earlier assistant tool call"),
    ([{"role": "tool", "content": "1"}], "needs tool_call_id"),
    ([{"role": "function", "name": "f", "content": "1"}], "legacy functions"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                            "function": {"name": "f", "arguments": "{oops"}}]}], "not valid JSON"),
    ([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
     "needs an id"),
])
def test_refused_histories(history: list, message: str) -> None:
    with pytest.raises(ToolRequestError, match=message):
        plan_chat(history, template_renders_tools=False)


def test_choice_defaults() -> None:
    assert check_tool_choice(None, ["f"]) == ToolChoice("auto")
    assert check_tool_choice(None, []) == ToolChoice("none")
    assert check_tool_choice("auto", []) == ToolChoice("none")


# ---------------------------------------------------------------- parsing


def test_parse_calls_and_the_text_around_them() -> None:
    text = ('Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            '<tool_call>{"name": "now"}</tool_call>')
    parsed = parse_tool_calls(text, NAMES)
    assert parsed.content == "Let me look."
    assert [c["function"] for c in parsed.tool_calls] == [
        {"name": "get_weather", "arguments": '{"city": "Paris"}'}, {"name": "now", "arguments": "{}"}]
    ids = [c["id"] for c in parsed.tool_calls]
    assert all(i.startswith("call_") and int(i[5:], 16) >= 0 for i in ids) and len(set(ids)) == 2
    assert all(c["type"] == "function" for c in parsed.tool_calls)


def test_only_calls_give_null_content_and_an_unclosed_last_block_counts() -> None:
    parsed = parse_tool_calls('<tool_call>\n{"name": "now", "arguments": "{}"}\n', NAMES)
    assert parsed.content is None and parsed.tool_calls[0]["function"] == {"name": "now", "arguments": "{}"}


@pytest.mark.parametrize("block", [
    '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # malformed JSON
    '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>',  # not an offered tool
    '<tool_call>{"name": "now", "arguments": [1]}</tool_call>',  # arguments not an object
    '<tool_call>["now"]</tool_call>',
])
def test_bad_blocks_stay_content(block: str) -> None:
    text = f"Hmm. {block}"
    assert parse_tool_calls(text, NAMES).content == text and not parse_tool_calls(text, NAMES).tool_calls


def test_a_bad_block_beside_a_good_one_stays_in_the_content() -> None:
    bad = '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
    parsed = parse_tool_calls(f'{bad}\n<tool_call>{{"name": "now", "arguments": {{}}}}</tool_call>', NAMES)
    assert parsed.content == bad and len(parsed.tool_calls) == 1


def test_first_call_only() -> None:
    second = '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    parsed = parse_tool_calls(f'<tool_call>{{"name": "now", "arguments": {{}}}}</tool_call>{second}', NAMES,
                              first_only=True)
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["now"] and parsed.content == second


def test_plain_text_is_returned_unchanged() -> None:
    assert parse_tool_calls("  just words \n", NAMES).content == "  just words \n"
    assert parse_tool_calls("", NAMES).content == ""


def test_non_ascii_arguments_round_trip() -> None:
    parsed = parse_tool_calls('<tool_call>{"name": "get_weather", "arguments": {"city": "Zürich"}}</tool_call>', NAMES)
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"city": "Zürich"}
    assert "Zürich" in parsed.tool_calls[0]["function"]["arguments"]
