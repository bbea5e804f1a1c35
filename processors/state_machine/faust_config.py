"""faust App settings derived from :class:`~agl_stream.config.Settings` (broker list, security, timeouts).

faust must never create or reconfigure the agl topics: they are created by ``agl_stream_topics.admin`` with the
catalog's partition counts (the changelog too), so ``topic_allow_declare`` is off.
"""

from __future__ import annotations

from typing import Any

from agl_stream.config import Settings


def broker_url(settings: Settings) -> str:
    if not settings.kafka_bootstrap:
        raise ValueError("the state machine needs Kafka: set AGL_KAFKA_BOOTSTRAP")
    return ";".join(f"kafka://{host}" for host in settings.kafka_bootstrap.split(","))


def broker_credentials(settings: Settings) -> Any:
    import faust
    from aiokafka.helpers import create_ssl_context

    protocol = settings.kafka_security_protocol
    ssl_context = None
    if protocol in ("SSL", "SASL_SSL"):
        ssl_context = create_ssl_context(
            cafile=str(settings.kafka_ssl_cafile) if settings.kafka_ssl_cafile else None,
            certfile=str(settings.kafka_ssl_certfile) if settings.kafka_ssl_certfile else None,
            keyfile=str(settings.kafka_ssl_keyfile) if settings.kafka_ssl_keyfile else None,
        )
    if protocol.startswith("SASL_"):
        if settings.kafka_sasl_mechanism == "OAUTHBEARER":
            raise ValueError("the faust-based state machine supports SASL PLAIN/SCRAM, not OAUTHBEARER")
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=settings.kafka_sasl_password,
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=ssl_context,
        )
    if ssl_context is not None:
        return faust.SSLCredentials(ssl_context)
    return None


def app_options(settings: Settings) -> dict[str, Any]:
    session = settings.kafka_session_timeout_ms / 1000
    return {
        "datadir": str(settings.data_dir / "faust"),  # faust writes a small per-app folder; keep it in the data dir
        "broker": broker_url(settings),
        "broker_credentials": broker_credentials(settings),
        "broker_client_id": f"{settings.kafka_client_id}-state-machine",
        "broker_session_timeout": session,
        "broker_heartbeat_interval": max(0.3, session / 4),
        "broker_rebalance_timeout": max(session, 10.0),
        "store": "memory://",
        "web_enabled": False,
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.replication_factor,
        "topic_allow_declare": False,
        "topic_disable_leader": True,
        "consumer_auto_offset_reset": "earliest",
        "producer_acks": -1,
        "key_serializer": "raw",
        "value_serializer": "raw",
        "table_standby_replicas": 0,
    }
