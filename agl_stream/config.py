"""One settings object for every service, read from ``AGL_*`` environment variables and flags.

Each field ``foo_bar`` is read from ``AGL_FOO_BAR``; explicit keyword overrides (CLI flags) win over
the environment. Bad values raise :class:`SettingsError` naming the variable and what is accepted.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agl_stream._porting import module_getattr
from agl_stream.env_var import parse_bool

ENV_PREFIX = "AGL_"

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
Role = Literal["algorithm", "runner", "both"]


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names the env var."""


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Kafka. No bootstrap means "start a local broker" where a service is allowed to: Apache Kafka where
    # Java 17+ is here (its jars fetched once with Maven), else Tansu (agl_stream.broker).
    kafka_bootstrap: Optional[str] = Field(default=None, description="host:port[,host:port]; unset = local broker")
    local_broker: Optional[Literal["kafka", "tansu"]] = Field(
        default=None, description="the local broker; unset = Apache Kafka where it can run, else Tansu"
    )
    kafka_home: Optional[Path] = Field(default=None, description="the local Apache Kafka's jars; unset = user cache")
    local_kafka_full_jit: bool = Field(default=False, description="the local Apache Kafka's JVM uses C2 too (default: C1 only)")
    tansu_binary: Optional[Path] = Field(default=None, description="the Tansu broker binary; unset = the one installed")
    broker_port: Optional[int] = Field(default=None, ge=0, le=65535, description="`agl-stream broker`: client port; unset = a free one")
    broker_data_dir: Optional[Path] = Field(default=None, description="`agl-stream broker`: its log folder; unset = a temporary one")
    kafka_security_protocol: SecurityProtocol = Field(default="PLAINTEXT", description="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    kafka_sasl_mechanism: Optional[SaslMechanism] = Field(default=None, description="PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER")
    kafka_sasl_username: Optional[str] = Field(default=None, description="SASL user")
    kafka_sasl_password: Optional[str] = Field(default=None, repr=False, description="SASL password (a secret)")
    kafka_ssl_cafile: Optional[Path] = Field(default=None, description="CA bundle for SSL")
    kafka_ssl_certfile: Optional[Path] = Field(default=None, description="client certificate for SSL")
    kafka_ssl_keyfile: Optional[Path] = Field(default=None, description="client key for SSL")
    kafka_client_id: str = Field(default="agl-stream", description="client id the brokers see")
    kafka_session_timeout_ms: int = Field(default=10_000, ge=1_000, description="consumer group session timeout")
    # How long a fetch on a hop something waits on (a rollout's status, a dequeue, an attempt's triplets) may
    # wait at the broker. Apache Kafka answers a waiting fetch as soon as a record arrives, so the wait only
    # sets how often an idle consumer asks again; Tansu answers only when it runs out (agl_stream.kafka.hop_fetch_wait_ms).
    kafka_hop_fetch_wait_ms: Optional[int] = Field(
        default=None, ge=10, le=30_000, description="latency-critical consumers' fetch wait; unset = 500 (Kafka), 100 (Tansu)"
    )
    kafka_compression: Optional[Literal["gzip", "snappy", "lz4", "zstd"]] = Field(
        default=None, description="producers' compression; unset = none"
    )
    # Idempotent producers (no duplicate from a producer's own retries). Off by default: aiokafka 0.14's
    # idempotent producer does not survive a partition leader's failover (an OutOfOrderSequenceNumber
    # ends its sender task and every later send fails; seen killing a node of a three-node cluster), and
    # Tansu refuses them. Delivery stays at-least-once with idempotent sinks (docs/architecture.md).
    kafka_idempotence: bool = Field(default=False, description="idempotent producers (see docs/architecture.md)")
    # Kafka transactions for the triplet processor: its trajectories and the offsets of the spans and
    # events they came from commit together, and every consumer reads committed records only. Off by
    # default: evaluated against the sinks' deduplication in docs/architecture.md ("Exactly once"), it
    # adds server CPU and keeps the dedup (the ClickHouse hop is not transactional). Apache Kafka only.
    kafka_transactions: bool = Field(default=False, description="exactly-once processing (Apache Kafka only)")
    topic_prefix: str = Field(default="agl", pattern=r"^[A-Za-z0-9._-]+$", description="topics are <prefix>.<name>")
    partitions: int = Field(default=4, ge=1, le=1024, description="partitions of rollout-keyed topics")
    replication_factor: int = Field(default=1, ge=1, description="replicas of every topic (3 on a cluster)")
    # "local": the topic settings of a run on this machine (agl_stream_topics.catalog.LOCAL_PROFILE: small
    # segments, compaction within minutes, a day's retention); the local stack sets it for its own broker.
    topic_profile: Literal["cluster", "local"] = Field(default="cluster", description="topic settings: cluster or local")

    # Storage.
    data_dir: Path = Field(default_factory=lambda: Path.cwd() / ".agl", description="local state; default ./.agl")
    clickhouse_dsn: Optional[str] = Field(default=None, description="chdb:///abs/path or http(s)://user:pass@host:8123/db")
    # The embedded engine (chdb) only: a server configures itself. See agl_stream_processors.clickhouse.engine.
    clickhouse_max_memory_mb: int = Field(
        default=512, ge=0, description="embedded engine: max_server_memory_usage in MiB; 0 = ClickHouse's (90% of RAM)"
    )
    clickhouse_engine_settings: Optional[str] = Field(
        default=None, description="embedded engine: settings it starts with, name=value[,name=value]; they win"
    )
    clickhouse_failpoint: Optional[Path] = Field(
        default=None, description="fault injection: ClickHouse calls fail while this file exists (tests)"
    )

    # Process roles (upstream's AGL_CURRENT_ROLE) and logging.
    current_role: Role = Field(default="both", description="algorithm, runner or both (upstream's)")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(default="INFO", description="DEBUG, INFO, WARNING or ERROR")
    # The interpreter runner processes start with: a venv whose agent framework cannot install beside the
    # stack's pins (the frameworks side venv of `make frameworks-venv`); unset = the interpreter running now.
    runner_python: Optional[Path] = Field(default=None, description="python for agent runner processes")
    # Set by a starter for the processes it starts (agl_stream.service): they stop when it dies.
    stop_with_parent: bool = Field(default=False, description="stop when the parent process dies (set by starters)")
    # The services' event loop and HTTP parser (uvicorn's --loop and --http): C implementations where installed.
    event_loop: Literal["auto", "asyncio", "uvloop"] = Field(
        default="auto", description="services' event loop: auto (uvloop where installed), asyncio or uvloop"
    )
    http_parser: Literal["auto", "h11", "httptools"] = Field(
        default="auto", description="HTTP servers' parser: auto (httptools where installed), h11 or httptools"
    )

    # Agents' tracing (the SDK in the agent's process) and instrumentation switches.
    span_export: Literal["kafka", "otlp"] = Field(default="kafka", description="spans go to agl.spans, or to OTLP/HTTP")
    span_buffer: int = Field(default=50_000, ge=1, description="spans held between the agent and the exporter")
    span_overflow: Literal["block", "drop"] = Field(default="block", description="a full span buffer blocks or drops")
    otlp_endpoint: Optional[str] = Field(default=None, description="OTLP/HTTP traces URL, e.g. http://host:4318/v1/traces")
    instrument: bool = Field(default=True, description="0 turns every library instrumentation off")
    instrument_openai: bool = Field(default=True, description="trace the openai SDK")
    instrument_langchain: bool = Field(default=True, description="trace LangChain")
    instrument_mcp: bool = Field(default=True, description="trace MCP clients")
    instrument_litellm: bool = Field(default=True, description="trace the litellm SDK")
    instrument_anthropic: bool = Field(default=True, description="trace the anthropic SDK")
    instrument_openai_agents: bool = Field(default=True, description="trace the OpenAI Agents SDK")
    instrument_autogen: bool = Field(default=True, description="trace AutoGen")
    instrument_crewai: bool = Field(default=True, description="trace CrewAI")
    request_token_ids: bool = Field(default=True, description="ask model servers for token ids")
    emitter_debug: bool = Field(default=False, description="log every emitted object (upstream's)")
    managed_store: bool = Field(default=True, description="upstream's store server switch; nothing reads it here")

    # Services' addresses and secrets; a command's flags win over these. Secrets are never flags.
    server_host: str = Field(default="127.0.0.1", description="training server: address to listen on")
    server_port: int = Field(default=8181, ge=0, le=65535, description="training server: port (0: a free one)")
    server_url: str = Field(default="http://127.0.0.1:8181", description="training server: where its clients reach it")
    server_token: Optional[str] = Field(default=None, repr=False, description="training server: bearer token (a secret)")
    dashboard_host: str = Field(default="127.0.0.1", description="dashboard: address to bind")
    dashboard_port: int = Field(default=4747, ge=0, le=65535, description="dashboard: port (0: a free one)")
    dashboard_token: Optional[str] = Field(default=None, repr=False, description="dashboard: its token; unset = random")
    sql_door_host: str = Field(default="127.0.0.1", description="SQL door: address to bind")
    sql_door_port: int = Field(default=0, ge=0, le=65535, description="SQL door: port (0: a free one)")
    sql_door_token: Optional[str] = Field(default=None, repr=False, description="SQL door: its token; unset = random")
    ingest_token: Optional[str] = Field(default=None, repr=False, description="front doors: bearer token clients send")
    attempt_key_secret: Optional[str] = Field(default=None, repr=False, description="controller and proxy: signs per-attempt keys; unset = none")
    ingest_backend_api_key: Optional[str] = Field(default=None, repr=False, description="LLM proxy: the backends' key")
    ingest_max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, description="front doors: 413 above this")
    ingest_request_timeout: float = Field(default=60.0, gt=0, description="front doors: a body / a backend call")
    ingest_produce_timeout: float = Field(default=30.0, gt=0, description="front doors: 503 when the broker is slower")
    ingest_proxy_config: Optional[str] = Field(default=None, description="LLM proxy: its config as JSON (set by its CLI)")
    ingest_worker_stop_s: Optional[float] = Field(default=None, gt=0, description="front doors' workers: stop bound (set by the CLI)")
    store_span_counts: bool = Field(default=True, description="store front door: count spans per attempt")
    store_recent_rollouts: int = Field(default=50_000, ge=0, description="store clients: finished rollouts held in memory besides the live ones (older: read from ClickHouse); 0 = all")
    store_recent_spans_mb: int = Field(default=256, ge=0, description="store front door: spans of recent rollouts held in memory, MiB; 0 = off")
    controller_proxy_url: str = Field(default="http://127.0.0.1:4000", description="controller: the LLM proxy its agents call")
    controller_logs_dir: Optional[Path] = Field(default=None, description="controller: attempts' output; unset = <data dir>/controller")

    # The learner and the algorithms.
    model_cache: Optional[Path] = Field(default=None, description="where models are cached; unset = the user cache")
    apo_model: str = Field(default="openai/gpt-4o-mini", description="APO: the model that writes prompts (litellm name)")
    apo_api_base: Optional[str] = Field(default=None, description="APO: that model's base URL")
    apo_api_key: Optional[str] = Field(default=None, repr=False, description="APO: that model's key (else OPENAI_API_KEY)")

    @field_validator("kafka_bootstrap")
    @classmethod
    def _check_bootstrap(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return None
        hosts = [h.strip() for h in value.split(",") if h.strip()]
        for host in hosts:
            name, sep, port = host.rpartition(":")
            if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{host!r} is not host:port")
        return ",".join(hosts)

    @field_validator("runner_python")
    @classmethod
    def _check_runner_python(cls, value: Optional[Path]) -> Optional[Path]:
        if value is not None and not (value.is_file() and os.access(value, os.X_OK)):
            raise ValueError(f"{value} is not an executable python")
        return value

    @field_validator("clickhouse_dsn")
    @classmethod
    def _check_dsn(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not value.startswith(("chdb://", "http://", "https://")):
            raise ValueError(f"{value!r} must start with chdb://, http:// or https://")
        return value

    @field_validator("clickhouse_engine_settings")
    @classmethod
    def _check_engine_settings(cls, value: Optional[str]) -> Optional[str]:
        if value is not None:
            parse_engine_settings(value)
        return value

    @model_validator(mode="after")
    def _check_security(self) -> "Settings":
        if self.kafka_security_protocol.startswith("SASL_"):
            if self.kafka_sasl_mechanism is None:
                raise ValueError("kafka_sasl_mechanism is required with a SASL_* security protocol")
            if self.kafka_sasl_mechanism != "OAUTHBEARER" and not (self.kafka_sasl_username and self.kafka_sasl_password):
                raise ValueError("kafka_sasl_username and kafka_sasl_password are required for SASL PLAIN/SCRAM")
        return self

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, **overrides: Any) -> "Settings":
        """Build settings from ``AGL_*`` variables, then apply non-None ``overrides`` (flags)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for name, field in cls.model_fields.items():
            var = ENV_PREFIX + name.upper()
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                continue
            values[name] = _coerce(var, raw.strip(), field.annotation)
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            raise SettingsError("invalid settings: " + _problems(exc)) from None

    def with_values(self, **values: Any) -> "Settings":
        """A copy with the non-None ``values`` applied and validated (a bad one raises :class:`SettingsError`)."""
        given = {k: v for k, v in values.items() if v is not None}
        try:
            return type(self).model_validate({**self.model_dump(exclude_unset=False), **given})
        except ValidationError as exc:
            raise SettingsError("invalid settings: " + _problems(exc)) from None

    def to_env(self, always: tuple[str, ...] = ()) -> dict[str, str]:
        """The ``AGL_*`` variables that rebuild these settings in a child process: every field given (by the
        environment or a flag) or away from its default, and those named in ``always``; unset ones are left out."""
        env: dict[str, str] = {}
        given = self.model_fields_set
        for name, field in type(self).model_fields.items():
            value = getattr(self, name)
            if value is None:
                continue
            if name not in always and name not in given and value == field.get_default(call_default_factory=True):
                continue
            env[env_name(name)] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return env

    # ---------------------------------------------------------------- derived values

    @property
    def effective_clickhouse_dsn(self) -> str:
        return self.clickhouse_dsn or f"chdb://{(self.data_dir / 'clickhouse').resolve()}"

    def topic(self, short_name: str) -> str:
        """Full topic name for a catalog short name, e.g. ``tasks`` -> ``agl.tasks``."""
        return f"{self.topic_prefix}.{short_name}"

    def group(self, role: str) -> str:
        """Consumer group of a role, namespaced like the topics, e.g. ``runners`` -> ``agl-runners``: two
        deployments with different prefixes on one cluster never share (and rebalance) a group."""
        return f"{self.topic_prefix}-{role}"


def _problems(exc: ValidationError) -> str:
    """A validation error's problems, each naming its variable."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = err["loc"][0] if err["loc"] else ""
        problems.append(f"{env_name(str(loc)) if loc else 'settings'}: {err['msg']}")
    return "; ".join(problems)


def env_name(field: str) -> str:
    """The variable a settings field is read from: ``data_dir`` -> ``AGL_DATA_DIR``."""
    return ENV_PREFIX + field.upper()


def settings_table() -> str:
    """Every ``AGL_*`` variable as a Markdown table (variable, default, meaning): docs/operations.md holds it."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "`./.agl`" if name == "data_dir" else field.get_default(call_default_factory=False)
        shown = "unset" if default is None else default if isinstance(default, str) and default.startswith("`") else f"`{default}`"
        if isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        rows.append(f"| `{env_name(name)}` | {shown} | {field.description} |")
    return "\n".join(rows) + "\n"


_SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def parse_engine_settings(text: str) -> dict[str, str]:
    """``name=value[,name=value]`` (``AGL_CLICKHOUSE_ENGINE_SETTINGS``) as a dict; ``ValueError`` says what is wrong."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not _SETTING_NAME.match(name) or not value:
            raise ValueError(f"{item!r} is not name=value (a ClickHouse setting name and its value)")
        out[name] = value
    return out


def _coerce(var: str, raw: str, annotation: Any) -> Any:
    """Env strings to field types; bools follow upstream's truthy/falsy rules."""
    target = annotation
    if get_origin(target) is not None and type(None) in get_args(target):
        target = next(a for a in get_args(target) if a is not type(None))
    if target is bool:
        try:
            return parse_bool(var, raw)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
    return raw  # pydantic validates and converts (ints, paths, literals)


def load_settings(**overrides: Any) -> Settings:
    return Settings.from_env(**overrides)


if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
