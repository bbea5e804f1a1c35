"""The span -> triplet stream processor: one Trajectory on ``agl.triplets`` per finished attempt."""

from processors.triplets.buffer import AttemptBuffer, PendingAttempt, SpanOutcome
from processors.triplets.processor import TripletProcessor, TripletProcessorOptions

__all__ = ["AttemptBuffer", "PendingAttempt", "SpanOutcome", "TripletProcessor", "TripletProcessorOptions"]
