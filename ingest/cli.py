"""``agl-stream ingest otlp|proxy``: run a front door under uvicorn (one or several workers).

Flags become ``AGL_*`` environment variables before uvicorn starts, because every worker is a
fresh process that builds its app from the environment (``app_from_env`` factories). Secrets are
never flags (they would show in ``ps``): the client token comes from ``AGL_INGEST_TOKEN`` and a
backend key from ``AGL_INGEST_BACKEND_API_KEY`` or the litellm config file.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import typer

from agl_stream.config import Settings
from agl_stream_ingest.metrics import MULTIPROC_ENV
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.proxy.config import BACKEND_KEY_ENV, ProxyConfig

app = typer.Typer(no_args_is_help=True, help="Network front doors that turn outside traffic into topic records.")
logger = logging.getLogger(__name__)

BootstrapOpt = typer.Option(None, "--bootstrap", "-b", envvar="AGL_KAFKA_BOOTSTRAP", help="Kafka host:port")
HostOpt = typer.Option("127.0.0.1", "--host", help="interface to bind (127.0.0.1 = this machine only)")
WorkersOpt = typer.Option(1, "--workers", "-w", min=1, help="uvicorn worker processes")
MaxBodyOpt = typer.Option(None, "--max-body-bytes", help="413 above this many bytes (default 16 MiB)")
TimeoutOpt = typer.Option(None, "--request-timeout", help="seconds for the body / the whole backend call")
ProduceTimeoutOpt = typer.Option(None, "--produce-timeout", help="seconds to wait for the broker's ack (then 503)")


def _serve(factory: str, host: str, port: int, workers: int, env: dict[str, str], graceful_s: float) -> None:
    from agl_stream.service import StopDeadline, serve_workers, stop_with_parent
    from agl_stream_ingest.stopping import WORKER_STOP_ENV, stop_timeout

    os.environ.update(env)
    # started by a supervisor: stop, bounded, when it dies (uvicorn owns the signal handlers here)
    stop_with_parent(StopDeadline(stop_timeout(graceful_s), name="ingest"))
    if workers > 1:
        os.environ[WORKER_STOP_ENV] = str(stop_timeout(graceful_s))  # each worker: the same with uvicorn's manager
    multiproc_dir: Optional[str] = None
    if workers > 1 and not os.environ.get(MULTIPROC_ENV):
        multiproc_dir = tempfile.mkdtemp(prefix="agl-ingest-metrics-")
        os.environ[MULTIPROC_ENV] = multiproc_dir  # /metrics then sums all workers
    if host not in ("127.0.0.1", "localhost", "::1") and not os.environ.get("AGL_INGEST_TOKEN"):
        logger.warning("binding %s without AGL_INGEST_TOKEN: anyone who can reach this port can write spans", host)
    try:
        # uvicorn's manager (it owns SIGINT/SIGTERM here), one worker or many: in-flight requests get
        # graceful_s + 5, then the producers flush; no access lines (they would carry rollout ids only)
        serve_workers(factory, host, port, workers, graceful_s=int(graceful_s) + 5,
                      log_level=logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower())  # fmt: skip
    finally:
        if multiproc_dir:
            shutil.rmtree(multiproc_dir, ignore_errors=True)


def _common(bootstrap: Optional[str], max_body: Optional[int], timeout: Optional[float],
            produce_timeout: Optional[float]) -> tuple[dict[str, str], IngestOptions]:
    settings = Settings.from_env(kafka_bootstrap=bootstrap)
    if not settings.kafka_bootstrap:
        typer.echo("no broker: pass --bootstrap or set AGL_KAFKA_BOOTSTRAP (start one with `agl-stream broker`)", err=True)
        raise typer.Exit(2)
    options = IngestOptions.from_env(max_body_bytes=max_body, request_timeout=timeout, produce_timeout=produce_timeout)
    env = {"AGL_KAFKA_BOOTSTRAP": settings.kafka_bootstrap}
    env.update({k: v for k, v in options.to_env().items() if k != "AGL_INGEST_TOKEN"})
    return env, options


@app.command("otlp")
def otlp(
    bootstrap: Optional[str] = BootstrapOpt,
    host: str = HostOpt,
    port: int = typer.Option(4318, "--port", "-p", help="OTLP/HTTP's standard port"),
    workers: int = WorkersOpt,
    max_body_bytes: Optional[int] = MaxBodyOpt,
    request_timeout: Optional[float] = TimeoutOpt,
    produce_timeout: Optional[float] = ProduceTimeoutOpt,
) -> None:
    """OTLP/HTTP trace receiver: POST /v1/traces (protobuf or JSON) -> agl.spans."""
    env, options = _common(bootstrap, max_body_bytes, request_timeout, produce_timeout)
    _serve("agl_stream_ingest.otlp.app:app_from_env", host, port, workers, env, options.produce_timeout)


@app.command("proxy")
def proxy(
    config: Optional[Path] = typer.Option(None, "--config", "-c", exists=True, dir_okay=False,
                                          help="litellm-style YAML/JSON with a model_list"),
    backend: list[str] = typer.Option([], "--backend", help="NAME=URL of an OpenAI-compatible server (repeatable)"),
    logprobs: Optional[int] = typer.Option(None, "--logprobs", help="always request logprobs (k alternatives)"),
    no_token_ids: bool = typer.Option(False, "--no-token-ids", help="do not ask backends for return_token_ids"),
    allow_untracked: bool = typer.Option(False, "--allow-untracked",
                                         help="serve calls without rollout/attempt ids (unrecorded) instead of 400"),
    bootstrap: Optional[str] = BootstrapOpt,
    host: str = HostOpt,
    port: int = typer.Option(4000, "--port", "-p"),
    workers: int = WorkersOpt,
    max_body_bytes: Optional[int] = MaxBodyOpt,
    request_timeout: Optional[float] = TimeoutOpt,
    produce_timeout: Optional[float] = ProduceTimeoutOpt,
) -> None:
    """LLM proxy (litellm): OpenAI routes + /rollout/{rid}/attempt/{aid}/v1/..., one span per call."""
    if (config is None) == (not backend):
        typer.echo("give either --config FILE or one or more --backend NAME=URL", err=True)
        raise typer.Exit(2)
    overrides = {"logprobs": logprobs, "return_token_ids": False if no_token_ids else None,
                 "require_ids": False if allow_untracked else None}
    if config is not None:
        proxy_config = ProxyConfig.from_file(config, **overrides)
    else:
        proxy_config = ProxyConfig.from_backends(backend, api_key=os.environ.get(BACKEND_KEY_ENV), **overrides)
    env, options = _common(bootstrap, max_body_bytes, request_timeout, produce_timeout)
    env.update(proxy_config.to_env())
    _serve("agl_stream_ingest.proxy.app:app_from_env", host, port, workers, env, max(options.request_timeout, options.produce_timeout))


@app.command("store")
def store(
    bootstrap: Optional[str] = BootstrapOpt,
    clickhouse_dsn: Optional[str] = typer.Option(
        None, "--clickhouse-dsn", envvar="AGL_CLICKHOUSE_DSN",
        help="where query_spans reads (default: the local embedded engine, through its SQL door)"),
    host: str = HostOpt,
    port: int = typer.Option(4747, "--port", "-p", help="upstream `agl store`'s default port"),
    workers: int = WorkersOpt,
    span_counts: bool = typer.Option(
        True, "--span-counts/--no-span-counts",
        help="report the spans a replica accepted with an attempt it handed out; turn off when a balancer "
             "may spread one runner's calls over several replicas (consumers then wait their grace period)"),
    max_body_bytes: Optional[int] = MaxBodyOpt,
    request_timeout: Optional[float] = TimeoutOpt,
    produce_timeout: Optional[float] = ProduceTimeoutOpt,
) -> None:
    """Upstream's store REST API (/v1/agl/..., OTLP /v1/traces): upstream clients and runners, unchanged."""
    from agl_stream_ingest.store.app import SPAN_COUNTS_ENV

    env, options = _common(bootstrap, max_body_bytes, request_timeout, produce_timeout)
    if clickhouse_dsn:
        env["AGL_CLICKHOUSE_DSN"] = clickhouse_dsn
    env[SPAN_COUNTS_ENV] = "1" if span_counts else "0"
    _serve("agl_stream_ingest.store.app:app_from_env", host, port, workers, env, options.produce_timeout)
