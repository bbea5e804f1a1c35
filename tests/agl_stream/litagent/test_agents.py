"""``@rollout`` injection, ``LitAgent`` dispatch and the agent loader."""

from __future__ import annotations

import pytest

from agl_stream.litagent import FunctionalLitAgent, LitAgent, rollout
from agl_stream.runner.loader import load_agent
from agl_stream.types import LLM, Attempt, AttemptedRollout, PromptTemplate, ProxyLLM, Rollout

RESOURCES = {
    "main_llm": ProxyLLM(endpoint="http://proxy:4000/v1", model="m"),
    "prompt": PromptTemplate(template="Q: {q}"),
}
RUN = AttemptedRollout(rollout_id="ro-000000000001", input={"q": "hi"},
                       attempt=Attempt(rollout_id="ro-000000000001", attempt_id="at-00000001"))  # fmt: skip


def test_injection_by_name_strips_proxy_to_attempt_llm() -> None:
    seen = {}

    @rollout
    def agent(task, llm, prompt_template, rollout):  # type: ignore[no-untyped-def]
        seen.update(task=task, llm=llm, prompt=prompt_template, rollout=rollout)
        return 1.0

    assert isinstance(agent, FunctionalLitAgent) and not agent.is_async()
    assert agent.rollout(RUN.input, RESOURCES, RUN) == 1.0
    assert seen["task"] == {"q": "hi"} and seen["rollout"] is RUN
    assert type(seen["llm"]) is LLM
    assert seen["llm"].endpoint == "http://proxy:4000/rollout/ro-000000000001/attempt/at-00000001/v1"
    assert seen["prompt"].format(q="x") == "Q: x"


def test_injection_by_type_by_resource_key_and_strip_disabled() -> None:
    @rollout(strip_proxy=False)
    async def agent(question: dict, model: LLM, run: Rollout, main_llm, resources):  # type: ignore[no-untyped-def]
        return [question, model, run, main_llm, resources]

    assert agent.is_async()
    with pytest.raises(RuntimeError):
        agent.rollout(RUN.input, RESOURCES, RUN)
    import asyncio

    question, model, run, main_llm, resources = asyncio.run(agent.rollout_async(RUN.input, RESOURCES, RUN))
    assert question == {"q": "hi"} and run is RUN
    assert isinstance(model, ProxyLLM) and main_llm is RESOURCES["main_llm"] and set(resources) == set(RESOURCES)


def test_missing_resource_is_a_clear_error() -> None:
    @rollout
    def agent(task, llm):  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(ValueError, match="needs a llm resource"):
        agent.rollout("t", {}, RUN)


def test_decorated_function_stays_callable() -> None:
    @rollout
    def agent(task, llm=None):  # type: ignore[no-untyped-def]
        return task * 2

    assert agent(3) == 6


class _Sync(LitAgent[str]):
    def training_rollout(self, task, resources, rollout):  # type: ignore[no-untyped-def]
        return "train"

    def validation_rollout(self, task, resources, rollout):  # type: ignore[no-untyped-def]
        return "val"


class _Async(LitAgent[str]):
    async def rollout_async(self, task, resources, rollout):  # type: ignore[no-untyped-def]
        return 0.5


def test_litagent_async_detection_and_defaults() -> None:
    assert not _Sync().is_async() and _Async().is_async()
    with pytest.raises(NotImplementedError):
        LitAgent().rollout(None, {}, RUN)
    with pytest.raises(RuntimeError, match="not attached"):
        _ = _Sync().tracer


def test_load_agent_accepts_instances_classes_and_functions() -> None:
    assert isinstance(load_agent(f"{__name__}:_Sync"), _Sync)
    assert isinstance(load_agent("tests.agl_stream.runner.agents:reward_agent"), LitAgent)
    with pytest.raises(ValueError, match="module:object"):
        load_agent("no_colon")
    with pytest.raises(ValueError, match="no attribute"):
        load_agent(f"{__name__}:missing")
