"""A real ``agl-stream server start`` as a child process, for the tests (and the docs test)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

from agl_stream.service import ServiceProcess, agl_command

TOKEN = "test-token-not-secret"


class RunningServer:
    def __init__(self, data_dir: Path, model: str, *, token: str = TOKEN, client_timeout: Optional[float] = None) -> None:
        self.data_dir = data_dir
        self.client_timeout = client_timeout
        self.model = model
        self.token = token
        self.process: Optional[ServiceProcess] = None
        self.url = ""

    @property
    def env(self) -> dict[str, str]:
        return {"AGL_DATA_DIR": str(self.data_dir), "AGL_SERVER_TOKEN": self.token, "AGL_PARTITIONS": "2",
                "AGL_KAFKA_SESSION_TIMEOUT_MS": "6000", "HF_HUB_OFFLINE": "1"}  # fmt: skip

    def start(self, timeout: float = 180.0) -> "RunningServer":
        info = self.data_dir / "server" / "server.json"
        info.unlink(missing_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")} | self.env
        self.process = ServiceProcess("training-server", agl_command("server", "start", "--port", "0", "--model", self.model, *self._options()),
                                      env=env, log_path=self.data_dir.parent / "server.log")  # fmt: skip
        self.process.env = env
        self.process.start()
        deadline = time.monotonic() + timeout
        while not info.exists():
            self.process.check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the training server did not start in {timeout}s:\n{self.process.tail()}")
            time.sleep(0.2)
        self.url = json.loads(info.read_text())["url"]
        return self

    def _options(self) -> list[str]:
        return [] if self.client_timeout is None else ["--client-timeout", str(self.client_timeout)]

    def stop(self) -> Optional[int]:
        """SIGTERM, as a service manager stops it; it stops its broker and processors first."""
        code = self.process.stop(timeout=60) if self.process is not None else None
        self.process = None
        return code
