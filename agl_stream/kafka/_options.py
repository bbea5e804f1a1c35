"""Translate :class:`~agl_stream.config.Settings` into aiokafka connection options (security included)."""

from __future__ import annotations

from typing import Any

from agl_stream.config import Settings


#: ``fetch_max_wait_ms`` of consumers on a latency-critical hop (an attempt's end -> its rollout's status and
#: triplet row). A fetch with nothing to return waits this long at most; the local Tansu broker answers
#: a waiting fetch only when its wait runs out (measured: 500 ms -> ~115 ms per hop, 100 ms -> ~15 ms),
#: and on Apache Kafka a shorter wait only costs a few more idle fetches.
LOW_LATENCY_FETCH_WAIT_MS = 100


def connection_options(settings: Settings, bootstrap: str | None = None) -> dict[str, Any]:
    """Keyword arguments shared by aiokafka producers, consumers and admin clients."""
    servers = bootstrap or settings.kafka_bootstrap
    if not servers:
        raise ValueError("no Kafka bootstrap servers: set AGL_KAFKA_BOOTSTRAP or start a local broker")
    options: dict[str, Any] = {
        "bootstrap_servers": servers,
        "client_id": settings.kafka_client_id,
        "security_protocol": settings.kafka_security_protocol,
    }
    if settings.kafka_security_protocol in ("SSL", "SASL_SSL"):
        from aiokafka.helpers import create_ssl_context

        options["ssl_context"] = create_ssl_context(
            cafile=str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None,
            certfile=str(settings.kafka_ssl_certfile) if settings.kafka_ssl_certfile else None,
            keyfile=str(settings.kafka_ssl_keyfile) if settings.kafka_ssl_keyfile else None,
        )
    if settings.kafka_security_protocol.startswith("SASL_"):
        options["sasl_mechanism"] = settings.kafka_sasl_mechanism
        options["sasl_plain_username"] = settings.kafka_sasl_username
        options["sasl_plain_password"] = settings.kafka_sasl_password
    return options
