"""The data model: upstream names, formats and validation rules."""

from __future__ import annotations

import logging
import re

import pytest
from pydantic import ValidationError

from agl_stream import (
    LLM,
    Attempt,
    AttemptedRollout,
    PromptTemplate,
    ProxyLLM,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    Span,
    SpanCoreFields,
    semconv,
)
from agl_stream.ids import generate_attempt_id, generate_id, generate_rollout_id, generate_span_id, generate_trace_id
from agl_stream.types import ATTEMPT_STATUSES, ROLLOUT_STATUSES


def test_id_formats_match_upstream() -> None:
    assert re.fullmatch(r"ro-[0-9a-f]{12}", generate_rollout_id())
    assert re.fullmatch(r"at-[0-9a-f]{8}", generate_attempt_id())
    assert re.fullmatch(r"[0-9a-f]{16}", generate_span_id())
    assert [len(generate_id(n)) for n in (0, 1, 7, 64)] == [0, 1, 7, 64] and re.fullmatch(r"[0-9a-f]+", generate_id(9))
    assert re.fullmatch(r"[0-9a-f]{32}", generate_trace_id())
    assert len({generate_rollout_id() for _ in range(1000)}) == 1000


def test_statuses_are_upstreams() -> None:
    assert ROLLOUT_STATUSES == ("queuing", "preparing", "running", "requeuing", "succeeded", "failed", "cancelled")
    assert ATTEMPT_STATUSES == ("preparing", "running", "succeeded", "failed", "unresponsive", "timeout")
    assert Rollout(rollout_id="ro-1").status == "queuing"
    assert Attempt(rollout_id="ro-1", attempt_id="at-1").status == "preparing"
    with pytest.raises(ValidationError):
        Rollout(rollout_id="ro-1", status="pending")  # S1's hallucinated status is rejected
    with pytest.raises(ValidationError):
        Rollout(rollout_id="ro-1", mode="eval")


def test_rollout_config_validation() -> None:
    cfg = RolloutConfig(timeout_seconds=3, max_attempts=3, retry_condition=["timeout", "unresponsive"])
    assert cfg.max_attempts == 3
    with pytest.raises(ValidationError):
        RolloutConfig(max_attempts=0)
    with pytest.raises(ValidationError):
        RolloutConfig(retry_condition=["exploded"])


def test_attempted_rollout_requires_matching_attempt() -> None:
    AttemptedRollout(rollout_id="ro-a", attempt=Attempt(rollout_id="ro-a", attempt_id="at-1"))
    with pytest.raises(ValidationError, match="belongs to rollout ro-b"):
        AttemptedRollout(rollout_id="ro-a", attempt=Attempt(rollout_id="ro-b", attempt_id="at-1"))


def test_proxy_llm_base_url_and_strip() -> None:
    proxy = ProxyLLM(endpoint="http://127.0.0.1:4000/v1", model="m", sampling_parameters={"temperature": 0.7})
    assert proxy.get_base_url() == "http://127.0.0.1:4000/v1"
    assert proxy.get_base_url("ro-1", "at-2") == "http://127.0.0.1:4000/rollout/ro-1/attempt/at-2/v1"
    plain = proxy.with_attempt("ro-1", "at-2")
    assert type(plain) is LLM and plain.endpoint.endswith("/rollout/ro-1/attempt/at-2/v1")
    assert plain.sampling_parameters == {"temperature": 0.7}
    with pytest.raises(ValueError):
        proxy.get_base_url("ro-1", None)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_proxy_llm_warns_on_direct_endpoint_reads_as_upstream() -> None:
    proxy = ProxyLLM(endpoint="http://127.0.0.1:4000/v1/", model="m")
    logger, seen = logging.getLogger("agl_stream.types.resources"), _Records()
    logger.addHandler(seen)  # on the logger itself: other tests may stop agl_stream's loggers propagating
    try:
        proxy.get_base_url("ro-1", "at-2")
        proxy.with_attempt("ro-1", "at-2")
        ProxyLLM.model_validate(proxy.model_dump())
        assert proxy == proxy.model_copy() and "proxy_llm" in repr(proxy)
        assert seen.records == []  # pydantic and the proxy's own methods read the field quietly
        assert proxy.endpoint == "http://127.0.0.1:4000/v1/"
    finally:
        logger.removeHandler(seen)
    assert [r.levelno for r in seen.records] == [logging.WARNING]
    assert "get_base_url(rollout_id, attempt_id)" in seen.records[0].getMessage()
    for ids in (("ro-1", None), (None, "at-2"), ("ro-1", 2)):
        with pytest.raises(ValueError, match="^rollout_id and attempt_id must be strings or all be empty$"):
            proxy.get_base_url(*ids)  # type: ignore[arg-type]
    assert proxy.get_base_url("", "") == "http://127.0.0.1:4000/rollout//attempt//v1"  # strings, as upstream
    rollout = AttemptedRollout(rollout_id="ro-1", attempt=Attempt(rollout_id="ro-1", attempt_id="at-2"))
    llm = proxy.with_attempted_rollout(rollout)
    assert type(llm) is LLM and llm.endpoint == "http://127.0.0.1:4000/rollout/ro-1/attempt/at-2/v1"


