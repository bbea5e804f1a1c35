"""Proxy building blocks without servers: config loading, request shaping, capture, span shape, SSE."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from fastapi import HTTPException

from agl_stream.config import Settings, SettingsError
from agl_stream_ingest.proxy import sse
from agl_stream_ingest.proxy.backend import shape_request
from agl_stream_ingest.proxy.capture import StreamAccumulator, from_response, policy_version
from agl_stream_ingest.proxy.config import CONFIG_ENV, ProxyConfig
from agl_stream_ingest.proxy.record import LlmCall, build_llm_span
from agl_stream_ingest.security import decode_content_encoding
from agl_stream_ingest.sequence import SequenceAllocator

VLLM = {"model_name": "qwen", "litellm_params": {"model": "hosted_vllm/qwen", "api_base": "http://gpu:8000/v1"}}
OPENAI = {"model_name": "gpt", "litellm_params": {"model": "openai/gpt-4o-mini", "api_key": "sk-x"}}


# ---------------------------------------------------------------- config


def test_config_from_yaml_json_backends_and_env(tmp_path: Path) -> None:
    yaml_file = tmp_path / "proxy.yaml"
    yaml_file.write_text("model_list:\n  - model_name: qwen\n    litellm_params:\n      model: hosted_vllm/qwen\n"
                         "      api_base: http://gpu:8000/v1\nlitellm_settings:\n  num_retries: 2\n")
    from_yaml = ProxyConfig.from_file(yaml_file, logprobs=1)
    json_file = tmp_path / "proxy.json"
    json_file.write_text(json.dumps({"model_list": [VLLM], "logprobs": 1}))
    assert from_yaml == ProxyConfig.from_file(json_file)
    assert ProxyConfig.from_settings(Settings.from_env(env=from_yaml.to_env())) == from_yaml  # what a worker rebuilds
    backends = ProxyConfig.from_backends(["tiny=http://127.0.0.1:9000/v1/"], api_key="k")
    assert backends.model_list[0].litellm_params == {"model": "openai/tiny", "api_base": "http://127.0.0.1:9000/v1",
                                                     "api_key": "k"}


@pytest.mark.parametrize(
    "doc, reason",
    [
        ({"model_list": []}, "model_list"),
        ({"model_list": [{"model_name": "x", "litellm_params": {"model": "no-provider"}}]}, "provider/model"),
        ({"model_list": [VLLM], "logprobs": 99}, "logprobs"),
    ],
)
def test_bad_configs_are_refused_with_reasons(doc: dict, reason: str) -> None:
    with pytest.raises(SettingsError, match=reason):
        ProxyConfig.from_mapping(doc)


def test_missing_or_broken_env_config_names_the_variable() -> None:
    with pytest.raises(SettingsError, match=CONFIG_ENV):
        ProxyConfig.from_settings(Settings.from_env(env={}))
    with pytest.raises(SettingsError, match=CONFIG_ENV):
        ProxyConfig.from_settings(Settings.from_env(env={CONFIG_ENV: "{not json"}))
    with pytest.raises(SettingsError, match="NAME=http"):
        ProxyConfig.from_backends(["just-a-name"])


# ---------------------------------------------------------------- request shaping


def test_token_ids_are_requested_only_from_vllm_style_backends() -> None:
    config = ProxyConfig.from_mapping({"model_list": [VLLM, OPENAI]})
    body = {"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2, "top_k": 5,
            "api_base": "http://attacker/v1", "api_key": "sk-client", "extra_headers": {"x": "y"}}
    vllm = shape_request(body, "chat", config.model_list[0], config, stream=False, timeout=5).kwargs
    assert vllm["extra_body"] == {"top_k": 5, "return_token_ids": True}
    assert vllm["temperature"] == 0.2 and "top_k" not in vllm and "logprobs" not in vllm
    assert not {"api_base", "api_key", "extra_headers"} & set(vllm)  # a client cannot redirect the backend
    hosted = shape_request({**body, "model": "gpt"}, "chat", config.model_list[1], config, stream=False, timeout=5).kwargs
    assert hosted["extra_body"] == {"top_k": 5}  # api.openai.com would refuse return_token_ids


def test_configured_logprobs_and_client_choices() -> None:
    config = ProxyConfig.from_mapping({"model_list": [VLLM], "logprobs": 2})
    model = config.model_list[0]
    chat = shape_request({"model": "qwen", "messages": []}, "chat", model, config, stream=True, timeout=5)
    assert (chat.kwargs["logprobs"], chat.kwargs["top_logprobs"]) == (True, 2) and not chat.client_asked_logprobs
    assert chat.kwargs["stream_options"] == {"include_usage": True}
    text = shape_request({"model": "qwen", "prompt": "x", "logprobs": 5}, "completion", model, config, stream=False,
                         timeout=5)
    assert text.kwargs["logprobs"] == 5 and text.client_asked_logprobs
    off = ProxyConfig.from_mapping({"model_list": [VLLM], "return_token_ids": False})
    assert "extra_body" not in shape_request({"model": "qwen", "prompt": "x"}, "completion", off.model_list[0], off,
                                             stream=False, timeout=5).kwargs


def test_a_model_ceiling_lowers_what_a_call_may_generate() -> None:
    capped = {**VLLM, "model_info": {"max_tokens": 64}}
    config = ProxyConfig.from_mapping({"model_list": [capped]})
    model = config.model_list[0]

    def asked(body: dict) -> dict:
        return shape_request({"model": "qwen", "messages": [], **body}, "chat", model, config, stream=False, timeout=5).kwargs

    assert asked({"max_tokens": 1024})["max_tokens"] == 64  # an unchanged agent asking for more than the engine can
    assert asked({"max_tokens": 16})["max_tokens"] == 16
    assert asked({"max_completion_tokens": 500})["max_completion_tokens"] == 64
    assert asked({})["max_tokens"] == 64
    uncapped = ProxyConfig.from_mapping({"model_list": [VLLM]})
    assert "max_tokens" not in shape_request({"model": "qwen", "messages": []}, "chat", uncapped.model_list[0], uncapped,
                                             stream=False, timeout=5).kwargs  # fmt: skip
    assert ProxyConfig.from_backends(["m=http://h:1/v1"], max_tokens=32).model_list[0].max_tokens == 32
    with pytest.raises(ValueError, match="positive integer"):
        ProxyConfig.from_mapping({"model_list": [{**VLLM, "model_info": {"max_tokens": 0}}]})


# ---------------------------------------------------------------- capture


def test_stream_accumulator_rebuilds_text_tool_calls_token_ids_and_usage() -> None:
    acc = StreamAccumulator()
    acc.add({"id": "c1", "model": "m", "prompt_token_ids": [1, 2], "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": "Hi"}, "token_ids": [10],
         "logprobs": {"content": [{"token": "Hi", "logprob": -0.5}]}}]})
    acc.add({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "look", "arguments": '{"q":'}}]},
        "token_ids": [11, 12]}]})
    acc.add({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]},
                          "provider_specific_fields": {"token_ids": [13]}, "finish_reason": "tool_calls"}],
             "policy_version": 4})
    acc.add({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}})
    result = acc.result({})
    [choice] = result.choices
    assert (choice.content, choice.token_ids, choice.logprobs) == ("Hi", [10, 11, 12, 13], [-0.5])
    assert choice.tool_calls == [{"id": "call_1", "type": "function", "function": {"name": "look", "arguments": '{"q":"x"}'}}]
    assert (result.prompt_token_ids, result.policy_version, result.usage["total_tokens"]) == ([1, 2], 4, 6)
    assert choice.finish_reason == "tool_calls" and result.response_id == "c1"


def test_policy_version_sources_and_bad_values() -> None:
    assert policy_version({"policy_version": 5}, {"x-agl-policy-version": "9"}) == 5
    assert policy_version({}, {"llm_provider-x-agl-policy-version": "9"}) == 9
    assert policy_version({}, {"X-Policy-Version": "2"}) == 2
    assert policy_version({"policy_version": "latest"}, {}) is None
    assert policy_version({}, {}) is None


def test_text_completion_response_with_missing_logprob() -> None:
    doc = {"id": "t", "choices": [{"index": 0, "text": "ab", "token_ids": [1, 2], "finish_reason": "length",
                                   "logprobs": {"token_logprobs": [None, -1.0]}}], "prompt_token_ids": [7]}
    [choice] = from_response(doc, "completion", {}).choices
    assert (choice.content, choice.logprobs, choice.role) == ("ab", [None, -1.0], "assistant")


# ---------------------------------------------------------------- span shape


def test_span_of_a_failed_text_completion() -> None:
    span = build_llm_span(LlmCall(
        rollout_id="ro-1", attempt_id="at-1", sequence_id=3, kind="completion",
        request={"model": "qwen", "prompt": ["a", "b"], "stop": ["\n"], "api_key": "sk-never"},
        provider="hosted_vllm", streaming=False, start_time=10.0, end_time=10.25, error="backend error (Timeout)",
    ))
    assert span.name == "openai.chat.completion" and span.status.status_code == "ERROR"
    assert span.attributes["gen_ai.prompt.0.content"] == '["a", "b"]'
    assert span.attributes["gen_ai.request.stop"] == '["\\n"]'
    assert span.attributes["agl.llm.latency_ms"] == 250.0 and "prompt_token_ids" not in span.attributes
    assert "sk-never" not in json.dumps(span.model_dump())
    assert span.resource.attributes["agentlightning.span_sequence_id"] == 3


# ---------------------------------------------------------------- SSE, security, sequence


def test_usage_only_chunks_and_converted_streams() -> None:
    assert sse.is_usage_only({"usage": {"total_tokens": 3}, "choices": [{"index": 0, "delta": {}}]})
    assert not sse.is_usage_only({"usage": {"total_tokens": 3}, "choices": [{"delta": {"content": "x"}}]})
    assert not sse.is_usage_only({"choices": []})
    events = list(sse.completion_stream({"id": "c", "choices": [{"index": 0, "text": "hi"}], "usage": {"total_tokens": 1}},
                                        include_usage=True))
    assert events[-1] == sse.DONE and len(events) == 3
    assert json.loads(events[0][len(b"data: "):])["choices"][0]["text"] == "hi"


def test_gzip_inflation_is_capped() -> None:
    assert decode_content_encoding(gzip.compress(b"a" * 100), "gzip", 100) == b"a" * 100
    with pytest.raises(HTTPException) as info:
        decode_content_encoding(gzip.compress(b"a" * 101), "gzip", 100)
    assert info.value.status_code == 413
    with pytest.raises(HTTPException) as info:
        decode_content_encoding(gzip.compress(b"a" * 50)[:-10], "gzip", 100)
    assert info.value.status_code == 400


def test_sequence_allocator_is_monotonic_per_rollout_and_bounded() -> None:
    allocator = SequenceAllocator(max_rollouts=2)
    assert [allocator.next("r", "a") for _ in range(3)] == [1, 2, 3]  # upstream's store starts at 1
    allocator.observe("r", "a", 2)  # a lower supplied id never moves the counter back
    assert allocator.next("r", "a") == 4
    assert allocator.next("r", "retry") == 5  # as upstream's store: one counter per rollout, shared by its attempts
    allocator.next("s", "a")
    allocator.next("t", "a")  # evicts rollout "r", the least recently used
    assert allocator.next("r", "a") == 1
