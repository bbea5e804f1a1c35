"""Upstream's own store client against a store front door, over every route of upstream's server.

Runs with the side venv's python (agentlightning 0.3.0, never a dependency of agl-stream):
``python upstream_store_contract.py URL`` prints one JSON document: ``routes`` (every route of
upstream's ``LightningStoreServer``, read from an instance of it) and ``checks`` (route -> list of
failures, empty when the route behaved as upstream's). Writes go through
``agentlightning.LightningStoreClient`` where it has a method for the route, through plain HTTP where
it has none (the GET variants of the searches, the error answers), and spans through upstream's own
OTLP exporter, as upstream's runners send them.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from collections import defaultdict
from typing import Any, Awaitable, Callable

import aiohttp

import agentlightning as agl
from agentlightning.store.client_server import LightningStoreServer

URL = sys.argv[1]
API = URL + "/v1/agl"
failures: dict[str, list[str]] = defaultdict(list)
exercised: set[str] = set()


def route(method: str, path: str) -> str:
    key = f"{method} {path}"
    exercised.add(key)
    return key


def check(key: str, condition: bool, detail: str) -> None:
    if not condition:
        failures[key].append(detail)


def upstream_routes() -> list[str]:
    server = LightningStoreServer(agl.InMemoryLightningStore(), host="127.0.0.1", port=1)
    assert server.app is not None
    found = []
    for r in server.app.routes:
        path = getattr(r, "path", "")
        if path.startswith("/v1/"):
            for method in sorted(getattr(r, "methods", []) or []):
                found.append(f"{method} {path}")
    return sorted(found)


async def http(session: aiohttp.ClientSession, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    async with session.request(method, URL + path, **kwargs) as resp:
        text = await resp.text()
        try:
            return resp.status, json.loads(text) if text else None
        except ValueError:
            return resp.status, text


async def until(predicate: Callable[[], Awaitable[Any]], timeout: float = 60.0, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(every)


def otlp_export(rollout_id: str, attempt_id: str, names: list[str]) -> list[str]:
    """Spans through upstream's OtelTracer-style OTLP exporter aimed at the store's /v1/traces."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from agentlightning.utils.otlp import LightningStoreOTLPExporter

    exporter = LightningStoreOTLPExporter()
    exporter.enable_store_otlp(URL + "/v1/traces", rollout_id, attempt_id)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ids = []
    tracer = provider.get_tracer("contract")
    for name in names:
        with tracer.start_as_current_span(name, attributes={"task": name}) as span:
            ids.append(format(span.get_span_context().span_id, "016x"))
    provider.shutdown()
    return ids