def test_prompt_template_engines() -> None:
    assert PromptTemplate(template="Q: {q}").format(q="2+2") == "Q: 2+2"
    jinja = PromptTemplate(template="{% for x in xs %}{{ x }};{% endfor %}", engine="jinja")
    assert jinja.format(xs=[1, 2]) == "1;2;"
    with pytest.raises(Exception):
        PromptTemplate(template="{{ missing }}", engine="jinja").format()
    with pytest.raises(KeyError):
        PromptTemplate(template="{missing}").format()


def test_resources_update_discriminates_resource_types() -> None:
    update = ResourcesUpdate.model_validate(
        {
            "resources_id": "rs-1",
            "version": 3,
            "resources": {
                "main_llm": {"resource_type": "llm", "endpoint": "http://x/v1", "model": "m"},
                "proxy": {"resource_type": "proxy_llm", "endpoint": "http://p/v1", "model": "m"},
                "prompt": {"resource_type": "prompt_template", "template": "{q}"},
            },
        }
    )
    assert [type(r).__name__ for r in update.resources.values()] == ["LLM", "ProxyLLM", "PromptTemplate"]
    with pytest.raises(ValidationError):
        ResourcesUpdate(resources_id="rs-1", version=-1, resources={})


def test_span_from_core_fields() -> None:
    core = SpanCoreFields(name=semconv.AGL_ANNOTATION, attributes={"agentlightning.reward.0.value": 1.0})
    span = Span.from_core_fields(core, rollout_id="ro-1", attempt_id="at-1", sequence_id=4, parent_id="a" * 16)
    assert span.sequence_id == 4 and span.name == "agentlightning.annotation"
    assert span.context is not None and span.context.span_id == span.span_id
    assert span.parent is not None and span.parent.span_id == "a" * 16


def test_span_from_attributes_fills_upstreams_defaults() -> None:
    span = Span.from_attributes(attributes={"agentlightning.reward.0.value": 1.0})
    assert (span.rollout_id, span.attempt_id, span.sequence_id, span.name) == ("", "", 0, semconv.AGL_VIRTUAL)
    assert re.fullmatch(r"[0-9a-f]{32}", span.trace_id) and re.fullmatch(r"[0-9a-f]{16}", span.span_id)
    assert span.status.status_code == "OK" and span.parent is None and span.parent_id is None
    assert span.context is not None and (span.context.trace_id, span.context.span_id) == (span.trace_id, span.span_id)
    assert span.attributes == {"agentlightning.reward.0.value": 1.0} and span.resource.attributes == {}
    given = Span.from_attributes(
        attributes={}, rollout_id="ro-1", attempt_id="at-1", sequence_id=4, name="n", trace_id="t" * 32,
        span_id="s" * 16, parent_id="p" * 16, start_time=1.0, end_time=2.0,
    )  # fmt: skip
    assert (given.rollout_id, given.sequence_id, given.name, given.start_time, given.end_time) == ("ro-1", 4, "n", 1.0, 2.0)
    assert given.parent is not None and (given.parent.trace_id, given.parent.span_id) == ("t" * 32, "p" * 16)
    with pytest.raises(TypeError):
        Span.from_attributes({})  # type: ignore[misc]  # keyword-only, as upstream


def test_semconv_constants_are_upstreams() -> None:
    assert semconv.AGL_VIRTUAL == "agentlightning.virtual"
    assert semconv.LightningSpanAttributes.OPERATION_OUTPUT.value == "agentlightning.operation.output"
    assert semconv.LightningResourceAttributes.SPAN_SEQUENCE_ID.value == "agentlightning.span_sequence_id"
