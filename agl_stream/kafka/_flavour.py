"""Which broker is at the other end: Apache Kafka (or any cluster that keeps the protocol's promises), or Tansu.

The local fallback broker, Tansu 0.6, reports a partition's end offset too low when its last batch holds
several records, and answers a waiting fetch only when its wait runs out. The few workarounds for that
run only where :func:`is_tansu` says so; everywhere else the broker's own answers are used as they are.
"""

from __future__ import annotations

from aiokafka.admin import AIOKafkaAdminClient

from agl_stream.config import Settings
from agl_stream.kafka._options import connection_options
from agl_stream.kafka._producer import start_with_retry

#: Tansu's cluster id unless started with another one (``agl_stream.broker`` starts it with its default)
TANSU_CLUSTER_ID = "tansu_cluster"


async def is_tansu(settings: Settings, timeout: float = 30.0) -> bool:
    """Whether the cluster at ``settings.kafka_bootstrap`` is Tansu (by its cluster id; one admin round trip)."""
    admin = AIOKafkaAdminClient(**connection_options(settings), request_timeout_ms=15_000)
    await start_with_retry(admin, "admin (broker kind)", timeout)
    try:
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()
    return cluster.get("cluster_id") == TANSU_CLUSTER_ID
