"""``APO``: automatic prompt optimization - beam search over prompt templates with textual gradients.

Upstream's algorithm (ProTeGi / TextGrad style), run through the live pipeline:

1. Publish the initial resources (the template to optimize is the first ``PromptTemplate`` unless
   ``prompt_key`` names one) and score the template on a validation batch: rollouts in mode
   ``val``, score = mean final reward as the runners reported it on ``agl.attempts``.
2. Each round, for every parent in the beam and each of ``branch_factor`` branches: run
   ``gradient_batch_size`` training tasks with the parent, turn their spans (read from
   ``agl.spans``) into chat messages with :class:`TraceToMessages`, ask the critique model what
   went wrong and why (the textual gradient), ask the edit model to rewrite the template using the
   critique, and check that the rewrite still formats with the parent's placeholders (rejected
   and counted otherwise).
3. Score the new candidates on the same validation batch; keep the ``beam_width`` best of parents
   and candidates.
4. After ``beam_rounds`` rounds publish the best template as the latest resources and return a
   report (per-round history, best template and score, initial score).

The validation batch is drawn once (seeded) so scores of different rounds are comparable. Critique
and edit calls go through ``litellm.acompletion``, so any provider litellm knows works, and
``openai/<model>`` with ``api_base`` reaches any OpenAI-compatible server.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import statistics
import string
from dataclasses import dataclass, field
from typing import Any, Generic, Optional, Sequence, TypeVar

from agl_stream.adapter.messages import TraceToMessages
from agl_stream.algorithm import Algorithm, RolloutResults, run_dataset
from agl_stream.algorithm.results import RolloutResult
from agl_stream.client import TopicFollower
from agl_stream.config import Settings
from agl_stream.types import NamedResources, PromptTemplate, Span

logger = logging.getLogger(__name__)

T_task = TypeVar("T_task")

CRITIQUE_SYSTEM = (
    "You review prompt templates for an LLM agent. You get the template, and a few episodes in "
    "which the agent ran with it: the task, the conversation, and the reward it earned (1.0 is "
    "perfect). Explain concisely which mistakes the agent made, why the template let them happen, "
    "and what the template should say instead. Do not write the new template."
)
EDIT_SYSTEM = (
    "You rewrite prompt templates for an LLM agent. Apply the reviewer's critique to the current "
    "template. Keep every placeholder in curly braces exactly as it is (same names, each one kept), "
    "do not add new placeholders, and write literal braces as {{ and }}. Reply with the complete new "
    "template between <prompt> and </prompt>, nothing else."
)


class TemplateRejected(ValueError):
    """The edit model's template cannot be used (lost or added placeholders, does not format)."""


def placeholders(template: PromptTemplate) -> set[str]:
    """The variable names the agent fills in ``template``."""
    if template.engine == "jinja":
        import jinja2
        from jinja2 import meta

        return set(meta.find_undeclared_variables(jinja2.Environment().parse(template.template)))
    names = set()
    for _literal, name, _spec, _conv in string.Formatter().parse(template.template):
        if name is not None:
            names.add(re.split(r"[.\[]", name, maxsplit=1)[0])
    return names


def validate_template(candidate: PromptTemplate, parent: PromptTemplate) -> None:
    """Raise :class:`TemplateRejected` unless ``candidate`` keeps the parent's placeholders and formats
    with exactly those keys."""
    keys = placeholders(parent)
    try:
        missing = keys - placeholders(candidate)
    except Exception as exc:  # a malformed template (unbalanced braces, bad jinja)
        raise TemplateRejected(f"does not parse: {exc}") from None
    if missing:
        raise TemplateRejected(f"lost placeholder(s) {sorted(missing)}")
    try:
        candidate.format(**{key: f"<{key}>" for key in keys})
    except Exception as exc:  # KeyError: a new placeholder; ValueError/IndexError: stray braces
        raise TemplateRejected(f"does not format with {sorted(keys)}: {exc!r}") from None
    if not candidate.template.strip():
        raise TemplateRejected("empty template")


