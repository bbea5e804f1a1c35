"""``agl-stream server start``: the training server (``agl_stream.Client`` talks to it)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Optional

import typer

app = typer.Typer(no_args_is_help=True, help="The training server a Client (or agl-stream data/train/evaluate/model) talks to.")


@app.command("start")
def start(
    host: Optional[str] = typer.Option(
        None, "--host", help="address to listen on (env: AGL_SERVER_HOST; default: 127.0.0.1, loopback)"
    ),
    port: Optional[int] = typer.Option(
        None, "--port", help="0 picks a free port, written to <data dir>/server/server.json (env: AGL_SERVER_PORT; default: 8181)"
    ),
    model: Optional[str] = typer.Option(None, "--model", help="policy to train: smollm2, tiny, or a save_pretrained folder"),
    config: Optional[Path] = typer.Option(None, "--config", exists=True, dir_okay=False, help="trainer.yaml keys over the server's defaults"),
    data_dir: Optional[Path] = typer.Option(
        None, "--data-dir", help="datasets' engine, checkpoints, jobs (env: AGL_DATA_DIR; default: ./.agl)"
    ),
    client_timeout: float = typer.Option(300.0, "--client-timeout", min=1, help="stop a running job whose client is silent this many seconds"),
) -> None:
    """Start the pipeline (local broker, processors, embedded ClickHouse unless AGL_KAFKA_BOOTSTRAP is set) and serve
    the training API until Ctrl-C. The bearer token is AGL_SERVER_TOKEN, else a random one in <data dir>/server/token."""
    import yaml

    from agl_stream.config import Settings

    from agl_stream_trainer.server.runtime import ServerOptions, run_server

    trainer_config = (yaml.safe_load(config.read_text()) or {}) if config else {}
    if not isinstance(trainer_config, dict):
        raise typer.BadParameter(f"{config}: expected a mapping of trainer settings")
    if model:
        trainer_config["model"] = model
    settings = Settings.from_env(data_dir=data_dir, server_host=host, server_port=port)
    host, port = settings.server_host, settings.server_port
    try:
        asyncio.run(run_server(settings, ServerOptions(host=host, port=port, trainer_config=trainer_config,
                                                               client_timeout=client_timeout)))
    except OSError as exc:
        typer.echo(f"agl-stream server: cannot listen on {host}:{port}: {exc}", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        pass
