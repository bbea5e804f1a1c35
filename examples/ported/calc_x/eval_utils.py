"""Compare the agent's answer with the ground truth: upstream's ``eval_utils`` names, agl-stream's code.

Upstream's version (adapted from Calc-X's ``gadgets/metrics.py``) parses both sides with sympy and
accepts a relative error of 1e-2, because Calc-X results are often fractions shown rounded
(``2/3 = around 0.666667``). sympy is not in the frameworks side venv the agent runs in, so numbers
are read here with a small arithmetic parser over exact fractions (``2/3``, ``0.5``, ``(1/4) * 8``,
``1,200``), and :func:`evaluate` asks for the exact value: the shipped problems all have whole-number
answers, so ``24``, ``24.0`` and ``48/2`` are right and ``23.9`` is not. Option answers (``C``,
``(C)``) are compared as letters, as upstream.
"""

from __future__ import annotations

import ast
import math
import re
import string
from fractions import Fraction
from typing import Optional, Union

#: upstream passes 1e-2 (Calc-X's rounded answers); the shipped results are whole numbers: exact match
REL_TOL = 0.0
_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b}  # fmt: skip


def normalize_option(option: str) -> str:
    """``"  (A)  "`` -> ``"A"``."""
    return re.sub(r"(\s+|\(|\))", "", option)


def is_option_result(result: str) -> bool:
    """Whether the ground truth is a multiple-choice letter rather than a number."""
    return normalize_option(result) in list(string.ascii_letters)


def _number(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_number(node.left), _number(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exponent = _number(node.left), _number(node.right)
        if exponent.denominator != 1 or abs(exponent) > 64:
            raise ValueError("only small whole exponents are evaluated")
        return base ** int(exponent)
    raise ValueError(f"not arithmetic: {ast.dump(node)}")


def float_eval(input_str: str) -> Fraction:
    """The exact value of an arithmetic answer; raises ``ValueError`` when it is not one.

    Upstream returns a float from sympy; a fraction keeps ``48/2 == 24`` exact."""
    if " = around " in input_str:
        input_str = input_str.split(" = around ")[0]
    text = input_str.strip().rstrip(".").replace("$", "").replace("^", "**")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)  # 1,200 -> 1200
    try:
        tree = ast.parse(text, mode="eval")
        return _number(tree.body)
    except (SyntaxError, ZeroDivisionError, OverflowError) as exc:
        raise ValueError(f"{input_str!r} is not a number: {exc}") from exc


def scalar_are_results_same(pred_result: Optional[str], true_result: Optional[str], rel_tol: float) -> bool:
    """Upstream's comparison: equal text, the same option letter, or numbers within ``rel_tol``."""
    pred = str(pred_result) if pred_result is not None else ""
    true = str(true_result) if true_result is not None else ""
    if pred.strip() == true.strip():
        return True
    if is_option_result(true):
        return normalize_option(pred) == normalize_option(true)
    try:
        pred_value, true_value = float_eval(pred), float_eval(true)
    except ValueError:  # an answer that is not a number is simply wrong
        return False
    if rel_tol == 0:
        return pred_value == true_value
    return math.isclose(float(pred_value), float(true_value), rel_tol=rel_tol)


async def evaluate(prediction: Union[str, None], ground_truth: str) -> float:
    """The reward: 1.0 when the answer equals the ground truth (see :data:`REL_TOL`), else 0.0."""
    return float(scalar_are_results_same(prediction, ground_truth, REL_TOL))
