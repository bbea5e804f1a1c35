"""The ``agl-stream`` command line.

Sub-command groups live with the service they drive (``topics/cli.py``, ``processors/cli.py``, ...)
and are registered here by dotted path, so ``agl_stream`` never imports a service package at import
time and a missing optional extra only disables its own commands, with a message saying which
extra to install.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Optional

import typer

from agl_stream.config import Settings, SettingsError

#: name -> ("module:attribute" of a typer.Typer or a function, help, pip extra that provides it)
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "broker": ("agl_stream.cli.broker:app", "Run the local broker (Apache Kafka, or Tansu without Java); broker install fetches Kafka.", "base"),
    "topics": ("agl_stream_topics.cli:app", "Create, list and describe the agl topics.", "base"),
    "ingest": ("agl_stream_ingest.cli:app", "OTLP/HTTP trace receiver and LLM proxy feeding agl.spans.", "ingest"),
    "runner": ("agl_stream.runner.cli:runner", "Run an agent on agl.tasks (spans to agl.spans).", "base"),
    "controller": ("agl_stream_controller.cli:controller", "Run any command once per attempt of agl.tasks (a rollout controller).", "base"),
    "clickhouse": ("agl_stream_processors.cli:clickhouse", "ClickHouse schema migrations and the Kafka -> ClickHouse sinks.", "processors"),
    "sql": ("agl_stream_processors.cli:sql", "Run SQL or a saved query on the agl ClickHouse tables.", "processors"),
    "replay": ("agl_stream_processors.cli:replay", "Re-derive triplets from stored spans with another adapter.", "processors"),
    "export": ("agl_stream_processors.export.cli:export", "Export the agl tables in other tools' shapes (S3 trajectories).", "processors"),
    "dashboard": ("agl_stream_processors.dashboard.cli:dashboard", "Serve the run dashboard (a local web page) over the agl tables.", "processors"),
    "processors": ("agl_stream_processors.service_cli:processors", "Run the stream processors (state machine, triplets, sinks) as one service.", "processors"),
    "trainer": ("agl_stream_trainer.cli:trainer", "Run the task scheduler and the learner (GRPO/PPO) as a service.", "trainer"),
    "data": ("agl_stream.training_service.cli:data", "Upload and list datasets on the training server.", "base"),
    "train": ("agl_stream.training_service.cli:train", "Train on the training server with an agent running here.", "base"),
    "evaluate": ("agl_stream.training_service.cli:evaluate", "Evaluate a checkpoint on the training server.", "base"),
    "jobs": ("agl_stream.training_service.cli:jobs", "List, stop and read the results of the training server's jobs.", "base"),
    "model": ("agl_stream.training_service.cli:model", "List checkpoints and download the trained model.", "base"),
    "server": ("agl_stream_trainer.server.cli:app", "The training server agl_stream.Client talks to (server start).", "trainer"),
    "serve": ("agl_stream_trainer.cli:serve", "Serve a transformers model on CPU with an OpenAI-compatible API.", "trainer"),
}

app = typer.Typer(
    name="agl-stream",
    help="agl-stream: train AI agents with RL over Kafka, faust and ClickHouse.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    log_level: Optional[str] = typer.Option(
        None, "--log-level", help="DEBUG, INFO, WARNING or ERROR (env: AGL_LOG_LEVEL; default: INFO)"
    ),
) -> None:
    if log_level is not None and log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise typer.BadParameter(f"unknown log level {log_level!r}")
    level = getattr(logging, Settings.from_env(log_level=log_level.upper() if log_level else None).log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("aiokafka", "kafka"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))


def _missing_extra(name: str, extra: str, error: Exception) -> typer.Typer:
    sub = typer.Typer(help=f"(unavailable: {error})")

    @sub.callback(invoke_without_command=True)
    def _unavailable() -> None:
        typer.echo(f"'agl-stream {name}' needs the '{extra}' extra: pip install 'agl-stream[{extra}]' ({error})", err=True)
        raise typer.Exit(2)

    return sub


def _register(target: typer.Typer, only: Optional[str] = None) -> None:
    for name, (path, help_text, extra) in SUBCOMMANDS.items():
        if only is not None and name != only:
            continue
        module_name, _, attr = path.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except ModuleNotFoundError as exc:
            target.add_typer(_missing_extra(name, extra, exc), name=name, help=help_text)
            continue
        if isinstance(obj, typer.Typer):
            target.add_typer(obj, name=name, help=help_text)
        else:
            target.command(name=name, help=help_text)(obj)


def main(argv: Optional[list[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    # Only import the group being run (keeps `agl-stream runner` free of processor/trainer imports).
    first = next((a for a in args if not a.startswith("-")), None)
    _register(app, only=first if first in SUBCOMMANDS else None)
    try:
        app(args=args, prog_name="agl-stream")
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    except ModuleNotFoundError as exc:
        # Service commands import their heavy dependencies when they run (``clickhouse migrate`` needs
        # clickhouse-connect and chdb): a plain ``pip install agl-stream`` has the command, not the engine.
        extra = SUBCOMMANDS[first][2] if first in SUBCOMMANDS else None
        if extra is None or extra == "base":
            raise
        typer.echo(f"error: 'agl-stream {first}' needs the '{extra}' extra: pip install 'agl-stream[{extra}]' ({exc})", err=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
