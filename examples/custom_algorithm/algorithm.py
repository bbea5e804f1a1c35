"""An upstream-style custom algorithm written against the store API by name: pick the best prompt.

For each candidate prompt it publishes the prompt as a resource, enqueues the dataset, waits for
the rollouts, reads each rollout's spans with ``query_spans`` and turns them into triplets with the
adapter (what a learner would train on), scores the prompt by the final rewards, and finally makes
the best prompt the latest resources. The same function runs on upstream's ``LightningStore``; here
it gets a :class:`~agl_stream.client.StoreClient`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from agl_stream.adapter import TracerTraceToTriplet
from agl_stream.types import LLM, PromptTemplate, Triplet


@dataclass
class SearchResult:
    best_prompt: str
    scores: dict[str, float]
    triplets: dict[str, list[Triplet]] = field(default_factory=dict)  # rollout id -> triplets from its spans
    resources_id: Optional[str] = None


async def prompt_search(*, store: Any, llm: LLM, prompts: Sequence[str], dataset: Sequence[dict[str, Any]],
                        poll_interval: float = 0.2, timeout: float = 120.0) -> SearchResult:  # fmt: skip
    adapter = TracerTraceToTriplet()
    scores: dict[str, float] = {}
    triplets: dict[str, list[Triplet]] = {}
    published: dict[str, str] = {}  # prompt -> resources id
    for prompt in prompts:
        # 1. publish the candidate under its own id: a runner that gets the task waits for exactly these resources
        resources = await store.add_resources({"llm": llm, "prompt_template": PromptTemplate(template=prompt)})
        published[prompt] = resources.resources_id
        # 2. enqueue the dataset against it
        rollouts = [await store.enqueue_rollout(input=task, mode="train", resources_id=resources.resources_id)
                    for task in dataset]  # fmt: skip
        ids = [r.rollout_id for r in rollouts]
        # 3. wait for the runners, polling without blocking as upstream's examples do
        finished: list[Any] = []
        for _ in range(int(timeout / poll_interval)):
            finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=0.0)
            if len(finished) == len(ids):
                break
            await asyncio.sleep(poll_interval)
        else:
            raise TimeoutError(f"only {len(finished)} of {len(ids)} rollouts finished within {timeout:.0f}s")
        # 4. read each rollout's spans and adapt them
        rewards = []
        for rollout in finished:
            spans = await store.query_spans(rollout.rollout_id, "latest")
            triplets[rollout.rollout_id] = adapter.adapt(list(spans))
            final = triplets[rollout.rollout_id][-1].reward if triplets[rollout.rollout_id] else None
            rewards.append(final if rollout.status == "succeeded" and final is not None else 0.0)
        scores[prompt] = sum(rewards) / len(rewards)
    # 5. the best prompt becomes the latest resources (a new version of its resources)
    best = max(prompts, key=lambda p: scores[p])
    update = await store.update_resources(published[best], {"llm": llm, "prompt_template": PromptTemplate(template=best)})
    return SearchResult(best, scores, triplets, update.resources_id)
