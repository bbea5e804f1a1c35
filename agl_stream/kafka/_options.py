"""Translate :class:`~agl_stream.config.Settings` into aiokafka connection options (security included)."""

from __future__ import annotations

from typing import Any

from agl_stream.config import Settings


#: ``fetch_max_wait_ms`` of consumers on a latency-critical hop (an attempt's end -> its rollout's status and
#: triplet row), on the Tansu fallback broker: Tansu answers a waiting fetch only when its wait runs out
#: (measured: 500 ms -> ~115 ms per hop, 100 ms -> ~15 ms). Consumers ask for it with ``latency_critical``
#: (or :func:`~agl_stream.kafka.hop_fetch_wait_ms`), which picks it only where the broker is Tansu.
LOW_LATENCY_FETCH_WAIT_MS = 100

#: the same on Apache Kafka (and any broker that answers a waiting fetch when a record arrives): the wait
#: costs no latency there, only sets how often an idle consumer asks again. 100 ms made the local broker
#: spend 0.15 of a core answering idle fetches on upstream's store benchmark (docs/performance.md).
KAFKA_HOP_FETCH_WAIT_MS = 500


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
