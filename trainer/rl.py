"""``RL``: the reinforcement-learning algorithm behind ``Trainer.fit`` (upstream's ``agl.VERL`` role).

It wires the learner service into the facade: the inference engine serves the policy and announces
it on ``agl.resources``; a held-out validation set is evaluated through the live pipeline before
training; the scheduler streams GRPO groups of the training set to ``agl.tasks`` while the learner
consumes ``agl.triplets`` and publishes new weights after every step (rollouts never stop while the
learner trains - the off-policy bound and importance sampling correct for the lag); the validation
set is evaluated again at the end and compared item by item with the first evaluation.

Evaluations report task success apart from shaped reward (:mod:`agl_stream.algorithm.success`):
each held-out item is answered ``eval_samples`` times; the headline ``validation`` comparison is
accuracy (the fraction of right answers per item, paired before/after, with a bootstrap CI and a
sign test), beside pass@k, the mean reward (``validation_reward``) and every reward dimension.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from agl_stream.algorithm import Algorithm, PairedComparison, RolloutResults, paired_comparison, run_dataset
from agl_stream.algorithm.success import DEFAULT_SUCCESS_KEY, SuccessReport, success_report
from agl_stream_trainer.config import TrainerConfig
from agl_stream_trainer.metrics import JsonlSink
from agl_stream_trainer.scheduler import SchedulerConfig
from agl_stream_trainer.service import TrainerService

logger = logging.getLogger(__name__)


class RL(Algorithm):
    def __init__(
        self,
        config: Union[TrainerConfig, Mapping[str, Any], None] = None,
        *,
        evaluate: bool = True,
        eval_timeout: float = 1200.0,
        output_dir: Optional[Path] = None,
        validate_before: bool = True,
        eval_samples: int = 1,
        success_key: str = DEFAULT_SUCCESS_KEY,
        success_threshold: float = 1.0,
        step_sinks: Sequence[Any] = (),
    ) -> None:
        """``initial_resources`` given to the Trainer are published with every policy version (the
        policy itself is the ``main_llm`` resource, which wins over one of that name). ``step_sinks``
        receive every learner step's metrics too (``write(StepMetrics)``, ``close()``)."""
        self.config = config if isinstance(config, TrainerConfig) else TrainerConfig.model_validate(dict(config or {}))
        self.evaluate = evaluate
        self.validate_before = validate_before
        self.eval_timeout = eval_timeout
        self.output_dir = output_dir
        if eval_samples < 1:
            raise ValueError("eval_samples must be at least 1")
        self.eval_samples = eval_samples  # answers per held-out item: accuracy over them, and pass@k
        self.success_key = success_key  # the reward dimension that says the task was solved
        self.success_threshold = success_threshold
        self.step_sinks = list(step_sinks)
        self.report: dict[str, Any] = {}

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> dict[str, Any]:
        if not train_dataset:
            raise ValueError("RL needs a training dataset")
        out = self.output_dir or self.settings.data_dir / "runs" / self.config.run_id
        out.mkdir(parents=True, exist_ok=True)
        dataset_path = out / "train.jsonl"
        dataset_path.write_text("".join(json.dumps(item) + "\n" for item in train_dataset))
        scheduler = (self.config.scheduler or SchedulerConfig()).model_copy(update={"dataset": str(dataset_path)})
        metrics_path = out / "steps.jsonl"
        metrics_path.unlink(missing_ok=True)
        config = self.config.model_copy(update={"scheduler": scheduler})
        if config.metrics.progress is None:  # Trainer.fit shows its own live display (rich allows one at a time)
            config = config.model_copy(update={"metrics": config.metrics.model_copy(update={"progress": False})})

        results = await RolloutResults(self.settings).start()
        before: Optional[SuccessReport] = None

        async def evaluate_before(service: TrainerService) -> None:
            nonlocal before
            if self.evaluate and self.validate_before and val_dataset:
                logger.info("validation before training (%d tasks, policy version 0)", len(val_dataset))
                before = await self._evaluate(results, val_dataset, "before")

        async def evaluate_after(service: TrainerService) -> None:
            if self.evaluate and val_dataset:
                version = service.learner.policy_version if service.learner else None
                logger.info("validation after training (%d tasks, policy version %s)", len(val_dataset), version)
                after = await self._evaluate(results, val_dataset, "after")
                if before is not None:
                    accuracy = paired_comparison(before.per_item, after.per_item)
                    reward = paired_comparison(before.per_item_reward, after.per_item_reward)
                    self.report["validation"] = {"metric": "accuracy", **_comparison_dict(accuracy)}
                    self.report["validation_reward"] = {"metric": "mean reward", **_comparison_dict(reward)}
                    logger.info("validation accuracy %s", accuracy.describe())
                    logger.info("validation reward %s", reward.describe())

        service = TrainerService(self.settings, config, before_loop=evaluate_before, after_loop=evaluate_after,
                                 extra_sinks=[JsonlSink(metrics_path), *self.step_sinks],
                                 extra_resources=dict(self.initial_resources or {}))  # fmt: skip
        try:
            await service.run()
        finally:
            await results.stop()
        learner = service.learner
        self.report.update(
            steps=learner.step if learner else 0,
            policy_version=learner.policy_version if learner else 0,
            stop_reason=service.stop_reason,
            shortfall=service.shortfall,
            metrics_file=str(metrics_path),
            run_dir=str(out),
        )
        (out / "report.json").write_text(json.dumps(self.report, indent=2))
        return self.report

    async def _evaluate(self, results: RolloutResults, dataset: Sequence[Any], label: str) -> SuccessReport:
        k = self.eval_samples
        items = [item for item in dataset for _ in range(k)]
        tags = [{"item_index": i, "sample": j} for i in range(len(dataset)) for j in range(k)]
        # the training tasks' resources when they are pinned (one broker serving several runs one after
        # another: "latest" can be an older run's higher policy version), else the latest
        pinned = self.config.scheduler.resources_id if self.config.scheduler is not None else None
        outcomes = await run_dataset(self.client, results, items, mode="val", metadata={"eval": label},
                                     timeout=self.eval_timeout, item_metadata=tags, resources_id=pinned)  # fmt: skip
        missing = sum(o is None for o in outcomes)
        failed = sum(o is not None and o.status != "succeeded" for o in outcomes)
        if missing or failed:
            logger.warning("validation %s: %d rollouts failed, %d missing (counted as wrong, reward 0)", label, failed, missing)
        report = success_report([outcomes[i * k:(i + 1) * k] for i in range(len(dataset))],
                                success_key=self.success_key, threshold=self.success_threshold)  # fmt: skip
        self.report[f"val_{label}"] = {"rewards": report.per_item_reward, "failed": failed, "missing": missing, **report.as_dict()}
        logger.info("validation %s: accuracy %.3f, %s, mean reward %.3f", label, report.accuracy,
                    ", ".join(f"pass@{j} {v:.3f}" for j, v in report.pass_at.items()), report.mean_reward)  # fmt: skip
        return report


def VERL(config: Mapping[str, Any], **options: Any) -> RL:
    """Upstream's ``agl.VERL(config)``: the RL algorithm from a verl ``main_ppo`` config dict.

    Keys that apply here are mapped onto :class:`TrainerConfig`; the rest are refused with an error
    naming them (see :mod:`agl_stream_trainer.verl_config`). ``options`` go to :class:`RL`."""
    from agl_stream_trainer.verl_config import map_verl_config

    trainer_config, mapped_options = map_verl_config(config)
    return RL(trainer_config, **{**mapped_options, **options})


def _comparison_dict(c: PairedComparison) -> dict[str, Any]:
    return {
        "n": c.n, "mean_before": c.mean_before, "mean_after": c.mean_after, "mean_diff": c.mean_diff,
        "ci_low": c.ci_low, "ci_high": c.ci_high, "confidence": c.confidence, "improved": c.improved,
        "worsened": c.worsened, "sign_test_p": c.sign_test_p, "significant": c.significant,
    }  # fmt: skip
