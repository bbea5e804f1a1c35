"""The client's runner processes: ``agl-stream runner`` against the server's broker, agent by components file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from agl_stream.config import Settings
from agl_stream.execution.components import write_components
from agl_stream.execution.local_stack import LocalStack
from agl_stream.training_service.types import ClusterInfo


class LocalRunners:
    def __init__(self, cluster: ClusterInfo, agent: Any, *, data_dir: Optional[Path] = None) -> None:
        overrides = {"kafka_bootstrap": cluster.kafka_bootstrap, "topic_prefix": cluster.topic_prefix,
                     "partitions": cluster.partitions, "data_dir": data_dir}  # fmt: skip
        self.settings = Settings.from_env(**overrides)
        self.agent = agent
        # a stack with a cluster configured starts nothing of its own: only the runners below
        self.stack = LocalStack(self.settings, processors=False, log_dir=self.settings.data_dir / "client-logs")
        self._components: Optional[Path] = None

    def start(self, nworkers: int, concurrency: int = 1) -> None:
        if nworkers < 1 or concurrency < 1:
            raise ValueError("nworkers and concurrency must be >= 1")
        self._components = write_components(self.settings.data_dir / "components", {"agent": self.agent})
        self.stack.start_runners(["--components", str(self._components)], nworkers, concurrency=concurrency)

    def check(self) -> None:
        """Raise ``ServiceCrashed`` (with the runners' last log lines) when they died."""
        self.stack.check()

    def stop(self) -> None:
        self.stack.stop()
        if self._components is not None:
            self._components.unlink(missing_ok=True)
            self._components = None
