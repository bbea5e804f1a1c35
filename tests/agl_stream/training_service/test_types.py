"""``Task`` and ``Resource`` as ``agent_func`` sees them, and ``ServiceAgent``'s call of it."""

from __future__ import annotations

import asyncio

import pytest

from agl_stream.training_service import Resource, Task
from agl_stream.training_service.agent import ServiceAgent
from agl_stream.types import LLM, Rollout


def test_task_reads_every_field_by_attribute_and_item() -> None:
    task = Task({"question": "2+2?", "ground_truth": "4", "level": 3})
    assert (task.question, task["ground_truth"], task.level, dict(task)) == ("2+2?", "4", 3, task.to_dict())
    assert Task({"question": "q"}).ground_truth is None  # optional in the format
    with pytest.raises(AttributeError, match="no field 'missing'"):
        _ = task.missing
    with pytest.raises(AttributeError, match="read-only"):
        task.question = "changed"


def _resources() -> dict:
    return {"main_llm": LLM(endpoint="http://engine/v1", model="policy", policy_version=3, sampling_parameters={"temperature": 1.0})}


def test_service_agent_passes_the_served_policy_and_returns_the_reward() -> None:
    seen = []

    def agent_func(resource: Resource, task: Task) -> float:
        seen.append((resource, task))
        return 1

    reward = ServiceAgent(agent_func).rollout({"question": "q"}, _resources(), Rollout(rollout_id="ro-1", input={}, mode="val"))
    resource, task = seen[0]
    assert reward == 1.0 and isinstance(reward, float) and task.question == "q"
    assert (resource.model_api, resource.model_name, resource.task_id) == ("http://engine/v1", "policy", "ro-1")
    assert resource.metadata["policy_version"] == 3 and resource.metadata["mode"] == "val"


def test_an_async_agent_func_is_awaited() -> None:
    async def agent_func(resource: Resource, task: Task) -> float:
        return 0.5

    agent = ServiceAgent(agent_func)
    assert agent.is_async()
    rollout = Rollout(rollout_id="ro-2", input={})
    assert asyncio.run(agent.rollout_async({"question": "q"}, _resources(), rollout)) == 0.5


def test_no_llm_resource_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="no LLM resource"):
        ServiceAgent(lambda r, t: 1.0).rollout({"question": "q"}, {}, Rollout(rollout_id="ro-3", input={}))
    with pytest.raises(TypeError, match="callable"):
        ServiceAgent("not a function")  # type: ignore[arg-type]
