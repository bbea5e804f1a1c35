"""The search protocol a 135M model can follow, and the answer scoring (exact match and token F1).

SmolLM2's chat template has no tool calling, and the embedded engine's hermes-style tool calling
(``<tool_call>`` JSON, docs/frameworks.md) is more than a 135M model reliably writes, so the call
is a line of text, as in ``examples/calc_agent``: ``SEARCH <query>``. The agent runs the query
through the MCP ``retrieve`` tool and sends ``RESULTS`` (the passages) or ``ERROR`` (the tool's
error) back as the next user turn; the model then answers in a few words. A first reply without a
``SEARCH`` line is the answer itself.

Scoring follows the usual extractive-QA metrics (upstream's rag example rewarded F1 on MuSiQue):
answers are compared after lower-casing and removing punctuation, articles and extra spaces;
``correct`` (exact match) is the task success the evaluation reports, ``f1`` (token overlap) the
reward, which also pays a right answer wrapped in a sentence a little.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Optional

SEARCH = re.compile(r"^\s*SEARCH\s+(\S.*?)\s*$", re.MULTILINE)

SYSTEM_PROMPT = (
    "You answer questions about the island of Brannock. First search: reply SEARCH followed by the question. "
    "You get RESULTS back. Then reply with only the answer, copied from the results."
)
# Two worked episodes as earlier turns: the protocol, shown twice (their passages are not in the corpus).
FEW_SHOT = [
    {"role": "user", "content": "Who painted the ceiling of Lisk Chapel?"},
    {"role": "assistant", "content": "SEARCH Who painted the ceiling of Lisk Chapel?"},
    {"role": "user", "content": "RESULTS\n[1] Lisk Chapel: The ceiling of Lisk Chapel was painted by Tomas Wren in 1711."},
    {"role": "assistant", "content": "Tomas Wren"},
    {"role": "user", "content": "How many bells does Fernside Church have?"},
    {"role": "assistant", "content": "SEARCH How many bells does Fernside Church have?"},
    {"role": "user", "content": "RESULTS\n[1] Fernside Church: Fernside Church has six bells, cast in Lisk in 1820."},
    {"role": "assistant", "content": "six"},
]  # fmt: skip


def parse_search(reply: str) -> Optional[str]:
    """The query of the first ``SEARCH`` line, or None."""
    match = SEARCH.search(reply or "")
    return match.group(1) if match else None


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in (text or "").lower() if ch not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


@dataclass(frozen=True)
class EpisodeScore:
    f1: float  # the reward
    correct: float  # exact match: the task success
    searched: float  # the first reply was a SEARCH line (reported, never paid)
    retrieved: float  # ... whose results held the passage with the answer (reported)

    def as_rewards(self) -> dict[str, float]:
        return {"f1": self.f1, "correct": self.correct, "searched": self.searched, "retrieved": self.retrieved}


def score(final_reply: str, answer: str, *, searched: bool, results: Optional[str],
          title: Optional[str]) -> EpisodeScore:
    """``results``: the tool's text (None without a search or on a tool error); ``title``: the gold passage's."""
    retrieved = bool(results and title and f"] {title}:" in results)
    return EpisodeScore(f1(final_reply, answer), exact_match(final_reply, answer), float(searched), float(retrieved))
