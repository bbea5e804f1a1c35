"""The one protocol the learner uses to hand new weights to whatever serves the agents.

``await engine.publish(version, weights)`` returns once the engine serves ``version``: requests
that were already generating finish on the weights they started with; every request accepted
afterwards uses the new ones. ``weights`` is a CPU state dict (tensor names as in
``model.state_dict()``) or a path to a ``.safetensors`` file / ``save_pretrained`` folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Protocol, Union, runtime_checkable

import torch

Weights = Union[Mapping[str, torch.Tensor], Path, str]


@runtime_checkable
class InferenceEngine(Protocol):
    #: OpenAI-compatible base URL agents use (ends with ``/v1``)
    endpoint: str
    #: the model name to put in requests
    model_name: str

    async def publish(self, version: int, weights: Weights) -> None: ...

    async def close(self) -> None: ...
