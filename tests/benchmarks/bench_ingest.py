"""Benchmark: what the ingest front doors sustain, next to the raw parts measured in the same run.

Numbers (same broker, same run):

* ``otlp_receiver``: spans/s the OTLP/HTTP receiver (``agl-stream ingest otlp`` as a real uvicorn
  process) acknowledges for batched protobuf exports (``--batch`` spans per request, ``--concurrency``
  requests in flight, like several BatchSpanProcessors), with request latency p50/p99. A request is
  counted only after its 200, which the receiver sends after the broker acked every span.
* ``raw_aiokafka``: records/s of a bare ``AIOKafkaProducer`` sending pre-encoded records of the same
  size as the receiver's span records (acks=all), i.e. the ceiling the receiver works under.
* ``proxy_overhead_fake`` / ``proxy_overhead_embedded``: latency of an OpenAI chat call sent directly
  to the backend vs through ``agl-stream ingest proxy`` (which also produces and waits for the
  span's ack), interleaved call by call: p50/p90 of each and the added p50. ``fake`` is a
  zero-compute vLLM-style backend (pure proxy cost); ``embedded`` is the CPU server with the tiny
  random Llama (skipped when the trainer extra is missing).

Run: ``python tests/benchmarks/bench_ingest.py [--spans 20000] [--batch 512] [--concurrency 4]
[--workers 1] [--calls 40] [--no-proxy] [--json out.json]`` (uses ``AGL_KAFKA_BOOTSTRAP`` if set, else starts a
local Tansu broker).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from aiokafka import AIOKafkaProducer  # noqa: E402

from agl_stream.broker import LocalBroker, local_broker  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from agl_stream.serialization import encode  # noqa: E402
from agl_stream_ingest.otlp.decode import to_spans  # noqa: E402
from agl_stream_ingest.sequence import SequenceAllocator  # noqa: E402
from tests.ingest.fake_backend import create_fake_backend  # noqa: E402
from tests.ingest.helpers import ServedApp, free_port  # noqa: E402
from tests.ingest.otlp_samples import attempt_resource, export_request, otlp_span  # noqa: E402
from agl_stream_topics.admin import ensure_topics  # noqa: E402

PB = {"Content-Type": "application/x-protobuf"}
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _export_bodies(batch: int, variants: int) -> tuple[list[bytes], int]:
    """``variants`` protobuf export requests of ``batch`` spans each, and the mean span record size."""
    bodies, sizes = [], []
    for v in range(variants):
        spans = [
            otlp_span(
                "agentlightning.message" if i % 3 else "openai.chat.completion",
                {"agentlightning.message.body": "x" * 200, "step": i, "gen_ai.system": "openai",
                 "prompt_token_ids": list(range(16)), "ok": True},
                start_ns=1_700_000_000_000_000_000 + i,
            )
            for i in range(batch)
        ]
        request = export_request(spans, attempt_resource(f"ro-{v:012x}", "at-00000001", **{"service.name": "bench"}))
        bodies.append(request.SerializeToString())
        sizes += [len(encode(s)) for s in to_spans(request, SequenceAllocator()).spans[:50]]
    return bodies, int(statistics.mean(sizes))


def _start_cli(args: list[str], env: dict[str, str], port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "agl_stream.cli.main", "--log-level", "WARNING", *args,
                                "--port", str(port)], env=env, cwd=ROOT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{args[:2]} exited with {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"{args[:2]} did not become healthy")


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()


async def otlp_rate(url: str, bodies: list[bytes], batch: int, total_spans: int, concurrency: int) -> dict[str, Any]:
    requests = max(1, total_spans // batch)
    latencies: list[float] = []
    counter = iter(range(requests))
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for body in bodies[:2]:  # warm-up: connections, producer metadata
            (await client.post("/v1/traces", content=body, headers=PB)).raise_for_status()

        async def worker() -> None:
            for n in counter:
                started = time.perf_counter()
                answer = await client.post("/v1/traces", content=bodies[n % len(bodies)], headers=PB)
                answer.raise_for_status()
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {"spans": requests * batch, "seconds": round(elapsed, 3), "spans_per_s": round(requests * batch / elapsed),
            "request_p50_ms": round(_percentile(latencies, 0.5) * 1000, 1),
            "request_p99_ms": round(_percentile(latencies, 0.99) * 1000, 1)}


async def raw_produce_rate(settings: Settings, n: int, size: int) -> dict[str, Any]:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, linger_ms=5, max_batch_size=512 * 1024,
                                acks="all")
    await producer.start()
    payload, topic = b"x" * size, settings.topic("spans")
    try:
        started = time.perf_counter()
        futures = [await producer.send(topic, payload, key=f"ro-{i % 64:012x}".encode()) for i in range(n)]
        await asyncio.gather(*futures)
        elapsed = time.perf_counter() - started
    finally:
        await producer.stop()
    return {"records": n, "record_bytes": size, "seconds": round(elapsed, 3), "records_per_s": round(n / elapsed)}


def proxy_overhead(direct_url: str, proxy_url: str, model: str, calls: int) -> dict[str, Any]:
    """Interleaved direct / proxied chat calls; returns latency percentiles of both and the difference."""
    body = {"model": model, "messages": MESSAGES, "max_tokens": 8, "temperature": 0.0}
    direct, proxied = [], []
    with httpx.Client(timeout=120) as client:
        for warm in (f"{direct_url}/v1/chat/completions", f"{proxy_url}/rollout/ro-bench/attempt/at-bench/v1/chat/completions"):
            client.post(warm, json=body).raise_for_status()
        for _ in range(calls):
            for target, into in ((f"{direct_url}/v1/chat/completions", direct),
                                 (f"{proxy_url}/rollout/ro-bench/attempt/at-bench/v1/chat/completions", proxied)):
                started = time.perf_counter()
                client.post(target, json=body).raise_for_status()
                into.append(time.perf_counter() - started)
    ms = lambda v: round(v * 1000, 2)  # noqa: E731
    return {"calls": calls, "direct_p50_ms": ms(_percentile(direct, 0.5)), "direct_p90_ms": ms(_percentile(direct, 0.9)),
            "proxy_p50_ms": ms(_percentile(proxied, 0.5)), "proxy_p90_ms": ms(_percentile(proxied, 0.9)),
            "added_p50_ms": ms(_percentile(proxied, 0.5) - _percentile(direct, 0.5))}


def _embedded_backend(tmp: Path) -> Optional[tuple[Any, Any, str]]:
    try:
        from agl_stream_trainer.engines.embedded import EmbeddedServer
        from agl_stream_trainer.engines.generation import Generator
        from agl_stream_trainer.models import build_tiny_model, load_model_and_tokenizer
    except ImportError as exc:
        print(f"embedded backend skipped: {exc}")
        return None
    model, tokenizer, _ = load_model_and_tokenizer(str(build_tiny_model(tmp / "tiny-llama", seed=0)))
    generator = Generator(model, tokenizer)
    return EmbeddedServer(generator, "tiny-llama").start(), generator, "tiny-llama"


def _proxy_section(calls: int, env: dict[str, str], tmp: Path, results: dict[str, Any]) -> None:
    """Proxy overhead against the fake backend and (when the trainer extra is there) the embedded model."""
    with ServedApp(create_fake_backend()) as fake:
        port = free_port()
        proxy = _start_cli(["ingest", "proxy", "--backend", f"fake-model={fake.url}/v1"], env, port)
        try:
            results["proxy_overhead_fake"] = proxy_overhead(fake.url, f"http://127.0.0.1:{port}", "fake-model",
                                                            calls)
        finally:
            _stop(proxy)
    embedded = _embedded_backend(tmp)
    if embedded is not None:
        server, generator, model = embedded
        port = free_port()
        proxy = _start_cli(["ingest", "proxy", "--backend", f"{model}={server.base_url}/v1"], env, port)
        try:
            results["proxy_overhead_embedded"] = proxy_overhead(server.base_url, f"http://127.0.0.1:{port}", model,
                                                                max(10, calls // 2))
        finally:
            _stop(proxy)
            server.stop()
            generator.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="receiver uvicorn workers")
    parser.add_argument("--calls", type=int, default=40, help="proxy overhead: calls per path")
    parser.add_argument("--no-proxy", action="store_true", help="measure the receiver only")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    broker: Optional[LocalBroker] = None
    bootstrap = os.environ.get("AGL_KAFKA_BOOTSTRAP")
    if not bootstrap:
        broker = local_broker(log_file=tmp / "broker.log").start()
        bootstrap = broker.bootstrap
    settings = Settings.from_env(env={}, kafka_bootstrap=bootstrap, topic_prefix=f"bench{secrets.token_hex(3)}",
                                 partitions=4)
    await ensure_topics(settings)
    env = {**os.environ, "AGL_KAFKA_BOOTSTRAP": bootstrap, "AGL_TOPIC_PREFIX": settings.topic_prefix}
    env.pop("AGL_INGEST_TOKEN", None)
    results: dict[str, Any] = {"workers": args.workers, "batch": args.batch, "concurrency": args.concurrency}
    try:
        bodies, record_size = _export_bodies(args.batch, variants=8)
        port = free_port()
        receiver = _start_cli(["ingest", "otlp", "--workers", str(args.workers)], env, port)
        try:
            results["otlp_receiver"] = await otlp_rate(f"http://127.0.0.1:{port}", bodies, args.batch, args.spans,
                                                       args.concurrency)
        finally:
            _stop(receiver)
        results["raw_aiokafka"] = await raw_produce_rate(settings, args.spans, record_size)
        results["receiver_vs_raw"] = round(results["otlp_receiver"]["spans_per_s"]
                                           / results["raw_aiokafka"]["records_per_s"], 3)

        if not args.no_proxy:
            await asyncio.to_thread(_proxy_section, args.calls, env, tmp, results)
    finally:
        if broker is not None:
            broker.stop()

    for name, value in results.items():
        print(f"{name:>24}: {value}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
