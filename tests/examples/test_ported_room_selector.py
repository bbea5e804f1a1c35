"""Agent Lightning's APO room selector, ported (examples/ported/apo_room_selector), run as a user would.

``python room_selector_apo.py`` runs unchanged in a copy of the example folder, against one scripted
OpenAI-compatible server standing in for every model it calls (the substitution: ``OPENAI_BASE_URL``
points at the server): the agent model (``gpt-4.1-nano``) looks the rooms up with the tool and picks
a room - carefully only when the prompt tells it how to choose; the judge (``gpt-4.1-mini`` with a
response format) scores the pick against the expected room; the critique model (``gpt-5-mini``)
and the edit model (``gpt-4.1-mini``) make APO add that instruction. APO must find it.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.algorithms.scripted_llm import ScriptedServer, last_user_message

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/ported/apo_room_selector"
INSTRUCTION = "Pick the free room with the fewest spare seats that has every needed item and step-free access when asked."
CRITIQUE = "The agent takes the first free room that seats everyone; it ignores equipment, access and spare seats."


def _request(prompt: str) -> dict[str, Any]:
    return {
        "date": re.search(r"\d{4}-\d{2}-\d{2}", prompt).group(0),  # type: ignore[union-attr]
        "time": re.search(r"\b\d{2}:\d{2}\b", prompt).group(0),  # type: ignore[union-attr]
        "duration_min": int(re.search(r"(\d+) minutes", prompt).group(1)),  # type: ignore[union-attr]
        "attendees": int(re.search(r"(\d+) people", prompt).group(1)),  # type: ignore[union-attr]
        "needs": ast.literal_eval(re.search(r"Equipment needed: (\[.*?\])", prompt).group(1)),  # type: ignore[union-attr]
        "accessible": re.search(r"Step-free access needed: (True|False)", prompt).group(1) == "True",  # type: ignore[union-attr]
    }


def _careful(rooms: list[dict[str, Any]], req: dict[str, Any]) -> str:
    fits = [r for r in rooms if r["free"] and r["capacity"] >= req["attendees"] and set(req["needs"]) <= set(r["equipment"])
            and (r["accessible"] or not req["accessible"])]  # fmt: skip
    if not fits:
        return "No Room"
    return min(fits, key=lambda r: (r["capacity"] - req["attendees"], len(r["equipment"]) - len(req["needs"]), r["distance_m"]))["id"]


def _naive(rooms: list[dict[str, Any]], req: dict[str, Any]) -> str:
    return next((r["id"] for r in rooms if r["free"] and r["capacity"] >= req["attendees"]), "No Room")


class RoomModels:
    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, body: dict[str, Any]) -> Any:
        model, messages = body["model"], body["messages"]
        text = last_user_message(body)
        kind = "judge" if body.get("response_format") else "critique" if model == "gpt-5-mini" else \
            "edit" if "<current_prompt>" in text else "agent"  # fmt: skip
        self.calls[kind] = self.calls.get(kind, 0) + 1
        if kind == "judge":
            answer = text.split("Agent answer:\n", 1)[1].split("\n\nCorrect room:", 1)[0]
            expected = text.split("Correct room:\n", 1)[1].split("\n", 1)[0].strip()
            return json.dumps({"reason": "compared ids", "score": 1.0 if expected.lower() in answer.lower() else 0.0})
        if kind == "critique":
            return CRITIQUE
        if kind == "edit":
            template = re.search(r"<current_prompt>\n(.*?)\n</current_prompt>", text, re.DOTALL).group(1)  # type: ignore[union-attr]
            return f"<prompt>\n{template if INSTRUCTION in template else template + ' ' + INSTRUCTION}\n</prompt>"
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        req = _request(prompt)
        tool_results = [m for m in messages if m["role"] == "tool"]
        if not tool_results:
            assert body.get("tools"), "the agent's first call offers the tool"
            args = {"date": req["date"], "time": req["time"], "duration_min": req["duration_min"]}
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_rooms", "type": "function",
                 "function": {"name": "get_rooms_and_availability", "arguments": json.dumps(args)}}]}  # fmt: skip
        rooms = json.loads(tool_results[-1]["content"])["rooms"]
        choice = _careful(rooms, req) if INSTRUCTION in prompt else _naive(rooms, req)
        return f"final_choice: {choice}\nreason: scripted"


def test_ported_apo_room_selector_runs_unchanged(tmp_path: Path) -> None:
    work = tmp_path / "apo_room_selector"
    shutil.copytree(EXAMPLE, work)
    models = RoomModels()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGL_", "OPENAI_"))}
    env.update(AGL_DATA_DIR=str(tmp_path / "agl"), AGL_PARTITIONS="2", AGL_KAFKA_SESSION_TIMEOUT_MS="6000",
               OPENAI_API_KEY="scripted")  # fmt: skip
    with ScriptedServer(models) as server:
        env["OPENAI_BASE_URL"] = server.base_url
        run = subprocess.run([sys.executable, "room_selector_apo.py"], cwd=work, env=env, capture_output=True,
                             text=True, timeout=290)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    log = (work / "apo.log").read_text()
    best = re.search(r"best template \(candidate \d+, round (\d+)\) scores ([\d.]+) \(initial ([\d.]+)\)", log)
    assert best, log[-3000:]
    assert float(best.group(2)) == pytest.approx(1.0)
    assert float(best.group(3)) < 0.8
    assert int(best.group(1)) >= 1
    # every agent rollout made two calls (tool, answer) and was judged once
    assert models.calls["agent"] == 2 * models.calls["judge"] > 0
    assert models.calls["critique"] >= 2 and models.calls["edit"] >= 2
