"""``agl-stream data|train|evaluate|model``: the training service from the shell, with the Client's settings.

Every command reads the server from ``--server-url`` / ``AGL_SERVER_URL`` and the token from
``--token`` / ``AGL_SERVER_TOKEN``. Exit codes: 0 done, 1 the server refused or failed (its message
on stderr), 2 bad arguments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from agl_stream.config import Settings
from agl_stream.training_service.client import Client
from agl_stream.training_service.types import TrainingServiceError

DEFAULT_URL = Settings.model_fields["server_url"].default

data = typer.Typer(no_args_is_help=True, help="Upload and list datasets on the training server.")
jobs = typer.Typer(no_args_is_help=True, help="List, stop and read the results of the training server's jobs.")
model = typer.Typer(no_args_is_help=True, help="List checkpoints and download the trained model.")

ServerUrl = typer.Option(None, "--server-url", help=f"the training server (env: AGL_SERVER_URL; default: {DEFAULT_URL})",
                         show_default=False)  # fmt: skip
Token = typer.Option(None, "--token", help="its bearer token (env: AGL_SERVER_TOKEN)", show_default=False)
Timeout = typer.Option(300.0, "--timeout", help="seconds per request")
Retries = typer.Option(3, "--max-retries", help="retries of a request the server could not answer")
VerifySsl = typer.Option(True, "--verify-ssl/--no-verify-ssl", help="check the server's TLS certificate")


def _client(url: Optional[str], token: Optional[str], timeout: float, retries: int, verify: bool) -> Client:
    settings = Settings.from_env(server_url=url, server_token=token)
    return Client(settings.server_url, timeout=timeout, max_retries=retries, verify_ssl=verify, token=settings.server_token)


def _run(action: Callable[[], Any]) -> Any:
    """Run a client call; a refusal becomes one line on stderr and exit code 1."""
    try:
        return action()
    except TrainingServiceError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    except (FileExistsError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


def _agent(path: str) -> Any:
    from agl_stream.runner.loader import load_object

    try:
        func = load_object(path)
    except (ValueError, ImportError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--agent") from None
    if not callable(func):
        raise typer.BadParameter(f"{path} is not callable", param_hint="--agent")
    return func


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=1, default=str))


@data.command("upload")
def upload(
    train_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="JSONL: question, optional ground_truth, any fields"),
    test_file: Optional[Path] = typer.Option(None, "--test", exists=True, dir_okay=False, help="held-out JSONL"),
    data_id: Optional[str] = typer.Option(None, "--data-id", help="name it (default: the server picks one)"),
    server_url: Optional[str] = ServerUrl, token: Optional[str] = Token, timeout: float = Timeout, retries: int = Retries,
    verify: bool = VerifySsl,
) -> None:  # fmt: skip
    """Upload a dataset; prints its data_id."""
    with _client(server_url, token, timeout, retries, verify) as client:
        typer.echo(_run(lambda: client.upload_data(train_file, test_file, data_id)))


@data.command("list")
def list_data(server_url: Optional[str] = ServerUrl, token: Optional[str] = Token, timeout: float = Timeout, retries: int = Retries,
              verify: bool = VerifySsl) -> None:  # fmt: skip
    """The complete uploads, oldest first, as JSON."""
    with _client(server_url, token, timeout, retries, verify) as client:
        _echo_json([d.model_dump() for d in _run(client.list_data)])


def train(
    agent: str = typer.Option(..., "--agent", help="module:function (or file.py:function), agent_func(resource, task) -> float"),
    data_id: Optional[str] = typer.Option(None, "--data-id", help="default: the latest upload"),
    nworkers: int = typer.Option(1, "--nworkers", min=1, help="runner processes on this machine"),
    epochs: int = typer.Option(1, "--epochs", min=1),
    batch_size: int = typer.Option(2, "--batch-size", min=1, help="tasks per learner step"),
    group_size: Optional[int] = typer.Option(None, "--group-size", min=1, help="answers per task (the GRPO group)"),
    eval_interval: Optional[int] = typer.Option(None, "--eval-interval", min=1, help="evaluate the test split every N steps"),
    checkpoint_dir: Optional[str] = typer.Option(None, "--checkpoint-dir", help="under the server's checkpoint folder"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", min=1),
    output: Optional[Path] = typer.Option(None, "--output", help="write the TrainingResult JSON here (default: stdout)"),
    server_url: Optional[str] = ServerUrl, token: Optional[str] = Token, timeout: float = Timeout, retries: int = Retries,
    verify: bool = VerifySsl,
) -> None:  # fmt: skip
    """Train on an uploaded dataset with the agent running here; prints the TrainingResult."""
    func = _agent(agent)
    with _client(server_url, token, timeout, retries, verify) as client:
        result = _run(lambda: client.train(func, nworkers=nworkers, epochs=epochs, batch_size=batch_size, data_id=data_id,
                                           checkpoint_dir=checkpoint_dir, eval_interval=eval_interval,
                                           group_size=group_size, max_steps=max_steps))  # fmt: skip
    text = result.model_dump_json(indent=1)
    output.write_text(text + "\n") if output else typer.echo(text)
    if result.state != "succeeded":
        raise typer.Exit(1)


def evaluate(
    agent: str = typer.Option(..., "--agent", help="module:function, agent_func(resource, task) -> float"),
    test_file: Optional[Path] = typer.Option(None, "--test-file", exists=True, dir_okay=False, help="default: the upload's test split"),
    checkpoint: str = typer.Option("latest", "--checkpoint", help="'latest', a name from `model list`, or 'base'"),
    data_id: Optional[str] = typer.Option(None, "--data-id"),
    nworkers: int = typer.Option(1, "--nworkers", min=1),
    success_threshold: float = typer.Option(1.0, "--success-threshold", help="a reward at least this counts as right"),
    server_url: Optional[str] = ServerUrl, token: Optional[str] = Token, timeout: float = Timeout, retries: int = Retries,
    verify: bool = VerifySsl,
) -> None:  # fmt: skip
    """Evaluate a checkpoint's weights with the agent running here; prints the EvalResult."""
    func = _agent(agent)
    with _client(server_url, token, timeout, retries, verify) as client:
        result = _run(lambda: client.evaluate(func, test_file, None if checkpoint == "base" else checkpoint, nworkers,
                                              data_id=data_id, success_threshold=success_threshold))  # fmt: skip
    typer.echo(result.model_dump_json(indent=1))


