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

from agl_stream.config import Settings, env_name
from agl_stream_ingest.metrics import MULTIPROC_ENV
from agl_stream_ingest.proxy.config import ProxyConfig

app = typer.Typer(no_args_is_help=True, help="Network front doors that turn outside traffic into topic records.")
logger = logging.getLogger(__name__)

BootstrapOpt = typer.Option(None, "--bootstrap", "-b", help="Kafka host:port (env: AGL_KAFKA_BOOTSTRAP)")
HostOpt = typer.Option("127.0.0.1", "--host", help="interface to bind (127.0.0.1 = this machine only)")
WorkersOpt = typer.Option(1, "--workers", "-w", min=1, help="uvicorn worker processes")
MaxBodyOpt = typer.Option(None, "--max-body-bytes", help="413 above this many bytes (default 16 MiB)")
TimeoutOpt = typer.Option(None, "--request-timeout", help="seconds for the body / the whole backend call")
ProduceTimeoutOpt = typer.Option(None, "--produce-timeout", help="seconds to wait for the broker's ack (then 503)")


def _serve(factory: str, host: str, port: int, workers: int, settings: Settings, env: dict[str, str],
           graceful_s: float) -> None:  # fmt: skip
    from agl_stream.service import StopDeadline, serve_workers, stop_with_parent
    from agl_stream_ingest.stopping import stop_timeout

    os.environ.update(env)
    # started by a supervisor: stop, bounded, when it dies (uvicorn owns the signal handlers here)
    stop_with_parent(StopDeadline(stop_timeout(graceful_s), name="ingest"))
    if workers > 1:  # each worker: the same with uvicorn's manager
        os.environ[env_name("ingest_worker_stop_s")] = str(stop_timeout(graceful_s))
    multiproc_dir: Optional[str] = None
    if workers > 1 and not os.environ.get(MULTIPROC_ENV):
        multiproc_dir = tempfile.mkdtemp(prefix="agl-ingest-metrics-")
        os.environ[MULTIPROC_ENV] = multiproc_dir  # /metrics then sums all workers
    if host not in ("127.0.0.1", "localhost", "::1") and not settings.ingest_token:
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
            produce_timeout: Optional[float], **more: object) -> tuple[Settings, dict[str, str]]:  # fmt: skip
    """The settings with the flags applied, and the variables that give every worker the same."""
    settings = Settings.from_env(kafka_bootstrap=bootstrap, ingest_max_body_bytes=max_body, ingest_request_timeout=timeout,
                                 ingest_produce_timeout=produce_timeout, **more)  # fmt: skip
    if not settings.kafka_bootstrap:
        typer.echo("no broker: pass --bootstrap or set AGL_KAFKA_BOOTSTRAP (start one with `agl-stream broker`)", err=True)
        raise typer.Exit(2)
    return settings, settings.to_env(always=("kafka_bootstrap",))


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
    settings, env = _common(bootstrap, max_body_bytes, request_timeout, produce_timeout)
    _serve("agl_stream_ingest.otlp.app:app_from_env", host, port, workers, settings, env, settings.ingest_produce_timeout)


@app.command("proxy")
def proxy(
    config: Optional[Path] = typer.Option(None, "--config", "-c", exists=True, dir_okay=False,
                                          help="litellm-style YAML/JSON with a model_list"),
    backend: list[str] = typer.Option([], "--backend", help="NAME=URL of an OpenAI-compatible server (repeatable)"),
    logprobs: Optional[int] = typer.Option(None, "--logprobs", help="always request logprobs (k alternatives)"),
    no_token_ids: bool = typer.Option(False, "--no-token-ids", help="do not ask backends for return_token_ids"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", min=1, help="with --backend: the most tokens one call may generate (a larger max_tokens is lowered; in a --config file: model_info.max_tokens)"),
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
    settings, env = _common(bootstrap, max_body_bytes, request_timeout, produce_timeout)
    if config is not None:
        proxy_config = ProxyConfig.from_file(config, **overrides)
    else:
        proxy_config = ProxyConfig.from_backends(backend, api_key=settings.ingest_backend_api_key, max_tokens=max_tokens,
                                                 **overrides)  # fmt: skip
    env.update(proxy_config.to_env())
    _serve("agl_stream_ingest.proxy.app:app_from_env", host, port, workers, settings, env,
           max(settings.ingest_request_timeout, settings.ingest_produce_timeout))  # fmt: skip


@app.command("store")
def store(
    bootstrap: Optional[str] = BootstrapOpt,
    clickhouse_dsn: Optional[str] = typer.Option(
        None, "--clickhouse-dsn",
        help="where query_spans reads (env: AGL_CLICKHOUSE_DSN; default: the local embedded engine, through its SQL door)"),
    host: str = HostOpt,
    port: int = typer.Option(4747, "--port", "-p", help="upstream `agl store`'s default port"),
    workers: int = WorkersOpt,
    span_counts: Optional[bool] = typer.Option(
        None, "--span-counts/--no-span-counts",
        help="report the spans a replica accepted with an attempt it handed out; turn off when a balancer "
             "may spread one runner's calls over several replicas (consumers then wait their grace period)"),
    recent_spans_mb: Optional[int] = typer.Option(
        None, "--recent-spans-mb", min=0,
        help="query_spans of recent rollouts from agl.spans as read, without ClickHouse: MiB of spans held per worker "
             "(env: AGL_STORE_RECENT_SPANS_MB; default 256; 0: always ClickHouse)"),
    recent_rollouts: Optional[int] = typer.Option(
        None, "--recent-rollouts", min=0,
        help="finished rollouts each worker holds besides the live ones; older ones are read from ClickHouse "
             "(env: AGL_STORE_RECENT_ROLLOUTS; default 50000; 0: all)"),
    max_body_bytes: Optional[int] = MaxBodyOpt,
    request_timeout: Optional[float] = TimeoutOpt,
    produce_timeout: Optional[float] = ProduceTimeoutOpt,
) -> None:
    """Upstream's store REST API (/v1/agl/..., OTLP /v1/traces): upstream clients and runners, unchanged."""
    settings, env = _common(bootstrap, max_body_bytes, request_timeout, produce_timeout, clickhouse_dsn=clickhouse_dsn,
                            store_span_counts=span_counts, store_recent_spans_mb=recent_spans_mb,
                            store_recent_rollouts=recent_rollouts)  # fmt: skip
    _serve("agl_stream_ingest.store.app:app_from_env", host, port, workers, settings, env, settings.ingest_produce_timeout)
