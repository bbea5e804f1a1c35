"""APO on the room-selector example, through the real pipeline (broker, processors, runner process).

The agent's LLM and the critique/edit model are scripted OpenAI-compatible servers, so the outcome
is deterministic: the agent LLM answers correctly only when the prompt tells it to pick the
smallest room that fits, otherwise it names the first room listed; the edit model adds exactly
that instruction. APO must find it, score it higher, and leave it as the latest resources.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest

from agl_stream.client.resources import ResourceCache
from agl_stream.config import Settings
from agl_stream.trainer import Trainer
from agl_stream.types import LLM, PromptTemplate
from examples.room_selector.agent import INITIAL_TEMPLATE
from examples.room_selector.rooms import best_room
from tests.trainer.algorithms.scripted_llm import ScriptedServer, last_user_message
from agl_stream_trainer.algorithms.apo import APO, TemplateRejected, extract_template, placeholders, validate_template

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "examples/room_selector/data"
INSTRUCTION = "Choose the smallest room that fits every requirement."
AGENT = "examples.room_selector.agent:room_selector"


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_env(env={}, data_dir=tmp_path / "agl", partitions=2, kafka_session_timeout_ms=6000)


# ---------------------------------------------------------------- scripted models


def agent_answer(body: dict[str, Any]) -> str:
    """Right room when told to take the smallest that fits; otherwise the first room id listed."""
    prompt = last_user_message(body)
    if "smallest room that fits" in prompt.lower():
        needs = re.search(r"Needs: (.*?)\. Step-free", prompt).group(1)  # type: ignore[union-attr]
        booked = re.search(r"Already booked: (.*?)\.\n", prompt).group(1)  # type: ignore[union-attr]
        task = {
            "attendees": int(re.search(r"for (\d+) people", prompt).group(1)),  # type: ignore[union-attr]
            "needs": [] if needs == "nothing special" else needs.split(", "),
            "accessible": re.search(r"Step-free access required: (yes|no)", prompt).group(1) == "yes",  # type: ignore[union-attr]
            "booked": [] if booked == "none" else booked.split(", "),
        }
        return f"Room {best_room(task)}"
    return f"Room {re.search(r'[A-D][0-9]{3}', prompt).group(0)}"  # type: ignore[union-attr]


class CritiqueEdit:
    """The critique model returns a fixed critique; the edit model returns the current template plus
    the instruction - except its first rewrite, which drops a placeholder (APO must reject it)."""

    CRITIQUE = "The agent always picked the first room in the table instead of the smallest free room that fits."

    def __init__(self) -> None:
        self.edits = 0

    def __call__(self, body: dict[str, Any]) -> str:
        text = last_user_message(body)
        current = re.search(r"<current_prompt>\n(.*?)\n</current_prompt>", text, re.DOTALL)
        if current is None:
            return self.CRITIQUE
        self.edits += 1
        template = current.group(1)
        if self.edits == 1:
            template = template.replace("{booked}", "the booked rooms")
        if INSTRUCTION not in template:
            template = template.replace("Answer with the room id.", INSTRUCTION + " Answer with the room id.")
        return f"Here is the new prompt:\n<prompt>\n{template}\n</prompt>"


class CheckedAPO(APO):
    """APO, then read the latest resources back from agl.resources with a fresh follower."""

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> dict[str, Any]:
        report = await super().run(train_dataset, val_dataset)
        cache = await ResourceCache(self.settings).start()
        try:
            latest = cache.latest()
            assert latest is not None
            report["latest_from_topic"] = latest.model_dump(mode="json")
        finally:
            await cache.stop()
        return report


# ---------------------------------------------------------------- unit checks


def test_template_validation() -> None:
    parent = PromptTemplate(template="Task {task} with {rooms}. Answer.")
    assert placeholders(parent) == {"task", "rooms"}
    validate_template(PromptTemplate(template="Think. Task {task}; rooms {rooms}; output {{json}}."), parent)
    for bad in ("Task {task}. Answer.", "Task {task} {rooms} {extra}", "Task {task} {rooms} {"):
        with pytest.raises(TemplateRejected):
            validate_template(PromptTemplate(template=bad), parent)
    assert extract_template("sure!\n<prompt>\nA {x}\n</prompt>\nbye") == "A {x}"
    assert extract_template("```text\nA {x}\n```") == "A {x}"
    assert extract_template("  A {x} ") == "A {x}"


def test_scripted_agent_is_deterministic() -> None:
    row = _rows("val")[0]
    from examples.room_selector.agent import render

    prompt = render(PromptTemplate(template=INITIAL_TEMPLATE), row)
    assert agent_answer({"messages": [{"role": "user", "content": prompt}]}) == "Room A101"
    told = render(PromptTemplate(template=INITIAL_TEMPLATE + "\n" + INSTRUCTION), row)
    assert agent_answer({"messages": [{"role": "user", "content": told}]}) == f"Room {row['answer']}"


# ---------------------------------------------------------------- the pipeline


@pytest.mark.integration
@pytest.mark.slow
def test_apo_improves_room_selector_prompt(tmp_path: Path) -> None:
    critic = CritiqueEdit()
    with ScriptedServer(agent_answer) as agent_llm, ScriptedServer(critic) as critic_llm:
        apo = CheckedAPO(model="openai/scripted-critic", api_base=critic_llm.base_url, api_key="unused",
                         gradient_batch_size=3, val_batch_size=10, beam_width=2, branch_factor=2, beam_rounds=1,
                         seed=1, rollout_timeout=120)  # fmt: skip
        resources = {
            "llm": LLM(endpoint=agent_llm.base_url, model="scripted-agent"),
            "prompt_template": PromptTemplate(template=INITIAL_TEMPLATE),
        }
        report = Trainer(apo, n_runners=1, runner_concurrency=8, initial_resources=resources,
                         settings=_settings(tmp_path)).fit(AGENT, _rows("train"), _rows("val"))  # fmt: skip

    assert report["prompt_key"] == "prompt_template"
    assert report["val_batch_size"] == 10
    # initial prompt: the agent names A101, right only when A101 is the answer
    assert report["initial_score"] < 0.6
    assert report["best_score"] == pytest.approx(1.0)
    assert report["best_score"] > report["initial_score"]
    assert INSTRUCTION in report["best_template"]
    assert report["best_round"] == 1
    # of the two rewrites, the one that dropped {booked} was rejected
    assert report["rejected"] == 1 and report["history"][1]["rejected"] == 1
    assert len(report["history"][1]["candidates"]) == 1
    assert report["history"][1]["candidates"][0]["critique"] == CritiqueEdit.CRITIQUE
    # the critique saw the agent's conversations, rebuilt from agl.spans by TraceToMessages
    critique_inputs = [last_user_message(r) for r in critic_llm.requests if "<current_prompt>" not in last_user_message(r)]
    assert len(critique_inputs) == 2
    assert all(text.count("## Episode") == 3 for text in critique_inputs)
    assert all("[assistant] Room A101" in text and "[user] Pick a meeting room." in text for text in critique_inputs)
    # every agent call came through the pipeline: 10 initial val + 2x3 gradient + 10 candidate val
    assert len(agent_llm.requests) == 26
    latest = report["latest_from_topic"]
    assert latest["resources_id"] == report["best_resources_id"]
    assert latest["resources"]["prompt_template"]["template"] == report["best_template"]
    assert latest["resources"]["llm"]["endpoint"] == agent_llm.base_url


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(
    not (os.environ.get("AGL_TEST_APO_MODEL") and os.environ.get("AGL_TEST_APO_API_BASE")),
    reason="set AGL_TEST_APO_MODEL (litellm name, e.g. openai/gpt-4o-mini) and AGL_TEST_APO_API_BASE "
    "(and AGL_TEST_APO_API_KEY if needed) to run APO against a real OpenAI-compatible endpoint",
)
def test_apo_one_round_against_real_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_REQUEST_TOKEN_IDS", "0")  # hosted APIs reject vLLM's return_token_ids
    model = os.environ["AGL_TEST_APO_MODEL"]
    api_base = os.environ["AGL_TEST_APO_API_BASE"]
    api_key = os.environ.get("AGL_TEST_APO_API_KEY")
    apo = CheckedAPO(model=model, api_base=api_base, api_key=api_key, gradient_batch_size=2, val_batch_size=6,
                     beam_width=2, branch_factor=1, beam_rounds=1, seed=0, rollout_timeout=300)  # fmt: skip
    resources = {
        "llm": LLM(endpoint=api_base, model=model.split("/", 1)[1] if model.startswith("openai/") else model, api_key=api_key),
        "prompt_template": PromptTemplate(template=INITIAL_TEMPLATE),
    }
    env_settings = _settings(tmp_path)
    report = Trainer(apo, n_runners=1, runner_concurrency=4, initial_resources=resources,
                     settings=env_settings).fit(AGENT, _rows("train"), _rows("val"))  # fmt: skip
    round1 = report["history"][1]
    assert len(round1["candidates"]) + round1["rejected"] + round1["duplicates"] == 1
    for candidate in round1["candidates"]:
        assert candidate["critique"] and candidate["score"] is not None
        assert placeholders(PromptTemplate(template=candidate["template"])) == placeholders(PromptTemplate(template=INITIAL_TEMPLATE))
    assert 0.0 <= report["initial_score"] <= report["best_score"] <= 1.0
    assert report["latest_from_topic"]["resources"]["prompt_template"]["template"] == report["best_template"]


def test_train_apo_script_explains_missing_endpoint(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from examples.room_selector.train_apo import main

    monkeypatch.delenv("AGL_APO_API_BASE", raising=False)
    assert main([]) == 2
    assert "AGL_APO_API_BASE" in capsys.readouterr().err
