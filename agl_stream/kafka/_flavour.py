"""Which broker is at the other end: Apache Kafka (or any cluster that keeps the protocol's promises), or Tansu.

The local fallback broker, Tansu 0.6, reports a partition's end offset too low when its last batch holds
several records, and answers a waiting fetch only when its wait runs out. The few workarounds for that
run only where :func:`is_tansu` says so; everywhere else the broker's own answers are used as they are.
"""

from __future__ import annotations

from typing import Optional

from aiokafka.admin import AIOKafkaAdminClient

from agl_stream.config import Settings
from agl_stream.kafka._options import KAFKA_HOP_FETCH_WAIT_MS, LOW_LATENCY_FETCH_WAIT_MS, connection_options
from agl_stream.kafka._producer import start_with_retry

#: Tansu's cluster id unless started with another one (``agl_stream.broker`` starts it with its default)
TANSU_CLUSTER_ID = "tansu_cluster"

#: per bootstrap: whether it is Tansu (a broker does not change kind under one address)
_kinds: dict[str, bool] = {}


async def is_tansu(settings: Settings, timeout: float = 30.0) -> bool:
    """Whether the cluster at ``settings.kafka_bootstrap`` is Tansu (by its cluster id; one admin round trip)."""
    admin = AIOKafkaAdminClient(**connection_options(settings), request_timeout_ms=15_000)
    await start_with_retry(admin, "admin (broker kind)", timeout)
    try:
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()
    return cluster.get("cluster_id") == TANSU_CLUSTER_ID


async def hop_fetch_wait_ms(settings: Settings, bootstrap: Optional[str] = None) -> int:
    """``fetch_max_wait_ms`` for a consumer something waits on: ``AGL_KAFKA_HOP_FETCH_WAIT_MS`` when set, else
    :data:`LOW_LATENCY_FETCH_WAIT_MS` on Tansu and :data:`KAFKA_HOP_FETCH_WAIT_MS` elsewhere.

    The broker's kind is asked once per process and bootstrap (consumers starting together may each ask once);
    a question that fails raises and is asked again by the next consumer."""
    if settings.kafka_hop_fetch_wait_ms is not None:
        return settings.kafka_hop_fetch_wait_ms
    target = settings if bootstrap is None else settings.with_values(kafka_bootstrap=bootstrap)
    key = target.kafka_bootstrap or ""
    if key not in _kinds:
        _kinds[key] = await is_tansu(target)
    return LOW_LATENCY_FETCH_WAIT_MS if _kinds[key] else KAFKA_HOP_FETCH_WAIT_MS
