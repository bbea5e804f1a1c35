"""Prometheus metrics of the ingest servers (one set, labelled by server: ``otlp``, ``proxy`` or ``store``).

Under ``uvicorn --workers N`` every worker is its own process with its own counters; when
``PROMETHEUS_MULTIPROC_DIR`` is set (the ``agl-stream ingest`` commands set it for N > 1) the
``/metrics`` answer aggregates all workers through prometheus-client's multiprocess collector,
so a scrape that lands on any worker sees the whole server.
"""

from __future__ import annotations

import os

from fastapi import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client import multiprocess

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUESTS = Counter(
    "agl_ingest_requests_total", "HTTP requests answered, by server, route and status code", ["server", "route", "code"]
)
REQUEST_LATENCY = Histogram(
    "agl_ingest_request_latency_seconds",
    "time to answer a request, by server and route template",
    ["server", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
SPANS_ACCEPTED = Counter("agl_ingest_spans_accepted_total", "spans acknowledged by the broker", ["server"])
SPANS_REJECTED = Counter(
    "agl_ingest_spans_rejected_total", "spans refused (not produced), by reason code", ["server", "reason"]
)
SPANS_TRUNCATED = Counter(
    "agl_ingest_spans_truncated_total", "spans produced with their largest values cut to fit the broker limit", ["server"]
)
PRODUCE_LATENCY = Histogram(
    "agl_ingest_produce_latency_seconds",
    "time from handing a request's spans to the producer until the broker acknowledged all of them",
    ["server"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
SPAN_READS = Counter(
    "agl_store_span_reads_total",
    "query_spans answers of the store front door by source: recent (its span feed), clickhouse, and "
    "recent_not_caught_up (read from ClickHouse: the feed held the rollout but had not read far enough in time)",
    ["source"],
)
BACKEND_LATENCY = Histogram(
    "agl_ingest_backend_latency_seconds",
    "LLM backend call duration seen by the proxy (until the last token for streams)",
    ["model", "outcome"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
)


def metrics_response() -> Response:
    """The exposition text of this process, or of all workers in multiprocess mode."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