@model.command("list")
def list_checkpoints(job_id: Optional[str] = typer.Option(None, "--job-id"), server_url: Optional[str] = ServerUrl,
                     token: Optional[str] = Token, timeout: float = Timeout, retries: int = Retries,
                     verify: bool = VerifySsl) -> None:  # fmt: skip
    """Checkpoints on the server, oldest first, as JSON."""
    with _client(server_url, token, timeout, retries, verify) as client:
        _echo_json([c.model_dump() for c in _run(lambda: client.list_checkpoints(job_id))])


@model.command("download")
def download(
    output_dir: Path = typer.Argument(..., help="a new (or empty) folder"),
    checkpoint: str = typer.Option("latest", "--checkpoint"),
    format: str = typer.Option("huggingface", "--format", help="huggingface, safetensors or onnx"),
    overwrite: bool = typer.Option(False, "--overwrite", help="replace a non-empty output_dir"),
    server_url: Optional[str] = ServerUrl, token: Optional[str] = Token, timeout: float = Timeout, retries: int = Retries,
    verify: bool = VerifySsl,
) -> None:  # fmt: skip
    """Download a checkpoint as a model folder (transformers' from_pretrained loads the huggingface format)."""
    if format not in ("huggingface", "safetensors", "onnx"):
        raise typer.BadParameter(f"unknown format {format!r}; choose huggingface, safetensors or onnx", param_hint="--format")
    with _client(server_url, token, timeout, retries, verify) as client:
        typer.echo(_run(lambda: client.download_model(output_dir, checkpoint, format, overwrite=overwrite)))


@jobs.command("list")
def list_jobs(server_url: Optional[str] = ServerUrl, token: Optional[str] = Token, timeout: float = Timeout, retries: int = Retries,
              verify: bool = VerifySsl) -> None:  # fmt: skip
    """Every job, oldest first, as JSON."""
    with _client(server_url, token, timeout, retries, verify) as client:
        _echo_json([j.model_dump(exclude={"cluster"}) for j in _run(client.list_jobs)])


@jobs.command("stop")
def stop_job(job_id: str = typer.Argument(...), server_url: Optional[str] = ServerUrl, token: Optional[str] = Token,
             timeout: float = Timeout, retries: int = Retries, verify: bool = VerifySsl) -> None:  # fmt: skip
    """Stop a running job (what Ctrl-C in `agl-stream train` does); prints its status."""
    with _client(server_url, token, timeout, retries, verify) as client:
        _echo_json(_run(lambda: client.stop(job_id)).model_dump(exclude={"cluster"}))


@jobs.command("result")
def job_result(job_id: str = typer.Argument(...), server_url: Optional[str] = ServerUrl, token: Optional[str] = Token,
               timeout: float = Timeout, retries: int = Retries, verify: bool = VerifySsl) -> None:  # fmt: skip
    """A finished job's TrainingResult or EvalResult, as JSON."""
    with _client(server_url, token, timeout, retries, verify) as client:
        _echo_json(_run(lambda: client.result(job_id)))
