"""``Baseline``: the dry-run algorithm - run the dataset with static resources and report.

Used by ``Trainer.dev``: it exercises the whole pipeline (tasks, runners, spans, processors)
without changing anything, and logs each rollout's outcome, its spans and what the trainer's adapter
makes of them, as upstream's Baseline does. ``FastAlgorithm`` is upstream's marker base class of
such quick algorithms (``Trainer.dev`` accepts only those).
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from typing import Any, Literal, Optional, Sequence

from agl_stream.algorithm.base import Algorithm
from agl_stream.algorithm.results import RolloutResult, RolloutResults, rewards_of, run_dataset
from agl_stream.client import TopicFollower
from agl_stream.types import Span

logger = logging.getLogger(__name__)

SpanVerbosity = Literal["keys", "key_values", "none"]


class FastAlgorithm(Algorithm):
    """Base class of lightweight algorithms for short feedback loops (what ``Trainer.dev`` runs)."""


class Baseline(FastAlgorithm):
    """Run every item of the datasets once per epoch (train items in mode ``train``, val items in ``val``).

    Upstream's parameters: ``n_epochs``; ``span_verbosity`` (``keys``, ``key_values`` or ``none``) for
    the per-rollout span log; ``train_split`` is validated as upstream does (strictly between 0 and 1)
    and, as upstream, not otherwise used. ``polling_interval`` and ``max_queue_length`` pace upstream's
    polling of its store queue; here ``agl.tasks`` is the queue and runners pull at their own pace, so
    every item is enqueued at once and outcomes arrive as events (both are accepted for compatibility).
    agl-stream's own: ``max_items`` caps each dataset, ``timeout`` bounds the wait for outcomes.
    """

    def __init__(
        self,
        *,
        n_epochs: int = 1,
        train_split: float = 0.5,
        polling_interval: float = 5.0,
        max_queue_length: int = 4,
        span_verbosity: SpanVerbosity = "keys",
        max_items: Optional[int] = None,
        timeout: Optional[float] = 600.0,
    ) -> None:
        if not 0.0 < train_split < 1.0:
            raise ValueError("train_split must be between 0 and 1.")
        if n_epochs < 1:
            raise ValueError("n_epochs must be at least 1")
        if span_verbosity not in ("keys", "key_values", "none"):
            raise ValueError(f"span_verbosity must be 'keys', 'key_values' or 'none', not {span_verbosity!r}")
        self.n_epochs = n_epochs
        self.train_split = train_split
        self.polling_interval = polling_interval
        self.max_queue_length = max_queue_length
        self.span_verbosity = span_verbosity
        self.max_items = max_items
        self.timeout = timeout
        self._spans: dict[str, list[Span]] = {}

    def _collect(self, _key: Optional[str], span: Span) -> None:
        self._spans.setdefault(span.rollout_id, []).append(span)

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> dict[str, Any]:
        if not train_dataset and not val_dataset:
            raise ValueError("Baseline needs a train_dataset or a val_dataset")
        resources_id = None
        if self.initial_resources:
            resources_id = (await self.client.add_resources(self.initial_resources)).resources_id
            logger.info("initial resources published as %s", resources_id)
        results = await RolloutResults(self.settings).start()
        spans: Optional[TopicFollower[Span]] = None
        if self.span_verbosity != "none" or self.adapter is not None:
            spans = TopicFollower(self.settings, "spans", Span, self._collect)
            await spans.start()
        report: dict[str, Any] = {}
        try:
            for epoch in range(self.n_epochs):
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
                    if spans is not None:
                        await self._log_spans([o for o in outcomes if o is not None], spans)
                    rewards = rewards_of(outcomes)
                    summary = {
                        "rollouts": len(items),
                        "succeeded": sum(o is not None and o.status == "succeeded" for o in outcomes),
                        "failed": sum(o is not None and o.status != "succeeded" for o in outcomes),
                        "missing": sum(o is None for o in outcomes),
                        "mean_reward": statistics.fmean(rewards) if rewards else None,
                    }
                    key = mode if self.n_epochs == 1 else f"{mode}_epoch{epoch + 1}"
                    report[key] = summary
                    logger.info("[%s] summary: %s", key, summary)
        finally:
            if spans is not None:
                await spans.stop()
            await results.stop()
        return report

    async def _log_spans(self, outcomes: list[RolloutResult], follower: TopicFollower[Span], wait: float = 3.0) -> None:
        """Log each rollout's spans and the adapter's output on them (spans may trail the outcome a little)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while loop.time() < deadline and not all(self._spans.get(o.rollout_id) for o in outcomes):
            await follower.wait_changed(0.2)
        for outcome in outcomes:
            spans = [s for s in self._spans.pop(outcome.rollout_id, []) if s.attempt_id == outcome.attempt_id]
            spans.sort(key=lambda s: (s.sequence_id, s.start_time or 0.0))
            if self.span_verbosity != "none":
                for span in spans:
                    detail = span.attributes if self.span_verbosity == "key_values" else list(span.attributes)
                    logger.info("[Rollout %s | Attempt %s | Span %s] #%s (%s) %s", outcome.rollout_id, outcome.attempt_id,
                                span.span_id, span.sequence_id, span.name, detail)  # fmt: skip
            if self.adapter is not None and spans:
                try:
                    logger.info("[Rollout %s] adapted data: %s", outcome.rollout_id, self.adapter.adapt(spans))
                except Exception as exc:  # the adapter's verdict on these spans is what the user wants to see
                    logger.warning("[Rollout %s] the adapter %r failed on its spans: %r", outcome.rollout_id, self.adapter, exc)
