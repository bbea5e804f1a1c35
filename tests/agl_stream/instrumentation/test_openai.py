"""The OpenAI instrumentation turns a vLLM-style completion into an LLM-call span with token ids."""

from __future__ import annotations

from openai.types.chat import ChatCompletion
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agl_stream import semconv
from agl_stream.instrumentation.openai import _prepare, _request_attributes, _response_attributes

VLLM_STYLE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "smollm2",
    "prompt_token_ids": [1, 2, 3],
    "policy_version": 7,
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "42"},
            "token_ids": [19, 2],
            "logprobs": {"content": [{"token": "42", "logprob": -0.25, "bytes": None, "top_logprobs": []},
                                     {"token": "<|im_end|>", "logprob": -0.5, "bytes": None, "top_logprobs": []}]},
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}  # fmt: skip


def test_response_attributes_capture_token_ids_logprobs_and_version() -> None:
    attrs = _response_attributes(ChatCompletion.model_validate(VLLM_STYLE))
    assert attrs[semconv.PROMPT_TOKEN_IDS] == [1, 2, 3]
    assert attrs[semconv.RESPONSE_TOKEN_IDS] == [19, 2]
    assert attrs[semconv.RESPONSE_LOGPROBS] == [-0.25, -0.5]
    assert attrs[semconv.POLICY_VERSION] == 7
    assert attrs["gen_ai.completion.0.content"] == "42" and attrs[semconv.GEN_AI_USAGE_COMPLETION_TOKENS] == 2


def test_litellm_style_provider_specific_token_ids() -> None:
    doc = {**VLLM_STYLE, "choices": [{**VLLM_STYLE["choices"][0], "token_ids": None,  # type: ignore[dict-item]
                                      "provider_specific_fields": {"token_ids": [5, 6]}}]}  # fmt: skip
    assert _response_attributes(ChatCompletion.model_validate(doc))[semconv.RESPONSE_TOKEN_IDS] == [5, 6]


def test_request_side_asks_for_token_ids_and_records_prompt() -> None:
    kwargs = _prepare({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, True)
    assert kwargs["extra_body"] == {"return_token_ids": True} and kwargs["logprobs"] is True
    assert _prepare({"model": "m", "messages": [], "stream": True}, True).get("extra_body") is None
    attrs = _request_attributes(kwargs)
    assert attrs["gen_ai.prompt.0.content"] == "hi" and attrs["gen_ai.request.max_tokens"] == 4


def test_spans_reach_any_tracer_provider() -> None:
    from opentelemetry import trace

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(semconv.LLM_CALL_SPAN_NAME, kind=trace.SpanKind.CLIENT) as span:
        span.set_attributes(_response_attributes(ChatCompletion.model_validate(VLLM_STYLE)))
    (finished,) = exporter.get_finished_spans()
    assert list(finished.attributes[semconv.PROMPT_TOKEN_IDS]) == [1, 2, 3]  # type: ignore[index]


def test_the_client_is_instrumented_when_the_agent_imports_it_not_before() -> None:
    """Installing the agl tracer does not import openai (about a second of CPU per runner process);
    the agent importing it later gets the patched client."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from agl_stream.tracer.otel import _instrument_llm_clients\n"
        "_instrument_llm_clients()\n"
        "print('imported_early' if 'openai' in sys.modules else 'not_imported')\n"
        "from openai.resources.chat.completions import Completions\n"
        "print('patched' if hasattr(Completions.create, '__wrapped__') else 'unpatched')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["not_imported", "patched"], out.stdout + out.stderr
