"""Algorithms: the interface, the ``@algo`` decorator, ``Baseline``, and evaluation helpers.

Learning algorithms that need torch or an LLM client (RL/VERL, APO, SFT) live in the trainer
service package (``agl_stream_trainer``); ``agl_stream.APO`` / ``agl_stream.VERL`` load them on first
use, so this package stays light; ``agl_stream.algorithm.APO`` / ``.VERL`` (upstream's names here) too.
"""

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr
from agl_stream.algorithm.base import Algorithm, FunctionalAlgorithm, algo, build_component
from agl_stream.algorithm.baseline import Baseline, FastAlgorithm
from agl_stream.algorithm.results import RolloutResult, RolloutResults, rewards_of, run_dataset
from agl_stream.algorithm.stats import PairedComparison, paired_comparison, sign_test
from agl_stream.algorithm.success import SuccessReport, pass_at_k, success_report, succeeded

__all__ = [
    "Algorithm",
    "Baseline",
    "FastAlgorithm",
    "FunctionalAlgorithm",
    "PairedComparison",
    "RolloutResult",
    "RolloutResults",
    "SuccessReport",
    "algo",
    "build_component",
    "paired_comparison",
    "pass_at_k",
    "rewards_of",
    "run_dataset",
    "sign_test",
    "succeeded",
    "success_report",
]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
