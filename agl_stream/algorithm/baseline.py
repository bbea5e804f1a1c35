"""``Baseline``: the dry-run algorithm - run the dataset once with static resources and report.

Used by ``Trainer.dev``: it exercises the whole pipeline (tasks, runners, spans, processors)
without changing anything, and logs each rollout's outcome, as upstream's Baseline does.
"""

from __future__ import annotations

import logging
import statistics
from typing import Any, Optional, Sequence

from agl_stream.algorithm.base import Algorithm
from agl_stream.algorithm.results import RolloutResults, rewards_of, run_dataset

logger = logging.getLogger(__name__)


class Baseline(Algorithm):
    def __init__(self, *, max_items: Optional[int] = None, timeout: Optional[float] = 600.0) -> None:
        self.max_items = max_items
        self.timeout = timeout

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> dict[str, Any]:
        resources_id = None
        if self.initial_resources:
            resources_id = (await self.client.add_resources(self.initial_resources)).resources_id
        results = await RolloutResults(self.settings).start()
        report: dict[str, Any] = {}
        try:
            for mode, dataset in (("train", train_dataset), ("val", val_dataset)):
                if not dataset:
                    continue
                items = list(dataset)[: self.max_items] if self.max_items else list(dataset)
                outcomes = await run_dataset(self.client, results, items, mode=mode, resources_id=resources_id,  # type: ignore[arg-type]
                                             timeout=self.timeout)  # fmt: skip
                for item, outcome in zip(items, outcomes):
                    if outcome is None:
                        logger.warning("[%s] no outcome within %ss for %r", mode, self.timeout, item)
                    else:
                        logger.info("[%s] %s %s reward=%s%s", mode, outcome.rollout_id, outcome.status, outcome.final_reward,
                                    f" error={outcome.error}" if outcome.error else "")  # fmt: skip
                rewards = rewards_of(outcomes)
                report[mode] = {
                    "rollouts": len(items),
                    "succeeded": sum(o is not None and o.status == "succeeded" for o in outcomes),
                    "failed": sum(o is not None and o.status != "succeeded" for o in outcomes),
                    "missing": sum(o is None for o in outcomes),
                    "mean_reward": statistics.fmean(rewards) if rewards else None,
                }
                logger.info("[%s] summary: %s", mode, report[mode])
        finally:
            await results.stop()
        return report
