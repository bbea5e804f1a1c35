"""The span -> triplet stream processor: one Trajectory on ``agl.triplets`` per finished attempt."""

from agl_stream_processors.triplets.buffer import AttemptBuffer, PendingAttempt, SpanOutcome
from agl_stream_processors.triplets.processor import TripletProcessor, TripletProcessorOptions

__all__ = ["AttemptBuffer", "PendingAttempt", "SpanOutcome", "TripletProcessor", "TripletProcessorOptions"]
