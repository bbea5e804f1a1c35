"""Start the pipeline, the job manager and the HTTP API; stop them in reverse on SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from agl_stream.config import Settings
from agl_stream.service import StopDeadline, stop_with_parent

logger = logging.getLogger(__name__)

TOKEN_ENV = "AGL_SERVER_TOKEN"


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
    token = given or os.environ.get(TOKEN_ENV)
    if token:
        return token
    token = secrets.token_urlsafe(24)
    _secret_file(root / "token", token + "\n")
    return token


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


#: the training server's whole stop: its jobs, then the local stack (processors and broker, each bounded)
SERVER_STOP_TIMEOUT_S = 90.0


def _uvicorn_server(app: Any, deadline: StopDeadline) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn re-raises a captured SIGINT after its shutdown, which would skip ours (the broker and the
        processors would outlive the server): a signal here only asks it to stop (twice: at once)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            loop = asyncio.get_running_loop()

            def stop() -> None:
                deadline.arm()
                self.force_exit = self.should_exit
                self.should_exit = True

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop)
            try:
                yield
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)

    return Server(uvicorn.Config(app, log_level="warning", lifespan="off"))


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
    token = resolve_token(root, options.token)
    sock = bind(options.host, options.port)  # first: a taken port fails before anything starts
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
        host, port = sock.getsockname()[:2]
        url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"
        _secret_file(root / "server.json", json.dumps({"url": url, "pid": os.getpid()}) + "\n")
        print(f"agl-stream server: {url} (token: {'AGL_SERVER_TOKEN' if options.token or os.environ.get(TOKEN_ENV) else root / 'token'})",
              flush=True)  # fmt: skip
        await _uvicorn_server(app, deadline).serve(sockets=[sock])
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
