"""An upstream Agent Lightning 0.3 runner process, pointed at an agl-stream store front door.

Runs with the side venv's python (agentlightning 0.3.0, never a dependency of agl-stream):
``python upstream_runner.py URL RECORDS``. Everything here is what an upstream user writes for a
distributed job whose store lives elsewhere: an ``@agl.rollout`` agent calling the ``llm``
resource with the openai client, and ``agl.Trainer`` in the runner role with a
``LightningStoreClient(URL)`` (``managed_store=False``: the store is not this process's). The
runner, its default tracer (AgentOps, exporting spans over OTLP to the store's ``/v1/traces``), the
reward span and the store client are upstream's own code; only the URL points at agl-stream.

The process runs until it is stopped. What it saw is appended to ``RECORDS`` (JSON lines, flushed
per line so a stopped process leaves complete records): ``resources`` (the resources a rollout
started with, fetched as the runner fetches them) and ``rollout`` (reward, token counts and the
policy version the inference server reported for the answer).
"""

from __future__ import annotations

import difflib
import json
import sys
from typing import Any

import agentlightning as agl
from openai import OpenAI

URL, RECORDS = sys.argv[1], sys.argv[2]


def record(kind: str, **fields: Any) -> None:
    with open(RECORDS, "a") as fh:
        fh.write(json.dumps({"kind": kind, **fields}) + "\n")


def score(text: str, word: str) -> float:
    """How close the reply is to the word: graded, so even a random model's answers differ in reward."""
    return difflib.SequenceMatcher(None, text.strip().lower(), word).ratio()


@agl.rollout
def repeat_word(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key or "unused", timeout=60, max_retries=0)
    response = client.chat.completions.create(
        model=llm.model,
        messages=[{"role": "user", "content": task["question"]}],
        max_tokens=12,
        temperature=float((llm.sampling_parameters or {}).get("temperature", 1.0)),
    )
    text = response.choices[0].message.content or ""
    reward = score(text, task["word"])
    extra = response.model_extra or {}
    record("rollout", rollout_id=rollout.rollout_id, mode=rollout.mode, reward=reward, endpoint=llm.endpoint,
           model=llm.model, served_policy_version=extra.get("policy_version"),
           prompt_tokens=len(extra.get("prompt_token_ids") or []),
           response_tokens=len((response.choices[0].model_extra or {}).get("token_ids") or []))  # fmt: skip
    return reward


class ResourcesSeen(agl.Hook):
    """Records the resources each rollout starts with, read from the store as the runner reads them."""

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: agl.Rollout) -> None:
        store = runner.get_store()
        if rollout.resources_id:
            update = await store.get_resources_by_id(rollout.resources_id)
        else:
            update = await store.get_latest_resources()
        named = update.resources if update else {}
        record("resources", rollout_id=rollout.rollout_id, worker_id=runner.get_worker_id(),
               resources_id=update.resources_id if update else None, version=update.version if update else None,
               llm={name: r.model for name, r in named.items() if isinstance(r, agl.LLM)})  # fmt: skip


if __name__ == "__main__":
    trainer = agl.Trainer(
        n_runners=1,
        store=agl.LightningStoreClient(URL),
        strategy=agl.ClientServerExecutionStrategy(role="runner", managed_store=False),
        hooks=[ResourcesSeen()],
    )
    trainer.fit(repeat_word)