def extract_template(reply: str) -> str:
    """The template from the edit model's reply: inside <prompt> tags, else a fenced block, else all."""
    match = re.search(r"<prompt>\s*(.*?)\s*</prompt>", reply, re.DOTALL)
    if match:
        return match.group(1)
    match = re.search(r"```[a-zA-Z]*\n(.*?)\n```", reply, re.DOTALL)
    if match:
        return match.group(1)
    return reply.strip()


@dataclass
class Candidate:
    template: PromptTemplate
    score: Optional[float] = None
    round: int = 0
    parent: Optional[int] = None  # index into APO.candidates
    critique: Optional[str] = None
    index: int = 0


@dataclass
class _Episode:
    task: Any
    result: Optional[RolloutResult]
    messages: list[dict[str, Any]] = field(default_factory=list)


class _SpanCollector:
    """Follows ``agl.spans`` and keeps the spans per (rollout, attempt) until they are taken."""

    def __init__(self, settings: Any) -> None:
        self._spans: dict[str, list[Span]] = {}
        self._follower: TopicFollower[Span] = TopicFollower(settings, "spans", Span, self._apply)

    def _apply(self, _key: Optional[str], span: Span) -> None:
        self._spans.setdefault(span.rollout_id, []).append(span)

    async def start(self) -> "_SpanCollector":
        await self._follower.start()
        return self

    async def stop(self) -> None:
        await self._follower.stop()

    def discard(self, rollout_ids: Sequence[str]) -> None:
        for rid in rollout_ids:
            self._spans.pop(rid, None)

    async def take(self, result: RolloutResult, match: re.Pattern[str], wait: float) -> list[Span]:
        """The attempt's spans; waits up to ``wait`` seconds for an LLM-call span (spans and the
        finished event travel on different topics, so either may arrive first)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            spans = [s for s in self._spans.get(result.rollout_id, []) if s.attempt_id == result.attempt_id]
            if any(match.search(s.name) for s in spans) or loop.time() >= deadline:
                self._spans.pop(result.rollout_id, None)
                return spans
            await self._follower.wait_changed(min(0.5, max(0.01, deadline - loop.time())))


class APO(Algorithm, Generic[T_task]):
    """Beam search over one prompt template of the initial resources (see the module docstring).

    Upstream's constructor works unchanged: ``APO(AsyncOpenAI(), gradient_model=..., apply_edit_model=...,
    val_batch_size=..., rollout_batch_timeout=..., run_initial_validation=...)``: with a client, the
    critique and edit calls go through it (default models ``gpt-5-mini`` and ``gpt-4.1-mini``, as
    upstream); without one, through litellm with ``model`` / ``api_base`` / ``api_key``.
    """

    def __init__(
        self,
        async_openai_client: Any = None,
        *,
        apply_edit_model: Optional[str] = None,
        rollout_batch_timeout: Optional[float] = None,
        run_initial_validation: bool = True,
        _poml_trace: bool = False,
        model: Optional[str] = None,
        api_base: Optional[str] = None,
        api_key: Optional[str] = None,
        gradient_model: Optional[str] = None,
        edit_model: Optional[str] = None,
        gradient_api_base: Optional[str] = None,
        edit_api_base: Optional[str] = None,
        prompt_key: Optional[str] = None,
        gradient_batch_size: int = 4,
        val_batch_size: int = 16,
        beam_width: int = 2,
        branch_factor: int = 2,
        beam_rounds: int = 2,
        diversity_temperature: float = 1.0,
        seed: int = 0,
        rollout_timeout: float = 600.0,
        llm_timeout: float = 120.0,
        span_wait: float = 10.0,
        max_message_chars: int = 2000,
    ) -> None:
        """``model``/``api_base``/``api_key`` configure both the critique and the edit calls
        (env fallbacks ``AGL_APO_MODEL``, ``AGL_APO_API_BASE``, ``AGL_APO_API_KEY``);
        ``gradient_*``/``edit_*`` override them per call kind."""
        for name, value in (("gradient_batch_size", gradient_batch_size), ("val_batch_size", val_batch_size),
                            ("beam_width", beam_width), ("branch_factor", branch_factor)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if beam_rounds < 0:
            raise ValueError(f"beam_rounds must be >= 0, got {beam_rounds}")
        # ``_poml_trace`` is upstream's debug switch for its POML prompt files; these prompts are plain text.
        settings = Settings.from_env()
        self.async_openai_client = async_openai_client
        if async_openai_client is not None:
            self.model = model or "gpt-4.1-mini"
            default_gradient, default_edit = "gpt-5-mini", "gpt-4.1-mini"
        else:
            self.model = model or settings.apo_model
            default_gradient = default_edit = self.model
        self.api_base = api_base or settings.apo_api_base
        self.api_key = api_key or settings.apo_api_key or os.environ.get("OPENAI_API_KEY")  # litellm's own variable
        self.gradient_model = gradient_model or (model if model else default_gradient)
        self.edit_model = edit_model or apply_edit_model or (model if model else default_edit)
        self.apply_edit_model = self.edit_model
        self.run_initial_validation = run_initial_validation
        if rollout_batch_timeout is not None:
            rollout_timeout = rollout_batch_timeout
        self.rollout_batch_timeout = rollout_timeout
        self.gradient_api_base = gradient_api_base or self.api_base
        self.edit_api_base = edit_api_base or self.api_base
        self.prompt_key = prompt_key
        self.gradient_batch_size = gradient_batch_size
        self.val_batch_size = val_batch_size
        self.beam_width = beam_width
        self.branch_factor = branch_factor
        self.beam_rounds = beam_rounds
        self.diversity_temperature = diversity_temperature
        self.rng = random.Random(seed)
        self.rollout_timeout = rollout_timeout
        self.llm_timeout = llm_timeout
        self.span_wait = span_wait
        self.max_message_chars = max_message_chars
        self.adapter_messages = TraceToMessages()
        self._llm_call = re.compile(self.adapter_messages.llm_call_match)
        self.candidates: list[Candidate] = []
        self.rejected = 0
        self.report: dict[str, Any] = {}

    # ---------------------------------------------------------------- public helpers

    def get_best_prompt(self) -> Optional[PromptTemplate]:
        scored = [c for c in self.candidates if c.score is not None]
        return max(scored, key=lambda c: c.score).template if scored else None  # type: ignore[arg-type,return-value]

    def _pick_prompt_key(self, resources: NamedResources) -> str:
        if self.prompt_key is not None:
            if not isinstance(resources.get(self.prompt_key), PromptTemplate):
                raise ValueError(f"initial resource {self.prompt_key!r} is not a PromptTemplate")
            return self.prompt_key
        for name, resource in resources.items():
            if isinstance(resource, PromptTemplate):
                return name
        raise ValueError("APO needs a PromptTemplate in initial_resources")

    # ---------------------------------------------------------------- the algorithm

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> dict[str, Any]:
        if not train_dataset or not val_dataset:
            raise ValueError("APO needs a training dataset (for critiques) and a validation dataset (for scores)")
        if isinstance(self.adapter, TraceToMessages):  # upstream passes Trainer(adapter=TraceToMessages())
            self.adapter_messages = self.adapter
            self._llm_call = re.compile(self.adapter_messages.llm_call_match)
        resources = dict(self.initial_resources or {})
        key = self._pick_prompt_key(resources)
        val_batch = self._sample(val_dataset, self.val_batch_size)
        logger.info("APO: optimizing %r; val batch %d of %d tasks; %d round(s), beam %d, %d branch(es), gradient batch %d",
                    key, len(val_batch), len(val_dataset), self.beam_rounds, self.beam_width, self.branch_factor,
                    self.gradient_batch_size)  # fmt: skip
        self._publish_lock = asyncio.Lock()
        self.results = await RolloutResults(self.settings).start()
        self.spans = await _SpanCollector(self.settings).start()
        try:
            initial = self._add(Candidate(resources[key], round=0))  # type: ignore[arg-type]
            if self.run_initial_validation:
                initial.score = await self._score(resources, key, initial, val_batch)
                logger.info("APO: initial template scores %.3f", initial.score)
            else:  # upstream: no baseline score; the seed stays in the beam until scored candidates beat it
                logger.info("APO: initial validation skipped (run_initial_validation=False)")
            beam = [initial]
            history: list[dict[str, Any]] = [{"round": 0, "candidates": [self._describe(initial)], "beam_scores": [initial.score]}]
            for round_no in range(1, self.beam_rounds + 1):
                rejected_before = self.rejected
                jobs = [self._branch(resources, key, parent, train_dataset, round_no) for parent in beam for _ in range(self.branch_factor)]
                children = [c for c in await asyncio.gather(*jobs) if c is not None]
                known = {c.template.template for c in beam}
                fresh: list[Candidate] = []
                for child in children:  # identical rewrites are scored once
                    if child.template.template not in known:
                        known.add(child.template.template)
                        fresh.append(self._add(child))
                scores = await asyncio.gather(*(self._score(resources, key, c, val_batch) for c in fresh))
                for child, score in zip(fresh, scores):
                    child.score = score
                pool = beam + fresh
                beam = sorted(pool, key=lambda c: (-(c.score or 0.0), c.index))[: self.beam_width]
                history.append({
                    "round": round_no,
                    "candidates": [self._describe(c) for c in fresh],
                    "rejected": self.rejected - rejected_before,
                    "duplicates": len(children) - len(fresh),
                    "beam_scores": [c.score for c in beam],
                })  # fmt: skip
                logger.info("APO round %d/%d: %d new candidate(s) %s, %d rejected; beam scores %s",
                            round_no, self.beam_rounds, len(fresh), [round(s, 3) for s in scores],
                            self.rejected - rejected_before, [round(c.score or 0.0, 3) for c in beam])  # fmt: skip
            best = max(self.candidates, key=lambda c: (c.score if c.score is not None else -1.0, -c.index))
            async with self._publish_lock:
                final = await self.client.add_resources({**resources, key: best.template})
            logger.info("APO: best template (candidate %d, round %d) scores %s (initial %s); published as %s v%d",
                        best.index, best.round, best.score, initial.score, final.resources_id, final.version)  # fmt: skip
            self.report = {
                "prompt_key": key,
                "initial_score": initial.score,
                "best_score": best.score,
                "best_template": best.template.template,
                "best_round": best.round,
                "best_resources_id": final.resources_id,
                "rejected": self.rejected,
                "history": history,
                "val_batch_size": len(val_batch),
            }
            return self.report
        finally:
            await self.spans.stop()
            await self.results.stop()

    # ---------------------------------------------------------------- steps

    def _add(self, candidate: Candidate) -> Candidate:
        candidate.index = len(self.candidates)
        self.candidates.append(candidate)
        return candidate

    def _sample(self, dataset: Sequence[Any], n: int) -> list[Any]:
        items = list(dataset)
        return items if n >= len(items) else self.rng.sample(items, n)

    def _describe(self, c: Candidate) -> dict[str, Any]:
        return {"index": c.index, "parent": c.parent, "score": c.score, "template": c.template.template, "critique": c.critique}

    async def _publish(self, resources: NamedResources, key: str, template: PromptTemplate) -> str:
        async with self._publish_lock:  # versions are numbered from the cache; one publish at a time
            return (await self.client.add_resources({**resources, key: template})).resources_id

    async def _score(self, resources: NamedResources, key: str, candidate: Candidate, val_batch: list[Any]) -> float:
        resources_id = await self._publish(resources, key, candidate.template)
        outcomes = await run_dataset(self.client, self.results, val_batch, mode="val", resources_id=resources_id,
                                     metadata={"apo_candidate": candidate.index}, timeout=self.rollout_timeout)  # fmt: skip
        self.spans.discard([o.rollout_id for o in outcomes if o is not None])
        missing = sum(o is None for o in outcomes)
        failed = sum(o is not None and o.status != "succeeded" for o in outcomes)
        if missing or failed:
            logger.warning("APO candidate %d: %d rollout(s) failed, %d missing (reward 0)", candidate.index, failed, missing)
        rewards = [o.final_reward if o is not None and o.final_reward is not None else 0.0 for o in outcomes]
        return statistics.fmean(rewards)

    async def _branch(self, resources: NamedResources, key: str, parent: Candidate, train: Sequence[Any], round_no: int) -> Optional[Candidate]:
        """Roll out a gradient batch with ``parent``, critique it, rewrite it; None if the rewrite is unusable."""
        tasks = self._sample(train, self.gradient_batch_size)
        resources_id = await self._publish(resources, key, parent.template)
        outcomes = await run_dataset(self.client, self.results, tasks, mode="train", resources_id=resources_id,
                                     metadata={"apo_parent": parent.index}, timeout=self.rollout_timeout)  # fmt: skip
        episodes = []
        for task, outcome in zip(tasks, outcomes):
            episode = _Episode(task, outcome)
            if outcome is not None:
                spans = await self.spans.take(outcome, self._llm_call, self.span_wait)
                for sample in self.adapter_messages.adapt(spans):
                    episode.messages.extend(sample["messages"])
            episodes.append(episode)
        try:
            critique = await self._complete(self.gradient_model, self.gradient_api_base, CRITIQUE_SYSTEM,
                                            self._critique_request(parent.template, episodes), self.diversity_temperature)  # fmt: skip
            reply = await self._complete(self.edit_model, self.edit_api_base, EDIT_SYSTEM,
                                         self._edit_request(parent.template, critique), 0.0)  # fmt: skip
        except Exception as exc:  # a failed model call loses one branch, not the run
            logger.warning("APO round %d: critique/edit call failed for candidate %d: %r", round_no, parent.index, exc)
            self.rejected += 1
            return None
        child = PromptTemplate(template=extract_template(reply), engine=parent.template.engine)
        try:
            validate_template(child, parent.template)
        except TemplateRejected as exc:
            self.rejected += 1
            logger.warning("APO round %d: rejected a rewrite of candidate %d: %s", round_no, parent.index, exc)
            return None
        return Candidate(child, round=round_no, parent=parent.index, critique=critique)

    def _clip(self, text: Any) -> str:
        text = text if isinstance(text, str) else json.dumps(text, default=str)
        return text if len(text) <= self.max_message_chars else text[: self.max_message_chars] + " [...]"

    def _critique_request(self, template: PromptTemplate, episodes: list[_Episode]) -> str:
        parts = [f"<template>\n{template.template}\n</template>\n"]
        for i, ep in enumerate(episodes, 1):
            if ep.result is None:
                outcome = "no result (timed out)"
            else:
                outcome = f"status {ep.result.status}, reward {ep.result.final_reward}"
                if ep.result.error:
                    outcome += f", error: {self._clip(ep.result.error)}"
            lines = [f"## Episode {i}: {outcome}", f"Task: {self._clip(ep.task)}"]
            for message in ep.messages:
                content = message.get("content")
                if message.get("tool_calls"):
                    content = f"{content or ''} tool calls: {json.dumps(message['tool_calls'])}"
                lines.append(f"[{message.get('role')}] {self._clip(content or '')}")
            if not ep.messages:
                lines.append("(no LLM calls were recorded)")
            parts.append("\n".join(lines))
        parts.append("What went wrong in these episodes, and how should the template change?")
        return "\n\n".join(parts)

    def _edit_request(self, template: PromptTemplate, critique: str) -> str:
        keys = ", ".join("{" + k + "}" for k in sorted(placeholders(template))) or "(none)"
        return (
            f"<current_prompt>\n{template.template}\n</current_prompt>\n\n"
            f"<critique>\n{critique}\n</critique>\n\n"
            f"Placeholders that must all stay: {keys}\n"
            "Write the improved template between <prompt> and </prompt>."
        )

    async def _complete(self, model: str, api_base: Optional[str], system: str, user: str, temperature: float) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        if self.async_openai_client is not None:
            reply = await self.async_openai_client.chat.completions.create(
                model=model, messages=messages, temperature=temperature, timeout=self.llm_timeout
            )
            text = reply.choices[0].message.content
            if not text:
                raise RuntimeError(f"{model} returned an empty reply")
            return str(text)
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        kwargs: dict[str, Any] = {}
        if api_base:
            kwargs["api_base"] = api_base
        api_key = self.api_key or ("unused" if api_base else None)
        if api_key:
            kwargs["api_key"] = api_key
        response = await litellm.acompletion(
            model=model,
            messages=messages,
            temperature=temperature,
            timeout=self.llm_timeout,
            num_retries=2,
            **kwargs,
        )
        content = response.choices[0].message.content
        if not content:
            raise RuntimeError(f"{model} returned an empty reply")
        return str(content)
