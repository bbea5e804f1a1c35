"""Start the pipeline, the job manager and the HTTP API; stop them in reverse on SIGINT/SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from agl_stream.config import Settings
from agl_stream.service import HttpHost, StopDeadline, bound_socket, stop_with_parent

logger = logging.getLogger(__name__)



@dataclass
class ServerOptions:
    host: str = "127.0.0.1"  # loopback by default, like the other network doors
    port: int = 8181  # 0: a free one (server.json says which)
    token: Optional[str] = None  # None: AGL_SERVER_TOKEN, else a random one written to <root>/token (0600)
    trainer_config: dict[str, Any] = field(default_factory=dict)  # trainer.yaml keys over the server's defaults
    client_timeout: float = 300.0  # a running job whose client is silent this long is stopped


def server_root(settings: Settings) -> Path:
    return settings.data_dir / "server"


def _secret_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)


def resolve_token(root: Path, given: Optional[str]) -> str:
    """``given`` (already ``AGL_SERVER_TOKEN`` where the caller read the settings), else a random one in ``root/token``."""
    token = given
    if token:
        return token
    token = secrets.token_urlsafe(24)
    _secret_file(root / "token", token + "\n")
    return token


#: the training server's whole stop: its jobs, then the local stack (processors and broker, each bounded)
SERVER_STOP_TIMEOUT_S = 90.0


async def run_server(settings: Settings, options: ServerOptions) -> None:

    from agl_stream.client import StoreClient
    from agl_stream.client.clickhouse_reader import ClickHouseReader
    from agl_stream.execution.local_stack import LocalStack
    from agl_stream.kafka import RecordProducer

    from agl_stream_trainer.server.app import create_app
    from agl_stream_trainer.server.datasets import DatasetStore
    from agl_stream_trainer.server.jobs import DEFAULT_TRAINER_CONFIG, JobManager, deep_merge

    deadline = StopDeadline(SERVER_STOP_TIMEOUT_S, name="training server")
    stop_with_parent(deadline)
    root = server_root(settings)
    root.mkdir(parents=True, exist_ok=True)
    token = resolve_token(root, options.token or settings.server_token)
    sock = bound_socket(options.host, options.port)  # first: a taken port fails before anything starts
    stack = LocalStack(settings, log_dir=settings.data_dir / "logs")
    producer = client = reader = jobs = None
    try:
        settings = await stack.start()
        producer = await RecordProducer(settings).start()
        client = await StoreClient(settings).start()
        reader = ClickHouseReader(settings.effective_clickhouse_dsn)
        datasets = DatasetStore(settings, producer, reader)
        jobs = JobManager(root, settings, client, datasets, reader, deep_merge(DEFAULT_TRAINER_CONFIG, options.trainer_config),
                          client_timeout=options.client_timeout)  # fmt: skip
        jobs.start_watchdog()
        app = create_app(datasets, jobs, token, root / "exports")
        server = HttpHost(app, options.host, name="training server", sock=sock)
        url = server.url
        _secret_file(root / "server.json", json.dumps({"url": url, "pid": os.getpid()}) + "\n")
        print(f"agl-stream server: {url} (token: {'AGL_SERVER_TOKEN' if options.token or settings.server_token else root / 'token'})",
              flush=True)  # fmt: skip
        await server.serve(deadline)  # SIGINT/SIGTERM: the server stops, then everything below
    finally:
        logger.info("stopping the training server")
        (root / "server.json").unlink(missing_ok=True)
        if jobs is not None:
            await jobs.close()
        if client is not None:
            await client.stop()
        if producer is not None:
            await producer.stop()
        if reader is not None:
            await reader.close()
        stack.stop()
        sock.close()
