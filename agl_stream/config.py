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
    kafka_security_protocol: SecurityProtocol = "PLAINTEXT"
    kafka_sasl_mechanism: Optional[SaslMechanism] = None
    kafka_sasl_username: Optional[str] = None
    kafka_sasl_password: Optional[str] = Field(default=None, repr=False)
    kafka_ssl_cafile: Optional[Path] = None
    kafka_ssl_certfile: Optional[Path] = None
    kafka_ssl_keyfile: Optional[Path] = None
    kafka_client_id: str = "agl-stream"
    kafka_session_timeout_ms: int = Field(default=10_000, ge=1_000)
    kafka_compression: Optional[Literal["gzip", "snappy", "lz4", "zstd"]] = None
    # Idempotent producers (no duplicate from a producer's own retries). Off by default: aiokafka 0.14's
    # idempotent producer does not survive a partition leader's failover (an OutOfOrderSequenceNumber
    # ends its sender task and every later send fails; seen killing a node of a three-node cluster), and
    # Tansu refuses them. Delivery stays at-least-once with idempotent sinks (docs/architecture.md).
    kafka_idempotence: bool = False
    # Kafka transactions for the triplet processor: its trajectories and the offsets of the spans and
    # events they came from commit together, and every consumer reads committed records only. Off by
    # default: evaluated against the sinks' deduplication in docs/architecture.md ("Exactly once"), it
    # adds server CPU and keeps the dedup (the ClickHouse hop is not transactional). Apache Kafka only.
    kafka_transactions: bool = False
    topic_prefix: str = Field(default="agl", pattern=r"^[A-Za-z0-9._-]+$")
    partitions: int = Field(default=4, ge=1, le=1024, description="partitions of rollout-keyed topics")
    replication_factor: int = Field(default=1, ge=1)
    # "local": the topic settings of a run on this machine (agl_stream_topics.catalog.LOCAL_PROFILE: small
    # segments, compaction within minutes, a day's retention); the local stack sets it for its own broker.
    topic_profile: Literal["cluster", "local"] = "cluster"

    # Storage.
    data_dir: Path = Field(default_factory=lambda: Path.cwd() / ".agl")
    clickhouse_dsn: Optional[str] = Field(default=None, description="chdb:///abs/path or http(s)://user:pass@host:8123/db")
    # The embedded engine (chdb) only: a server configures itself. See agl_stream_processors.clickhouse.engine.
    clickhouse_max_memory_mb: int = Field(
        default=512, ge=0, description="embedded engine: max_server_memory_usage in MiB; 0 = ClickHouse's (90% of RAM)"
    )
    clickhouse_engine_settings: Optional[str] = Field(
        default=None, description="embedded engine: settings it starts with, name=value[,name=value]; they win"
    )

    # Process roles (upstream's AGL_CURRENT_ROLE) and logging.
    current_role: Role = "both"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # The interpreter runner processes start with: a venv whose agent framework cannot install beside the
    # stack's pins (the frameworks side venv of `make frameworks-venv`); unset = the interpreter running now.
    runner_python: Optional[Path] = Field(default=None, description="python for agent runner processes")

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
            problems = []
            for err in exc.errors(include_url=False):
                loc = err["loc"][0] if err["loc"] else ""
                var = f"{ENV_PREFIX}{str(loc).upper()}" if loc else "settings"
                problems.append(f"{var}: {err['msg']}")
            raise SettingsError("invalid settings: " + "; ".join(problems)) from None

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