async def main() -> None:
    store = agl.LightningStoreClient(URL, retry_delays=(0.5,), health_retry_delays=(0.2,))
    async with aiohttp.ClientSession() as session:
        key = route("GET", "/v1/agl/health")
        status, body = await http(session, "GET", "/v1/agl/health")
        check(key, status == 200 and body == {"status": "ok"}, f"{status} {body}")

        # resources
        key = route("POST", "/v1/agl/resources")
        first = await store.add_resources({"llm": agl.LLM(endpoint="http://localhost:1/v1", model="m0")})
        check(key, isinstance(first, agl.ResourcesUpdate) and first.resources["llm"].model == "m0", repr(first))
        key = route("POST", "/v1/agl/resources/{resources_id}")
        second = await store.update_resources(first.resources_id, {"llm": agl.LLM(endpoint="http://localhost:2/v1", model="m1")})
        check(key, second.resources_id == first.resources_id and second.version > first.version, repr(second))
        key = route("GET", "/v1/agl/resources/{resources_id}")
        got = await until(lambda: store.get_resources_by_id(first.resources_id))
        check(key, got is not None and got.resources["llm"].model == "m1", repr(got))
        check(key, await store.get_resources_by_id("rs-missing") is None, "unknown id should read None")
        key = route("GET", "/v1/agl/resources/latest")
        latest = await store.get_latest_resources()
        check(key, latest is not None and latest.resources_id == first.resources_id, repr(latest))
        key = route("GET", "/v1/agl/resources")
        page = await store.query_resources(resources_id=first.resources_id)
        check(key, len(page) == 1 and page.total == 1 and page[0].version == second.version, repr(page))
        status, body = await http(session, "GET", "/v1/agl/resources", params={"sort_by": "nope"})
        check(key, status == 400 and "Invalid sort_by" in body.get("detail", ""), f"{status} {body}")

        # rollouts and the queue
        key = route("POST", "/v1/agl/queues/rollouts/enqueue")
        one = await store.enqueue_rollout(input={"q": 1}, mode="train", resources_id=first.resources_id,
                                          metadata={"k": "v"})  # fmt: skip
        many = await store.enqueue_many_rollouts([agl.EnqueueRolloutRequest(input={"q": i}, mode="val") for i in (2, 3)])
        check(key, one.status == "queuing" and one.metadata == {"k": "v"} and len(many) == 2, repr((one, many)))
        key = route("GET", "/v1/agl/rollouts/{rollout_id}")
        read = await until(lambda: store.get_rollout_by_id(one.rollout_id))
        check(key, read is not None and read.rollout_id == one.rollout_id and read.input == {"q": 1}, repr(read))
        check(key, await store.get_rollout_by_id("ro-000000000000") is None, "unknown rollout should read None")

        key = route("POST", "/v1/agl/queues/rollouts/dequeue")
        wanted = {one.rollout_id, *(r.rollout_id for r in many)}
        claimed: list[agl.AttemptedRollout] = []

        async def claim() -> bool:
            claimed.extend(await store.dequeue_many_rollouts(limit=3, worker_id="contract-worker"))
            return wanted <= {t.rollout_id for t in claimed}

        await until(claim, timeout=90)
        check(key, wanted <= {t.rollout_id for t in claimed}, f"claimed {[t.rollout_id for t in claimed]}")
        check(key, all(t.attempt.worker_id == "contract-worker" and t.attempt.sequence_id == 1 for t in claimed), repr(claimed))
        check(key, await store.dequeue_rollout(worker_id="contract-worker") is None, "the queue should be empty")
        task = next(t for t in claimed if t.rollout_id == one.rollout_id)
        rid, aid = task.rollout_id, task.attempt.attempt_id

        key = route("POST", "/v1/agl/rollouts")
        started = await store.start_rollout(input={"q": "direct"}, mode="test", worker_id="contract-worker")
        check(key, isinstance(started, agl.AttemptedRollout) and started.status == "preparing", repr(started))

        # spans: sequence ids, the REST write, upstream's OTLP exporter
        key = route("POST", "/v1/agl/spans/next")
        seq = [await store.get_next_span_sequence_id(rid, aid) for _ in range(2)]
        check(key, seq[1] == seq[0] + 1, repr(seq))
        key = route("POST", "/v1/agl/spans")
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        with provider.get_tracer("contract").start_as_current_span("agentlightning.annotation") as otel_span:
            otel_span.set_attributes({"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.5})
        added = await store.add_otel_span(rid, aid, memory.get_finished_spans()[0])
        check(key, added is not None and added.sequence_id > seq[1], repr(added))
        again = await store.add_span(added) if added is not None else None
        check(key, again is None, f"a span added twice should answer null, got {again!r}")
        key = route("POST", "/v1/traces")
        otlp_ids = otlp_export(rid, aid, ["agent0", "final"])

        # attempts
        key = route("POST", "/v1/agl/rollouts/{rollout_id}/attempts/{attempt_id}")
        running = await store.update_attempt(rid, aid, worker_id="contract-worker")
        check(key, running.attempt_id == aid, repr(running))
        done = await store.update_attempt(rid, aid, status="succeeded")
        check(key, done.status == "succeeded", repr(done))

        key = route("POST", "/v1/agl/waits/rollouts")
        finished = await until(lambda: store.wait_for_rollouts(rollout_ids=[rid], timeout=0.0), timeout=60)
        check(key, [r.rollout_id for r in finished] == [rid] and finished[0].status == "succeeded", repr(finished))
        check(key, await store.wait_for_rollouts(rollout_ids=[many[0].rollout_id], timeout=0) == [], "a running rollout is not done")

        key = route("POST", "/v1/agl/spans/search")
        spans = await store.query_spans(rid, "latest")
        names = sorted(s.name for s in spans)
        check(key, names == sorted(["agentlightning.annotation", "agent0", "final"]), repr(names))
        check(key, {s.span_id for s in spans} >= set(otlp_ids), "the OTLP spans should be stored")
        check(key, agl.find_final_reward(list(spans)) == 1.5, "upstream's find_final_reward on the stored spans")
        check(key, [s.sequence_id for s in spans] == sorted(s.sequence_id for s in spans), "sorted by sequence_id")
        paged = await store.query_spans(rid, aid, name_contains="a", limit=1, offset=1, sort_by="name", sort_order="desc")
        check(key, paged.limit == 1 and paged.offset == 1 and paged.total == 3 and len(paged) == 1, repr(paged))
        key = route("GET", "/v1/agl/spans")
        status, body = await http(session, "GET", "/v1/agl/spans", params={"rollout_id": rid, "name": "final"})
        check(key, status == 200 and body["total"] == 1 and body["items"][0]["name"] == "final", f"{status} {body}")
        status, body = await http(session, "GET", "/v1/agl/spans", params={"rollout_id": rid, "limit": 0})
        check(key, status == 400 and "Limit" in body.get("detail", ""), f"{status} {body}")

        key = route("POST", "/v1/agl/rollouts/{rollout_id}/attempts")
        retry_of = many[0].rollout_id
        second_attempt = await store.start_attempt(retry_of, worker_id="contract-worker")
        check(key, second_attempt.attempt.sequence_id == 2 and second_attempt.rollout_id == retry_of, repr(second_attempt))
        key = route("POST", "/v1/agl/rollouts/{rollout_id}/attempts/search")

        async def both_attempts() -> Any:
            page = await store.query_attempts(retry_of)
            return page if len(page) == 2 else None

        attempts = await until(both_attempts)
        check(key, attempts is not None and [a.sequence_id for a in attempts] == [1, 2], repr(attempts))
        key = route("GET", "/v1/agl/rollouts/{rollout_id}/attempts")
        status, body = await http(session, "GET", f"/v1/agl/rollouts/{retry_of}/attempts", params={"sort_order": "desc", "limit": 1})
        check(key, status == 200 and body["total"] == 2 and body["items"][0]["sequence_id"] == 2, f"{status} {body}")
        key = route("GET", "/v1/agl/rollouts/{rollout_id}/attempts/latest")
        latest_attempt = await store.get_latest_attempt(retry_of)
        check(key, latest_attempt is not None and latest_attempt.attempt_id == second_attempt.attempt.attempt_id, repr(latest_attempt))

        key = route("POST", "/v1/agl/rollouts/search")
        found = await store.query_rollouts(rollout_id_in=[rid, retry_of], sort_by="rollout_id")
        check(key, [r.rollout_id for r in found] == sorted([rid, retry_of]) and found.total == 2, repr(found))
        succeeded = await store.query_rollouts(status_in=["succeeded"], rollout_id_in=[rid, retry_of])
        check(key, [r.rollout_id for r in succeeded] == [rid], repr(succeeded))
        check(key, isinstance(found[0], agl.AttemptedRollout), "rollouts with an attempt read as AttemptedRollout")
        key = route("GET", "/v1/agl/rollouts")
        status, body = await http(session, "GET", "/v1/agl/rollouts",
                                  params=[("rollout_id_in", rid), ("rollout_id_in", retry_of), ("limit", "1")])  # fmt: skip
        check(key, status == 200 and body["total"] == 2 and len(body["items"]) == 1, f"{status} {body}")
        status, body = await http(session, "GET", "/v1/agl/rollouts", params={"sort_order": "up"})
        check(key, status == 400 or status == 422, f"{status} {body}")

        key = route("POST", "/v1/agl/rollouts/{rollout_id}")
        cancelled = await store.update_rollout(many[1].rollout_id, status="cancelled")
        check(key, cancelled.status == "cancelled", repr(cancelled))
        try:
            await store.update_rollout(rid, input={"q": "changed"})
            check(key, False, "changing a rollout's input should be refused")
        except aiohttp.ClientResponseError as exc:
            check(key, exc.status == 400, f"refusal status {exc.status}")
        status, body = await http(session, "POST", f"/v1/agl/rollouts/{rid}", json={"input": {"q": "x"}})
        check(key, status == 400 and body.get("error_type") == "UnsupportedOnStream" and "instead" in body.get("detail", ""),
              f"{status} {body}")  # fmt: skip

        # workers
        key = route("POST", "/v1/agl/workers/{worker_id}")
        worker = await store.update_worker("contract-worker", {"cpu": 0.5})
        check(key, worker.worker_id == "contract-worker" and worker.heartbeat_stats == {"cpu": 0.5}, repr(worker))
        key = route("GET", "/v1/agl/workers/{worker_id}")
        read_worker = await until(lambda: store.get_worker_by_id("contract-worker"))
        check(key, read_worker is not None and read_worker.heartbeat_stats == {"cpu": 0.5}, repr(read_worker))
        check(key, await store.get_worker_by_id("nobody") is None, "unknown worker should read None")
        key = route("POST", "/v1/agl/workers/search")
        workers = await store.query_workers(worker_id_contains="contract")
        check(key, [w.worker_id for w in workers] == ["contract-worker"], repr(workers))
        key = route("GET", "/v1/agl/workers")
        status, body = await http(session, "GET", "/v1/agl/workers", params={"worker_id_contains": "contract"})
        check(key, status == 200 and body["total"] == 1, f"{status} {body}")

        key = route("GET", "/v1/agl/statistics")
        stats = await store.statistics()
        check(key, isinstance(stats, dict) and stats.get("total_rollouts", 0) >= 4, repr(stats))

        for signal in ("/v1/metrics", "/v1/logs", "/v1/development/profiles"):
            key = route("POST", signal)
            status, _ = await http(session, "POST", signal, data=b"")
            check(key, status == 501, f"{signal}: {status}")

    await store.close()


if __name__ == "__main__":
    error = None
    try:
        asyncio.run(main())
    except Exception:
        error = traceback.format_exc()
    print(json.dumps({"routes": upstream_routes(), "exercised": sorted(exercised), "failures": failures, "error": error}))
