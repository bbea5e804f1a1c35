"""Publishing a policy version: weights to the inference engine, then the announcement on ``agl.resources``.

Order matters: the engine serves the new version *before* the ``ResourcesUpdate`` says so, so a
runner that picks up the announcement never reaches an engine still serving older weights.
The record's ``LLM`` resource names the engine's endpoint, the model and the ``policy_version``;
it is written under the key ``resources_id`` and under ``latest`` (the topic is compacted).
The ``ResourcesUpdate.version`` of a publisher's records is the policy version (monotonic).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Optional

from agl_stream.config import Settings
from agl_stream.types import LLM, ResourcesUpdate

from agl_stream_trainer.engines.base import InferenceEngine, Weights
from agl_stream_trainer.proxy_pause import ProxyPause

logger = logging.getLogger(__name__)


@dataclass
class PublishResult:
    version: int
    update: ResourcesUpdate
    engine_seconds: float
    total_seconds: float


class WeightPublisher:
    def __init__(
        self,
        engine: InferenceEngine,
        producer: Any,  # agl_stream.kafka.RecordProducer (started)
        settings: Settings,
        *,
        resources_id: str = "policy",
        resource_name: str = "main_llm",
        sampling_parameters: Optional[dict[str, Any]] = None,
        extra_resources: Optional[dict[str, Any]] = None,
        proxy_pause: Optional[ProxyPause] = None,
    ) -> None:
        """``proxy_pause``: the LLM proxies to pause around each engine update (:mod:`.proxy_pause`)."""
        self.engine = engine
        self.proxy_pause = proxy_pause
        self.producer = producer
        self.settings = settings
        self.resources_id = resources_id
        self.resource_name = resource_name
        self.sampling_parameters = dict(sampling_parameters or {})
        self.extra_resources = dict(extra_resources or {})
        self.last: Optional[PublishResult] = None

    def resources_update(self, version: int) -> ResourcesUpdate:
        llm = LLM(
            endpoint=self.engine.endpoint,
            model=self.engine.model_name,
            sampling_parameters=self.sampling_parameters,
            policy_version=version,
        )
        return ResourcesUpdate(
            resources_id=self.resources_id,
            resources={**self.extra_resources, self.resource_name: llm},
            version=version,
        )

    async def announce(self, version: int) -> ResourcesUpdate:
        """Write the ResourcesUpdate for ``version`` (also used at start-up for the initial weights)."""
        update = self.resources_update(version)
        topic = self.settings.topic("resources")
        await self.producer.send_and_wait(topic, update, key=self.resources_id)
        await self.producer.send_and_wait(topic, update, key="latest")
        return update

    async def publish(self, version: int, weights: Weights) -> PublishResult:
        started = time.perf_counter()
        if self.proxy_pause is not None:
            async with self.proxy_pause.around():
                await self.engine.publish(version, weights)
        else:
            await self.engine.publish(version, weights)
        engine_seconds = time.perf_counter() - started
        update = await self.announce(version)
        result = PublishResult(version, update, engine_seconds, time.perf_counter() - started)
        self.last = result
        logger.info("published policy version %d (engine %.3fs, total %.3fs)", version, engine_seconds, result.total_seconds)
        return result
