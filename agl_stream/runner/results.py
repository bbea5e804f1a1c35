"""Turn what a rollout returned into spans, with upstream's conversions and warnings.

* ``float``: a final reward span; ``int``/``bool`` are converted with a warning. If the agent
  already emitted a reward, both are kept and a warning says the reward may count twice.
* ``None``: nothing to do (the tracer captured the spans).
* a list of ``Span`` / ``SpanCoreFields`` / OTel ``ReadableSpan``: recorded as the attempt's spans.
* anything else: ``TypeError`` (the attempt fails).
"""

from __future__ import annotations

import logging
import numbers
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from agl_stream.emitter.reward import emit_reward
from agl_stream.tracer.base import Tracer
from agl_stream.tracer.exporter import AttemptCounters
from agl_stream.types import Span, SpanCoreFields

logger = logging.getLogger(__name__)

SPAN_TYPES = (Span, SpanCoreFields, ReadableSpan)


def record_result(result: Any, tracer: Tracer, state: AttemptCounters) -> None:
    """Record ``result`` in the active attempt (call inside its trace context)."""
    if result is None:
        return
    if isinstance(result, bool):
        logger.warning("rollout %s returned a bool (%s); converting it to a float reward", state.rollout_id, result)
        result = float(result)
    elif isinstance(result, numbers.Integral):
        logger.warning("rollout %s returned an int (%s); converting it to a float reward", state.rollout_id, result)
        result = float(result)
    if isinstance(result, numbers.Real):
        if state.reward_spans:
            logger.warning(
                "rollout %s both emitted a reward and returned one (%s): both are recorded, so the reward may be "
                "counted twice; either emit_reward or return it",
                state.rollout_id, result,
            )  # fmt: skip
        tracer.create_span(emit_reward(float(result), propagate=False))
        return
    if isinstance(result, (list, tuple)):
        wrong = [type(item).__name__ for item in result if not isinstance(item, SPAN_TYPES)]
        if wrong:
            raise TypeError(f"a rollout may return a list of spans only; got items of type {sorted(set(wrong))}")
        tracer.add_spans(list(result))
        return
    raise TypeError(f"a rollout must return None, a float or a list of spans, not {type(result).__name__}")
