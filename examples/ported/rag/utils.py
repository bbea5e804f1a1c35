"""Answer scoring of Agent Lightning's rag example (``utils.py``): upstream's names, agl-stream's code.

Upstream's file holds many scoring helpers from earlier experiments; the example uses one,
:func:`compute_scores`: the text between the last ``<answer>`` and ``</answer>`` of the agent's final
output, compared with the ground truth by token F1 after the usual extractive-QA normalization
(lower case, no punctuation, no articles, single spaces). That F1 is the reward. An output without the
tags scores 0. :func:`exact_match_score` is what the training script reports as exact match.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Optional, Tuple

ANS_BEGIN = "<answer>"
ANS_END = "</answer>"
#: answers that only match themselves: a "yes" is not partly right about a "no"
_CLOSED = ("yes", "no", "noanswer")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower case, punctuation and articles removed, whitespace collapsed."""
    text = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def f1_score(prediction: str, ground_truth: str) -> Tuple[float, float, float]:
    """(F1, precision, recall) of the normalized tokens; all 0 for a wrong closed answer or no overlap."""
    pred, gold = normalize_answer(prediction), normalize_answer(ground_truth)
    if (pred in _CLOSED or gold in _CLOSED) and pred != gold:
        return 0.0, 0.0, 0.0
    pred_tokens, gold_tokens = pred.split(), gold.split()
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def exact_match_score(prediction: str, ground_truth: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(ground_truth)


def extract_answer(response: Optional[str]) -> str:
    """The text inside the last ``<answer>...</answer>`` pair; ``""`` when there is none."""
    if not response:
        return ""
    end = response.rfind(ANS_END)
    begin = response.rfind(ANS_BEGIN, 0, max(end, 0))
    return "" if end == -1 or begin == -1 else response[begin + len(ANS_BEGIN) : end]


def compute_scores(answer: Optional[str], ground_truth: str) -> float:
    """The reward: F1 of the tagged answer in the agent's final output against the ground truth."""
    f1, _precision, _recall = f1_score(extract_answer(answer), ground_truth)
    return f1
