"""Load the golden corpus and hold agl-stream's adapters to it (helpers for the parity tests).

Each case holds the spans as upstream's store kept them, the arrival orders to deliver them in,
and upstream's answers. :meth:`GoldenCase.delivered` gives the spans as a receiver would hold them
after one delivery; :func:`differences` runs every agl-stream derivation on spans and lists where
it departs from what upstream answered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Optional, Sequence

from agl_stream.adapter import LlmProxyTraceToTriplet, RewardMatchPolicy, TracerTraceToTriplet, TraceToMessages
from agl_stream import adapter, emitter
from agl_stream.types import Span, Triplet
from tests.agl_stream.adapter.golden.spec import CORPUS_PATH

PROXY_KEY = "proxy_triplets"


@lru_cache(maxsize=1)
def load_corpus() -> dict[str, Any]:
    return json.loads(CORPUS_PATH.read_text())


@dataclass(frozen=True)
class GoldenCase:
    data: dict[str, Any]

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def spans(self) -> list[Span]:
        """The spans as upstream's store returned them (its order, its sequence ids)."""
        return [Span.model_validate(s) for s in self.data["spans"]]

    @property
    def intrinsic(self) -> set[str]:
        """Span ids whose producer numbered them itself (the LLM proxy's spans)."""
        return set(self.data["intrinsic_sequence_span_ids"])

    def order(self, delivery: str) -> list[int]:
        return self.data["orders"][delivery.split("/")[0]]

    def keeps_sequence_ids(self, delivery: str) -> bool:
        return delivery.endswith("/sequence_ids")

    def delivered(self, delivery: str) -> list[Span]:
        """The spans in arrival order, numbered as a receiver numbers them: ids the sender supplied
        are kept (and move the attempt's counter up to them), the others get the next number."""
        spans = self.spans
        keep = self.keeps_sequence_ids(delivery)
        counter = 0
        arrived = []
        for i in self.order(delivery):
            span = spans[i]
            if keep or span.span_id in self.intrinsic:
                counter = max(counter, span.sequence_id)
                arrived.append(span)
            else:
                counter += 1
                arrived.append(span.model_copy(update={"sequence_id": counter}))
        return arrived

    def expected(self, key: str, delivery: Optional[str] = None) -> Any:
        """Upstream's answer for ``key``; for the proxy adapter, its answer for that delivery's numbering."""
        if key == PROXY_KEY and delivery is not None:
            return self.data["upstream_by_delivery"].get(delivery, {}).get(key, self.data["upstream"][key])
        return self.data["upstream"][key]


def golden_cases() -> list[GoldenCase]:
    return [GoldenCase(c) for c in load_corpus()["cases"]]


# ---------------------------------------------------------------------------------------------- views


def _logprob_values(entries: Any) -> Any:
    return [e["logprob"] for e in entries] if isinstance(entries, list) else entries


def upstream_triplet_view(body: dict[str, Any]) -> dict[str, Any]:
    """An upstream triplet body; its ``logprobs`` entries (OpenAI's dicts) reduced to their values,
    which is how agl-stream keeps them (the learner reads floats)."""
    view = json.loads(json.dumps(body))
    if "logprobs" in view["response"]:
        view["response"]["logprobs"] = _logprob_values(view["response"]["logprobs"])
    return view


def triplet_view(triplet: Triplet) -> dict[str, Any]:
    """The fields of an agl-stream triplet that upstream's triplets have (agl-stream adds more)."""
    response = {"token_ids": triplet.response.get("token_ids"), "raw_content": triplet.response.get("raw_content")}
    if "logprobs" in triplet.response:
        response["logprobs"] = triplet.response["logprobs"]
    view = {
        "prompt": {k: triplet.prompt.get(k) for k in ("token_ids", "raw_content", "image_urls")},
        "response": response,
        "metadata": {k: triplet.metadata.get(k) for k in ("request", "response", "response_id")},
    }
    return json.loads(json.dumps(view))


def proxy_view(triplet: Triplet) -> dict[str, Any]:
    return {
        "prompt": {"token_ids": triplet.prompt.get("token_ids")},
        "response": {"token_ids": triplet.response.get("token_ids")},
        "reward": triplet.reward,
        "metadata": {"response_id": triplet.metadata.get("response_id")},
    }


def _config_name(config: dict[str, Any]) -> str:
    return (f"TracerTraceToTriplet(reward_match={config['reward_match']}, agent_match={config['agent_match']!r}, "
            f"repair_hierarchy={config['repair_hierarchy']}, llm_call_match={config['llm_call_match']!r})")  # fmt: skip


def _tracer_rows(case: GoldenCase, config: dict[str, Any], spans: Sequence[Span]) -> tuple[list[Any], list[Any]]:
    adapter = TracerTraceToTriplet(
        repair_hierarchy=config["repair_hierarchy"],
        llm_call_match=config["llm_call_match"],
        agent_match=config["agent_match"],
        reward_match=RewardMatchPolicy(config["reward_match"]),
    )
    bodies = case.expected("triplet_bodies")
    expected = [(upstream_triplet_view(bodies[index]), reward, agent) for index, reward, agent in config["triplets"]]
    got = [(triplet_view(t), t.reward, t.metadata.get("agent_name")) for t in adapter.adapt(spans)]
    return expected, got


def differences(case: GoldenCase, spans: Sequence[Span], delivery: Optional[str] = None) -> list[str]:
    """Every derivation where agl-stream, given ``spans``, does not answer what upstream answered."""
    problems: list[str] = []

    def check(what: str, expected: Any, compute: Callable[[], Any]) -> None:
        try:
            got = compute()
        except Exception as exc:  # a crash is a difference too, reported with the others
            got = f"raised {type(exc).__name__}: {exc}"
        if got != expected:
            problems.append(f"{what}:\n    upstream  {expected!r}\n    agl-stream {got!r}")

    check("final reward (agl_stream.emitter)", case.expected("final_reward"), lambda: emitter.find_final_reward(spans))
    check("final reward (agl_stream.adapter)", case.expected("final_reward"), lambda: adapter.find_final_reward(spans))
    check("reward list", case.expected("reward_list"),
          lambda: [emitter.get_reward_value(s) for s in emitter.find_reward_spans(spans)])  # fmt: skip
    check("reward dimensions", case.expected("reward_dimensions"),
          lambda: [[r.model_dump() for r in emitter.get_rewards_from_span(s)]
                   for s in emitter.find_reward_spans(spans)])  # fmt: skip
    for config in case.expected("tracer_triplets"):
        expected, got = _tracer_rows(case, config, spans)
        if got != expected:
            problems.append(f"{_config_name(config)}:\n    upstream  {expected!r}\n    agl-stream {got!r}")
    check("LlmProxyTraceToTriplet", case.expected(PROXY_KEY, delivery),
          lambda: [proxy_view(t) for t in LlmProxyTraceToTriplet().adapt(spans)])  # fmt: skip
    messages = case.expected("messages")
    if isinstance(messages, dict) and "error" in messages:
        check("TraceToMessages (upstream raised)", True, lambda: _raises(lambda: TraceToMessages().adapt(spans)))
    else:
        check("TraceToMessages", messages, lambda: json.loads(json.dumps(TraceToMessages().adapt(spans))))
    return problems


def _raises(fn: Callable[[], Any]) -> bool:
    try:
        fn()
    except ValueError:
        return True
    return False
