"""``agl-stream trainer --config trainer.yaml`` and ``agl-stream serve --model PATH|smollm2|tiny``."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Optional

import typer

logger = logging.getLogger(__name__)


def trainer(
    config: Path = typer.Option(..., "--config", "-c", exists=True, dir_okay=False, help="trainer.yaml"),
    bootstrap: Optional[str] = typer.Option(None, "--bootstrap", help="Kafka host:port (env: AGL_KAFKA_BOOTSTRAP)"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="override max_steps"),
) -> None:
    """Run the task scheduler and the learner as one service."""
    from agl_stream.config import Settings

    from agl_stream_trainer.config import TrainerConfig
    from agl_stream_trainer.service import TrainerService

    cfg = TrainerConfig.from_yaml(config)
    if max_steps is not None:
        cfg = cfg.model_copy(update={"max_steps": max_steps})
    settings = Settings.from_env(kafka_bootstrap=bootstrap)
    from agl_stream.service import StopDeadline, stop_with_parent

    # no graceful stop: SIGTERM ends the learner, and a restart resumes from its last checkpoint; started by a
    # supervisor, it goes with it (and the deadline bounds an exit held up by a thread)
    stop_with_parent(StopDeadline(10.0, name="learner"))
    asyncio.run(TrainerService(settings, cfg).run())


def serve(
    model: str = typer.Option("smollm2", "--model", help="smollm2, tiny, or a save_pretrained folder"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    served_name: Optional[str] = typer.Option(None, "--served-model-name", help="model name in requests/responses"),
    max_batch_rows: int = typer.Option(16, "--max-batch-rows", help="sequences decoded together"),
    policy_version: int = typer.Option(0, "--policy-version", help="version reported for the initial weights"),
) -> None:
    """Serve a transformers model on CPU with an OpenAI-compatible API (+ in-place weight swaps)."""
    from agl_stream_trainer.engines.embedded import EmbeddedServer
    from agl_stream_trainer.engines.generation import Generator
    from agl_stream_trainer.models import load_model_and_tokenizer

    loaded, tokenizer, directory = load_model_and_tokenizer(model)
    name = served_name or (model if model in ("smollm2", "tiny") else Path(model).name)
    generator = Generator(loaded, tokenizer, policy_version=policy_version, max_batch_rows=max_batch_rows)
    server = EmbeddedServer(generator, name, host, port).start()
    typer.echo(f"serving {directory} as '{name}' at {server.base_url}/v1 (policy version {policy_version})")
    from agl_stream.service import StopDeadline, StopSignals

    stop = threading.Event()
    StopSignals(stop.set, StopDeadline(10.0, name="engine")).install()
    stop.wait()
    server.stop()
    generator.close()
