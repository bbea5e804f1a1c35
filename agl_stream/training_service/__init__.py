"""Training as a service: a client talks to ``agl-stream server`` by URL.

The surface of the third-party "Agent Lightning API Reference" (``Client(server_url)`` with
``upload_data``, ``train``, ``evaluate``, ``download_model``), built beside upstream's
``Trainer.fit``, never in place of it. The server owns the pipeline (broker, processors, learner,
inference engine); the client's machine runs the agent in runner processes, as ``Trainer.fit`` does.
Nothing here imports torch, faust or a web framework: httpx is the only transport.
"""

from agl_stream.training_service.client import Client
from agl_stream.training_service.types import (
    CheckpointInfo,
    ClusterInfo,
    DatasetInfo,
    EvalResult,
    JobStatus,
    Resource,
    StepPoint,
    Task,
    TrainingResult,
    TrainingServiceError,
)

__all__ = [
    "CheckpointInfo",
    "Client",
    "ClusterInfo",
    "DatasetInfo",
    "EvalResult",
    "JobStatus",
    "Resource",
    "StepPoint",
    "Task",
    "TrainingResult",
    "TrainingServiceError",
]
