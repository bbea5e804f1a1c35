"""Deprecated alias of :mod:`agl_stream.emitter`'s reward functions (upstream's ``agentlightning.reward``)."""

import warnings
from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr
from agl_stream.emitter.reward import (  # noqa: F401
    emit_reward,
    find_final_reward,
    find_reward_spans,
    get_reward_value,
    get_rewards_from_span,
    is_reward_span,
)

warnings.warn("agl_stream.reward is deprecated. Please use agl_stream.emitter instead.", DeprecationWarning, stacklevel=2)

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
