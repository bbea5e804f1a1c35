"""Benchmark: what the durable path costs per record on the local broker, before any of the pipeline's own logic.

Measured on one local Apache Kafka (the stack's default: one KRaft node, C1-only JVM), each client in a process of
its own, with aiokafka as every service uses it (``--client confluent``: librdkafka through confluent-kafka, which
is not a dependency; install it on the side to compare):

* ``broker_idle_cores``: the broker with no client at all;
* ``idle_consumer``: ``--idle-consumers`` group consumers with nothing to read, each fetching with a 500 ms wait
  (a sink's or a hop's idle consumer): cores each costs the broker and its own process;
* ``record``: one record per produce request (acks=all, no linger: how the front door sends a write it answers on)
  at ``--rate`` records/s, read by one group consumer (fetch_min_bytes 1, 500 ms wait: a hop something waits on).
  CPU ms per record in the producer's process, the consumer's process and the broker, the broker's also above its
  idle baseline.

A record that travels alone (one per produce request, one per fetch), as most of the pipeline's records do at the
rates of upstream's benchmark file, costs the producer's and the broker's share once and the consumer's share in
every process that reads it. docs/performance.md multiplies them by the records and readers of one rollout
(``topic_records`` in bench_upstream_file.py's JSON).

Run: ``python tests/benchmarks/bench_kafka_floor.py [--client aiokafka|confluent] [--records 1500] [--rate 50]
[--idle-consumers 10] [--window 20] [--json out.json]`` (needs Java 17+ and the Kafka jars: ``agl-stream broker
install``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from agl_stream.broker import local_broker  # noqa: E402
from agl_stream.config import Settings  # noqa: E402
from tests.benchmarks.process_sampler import ProcessSampler  # noqa: E402

console = Console(stderr=True)
TOPIC, IDLE_TOPIC, PARTITIONS = "floor.records", "floor.idle", 4
FETCH_WAIT_MS = 500  # a waiting consumer's fetch wait on Kafka (agl_stream.kafka.KAFKA_HOP_FETCH_WAIT_MS)
RECORD = b"x" * 600  # about an attempt event's or a rollout snapshot's encoded size


# ---------------------------------------------------------------- the client processes (``--role``)


async def _idle_consumers(bootstrap: str, count: int) -> None:
    consumers = [AIOKafkaConsumer(IDLE_TOPIC, bootstrap_servers=bootstrap, group_id=f"floor-idle-{i}",
                                  fetch_max_wait_ms=FETCH_WAIT_MS, enable_auto_commit=False) for i in range(count)]  # fmt: skip
    for consumer in consumers:
        await consumer.start()
    while not all(c.assignment() for c in consumers):
        await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        while not stop.is_set():  # each consumer polls as a sink's loop does
            await asyncio.gather(*(c.getmany(timeout_ms=500) for c in consumers))
    finally:
        await asyncio.gather(*(c.stop() for c in consumers))


async def _consumer(bootstrap: str, records: int) -> None:
    consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=bootstrap, group_id="floor-reader", auto_offset_reset="earliest",
                                fetch_max_wait_ms=FETCH_WAIT_MS, enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=100)
        print("ready", flush=True)
        seen = 0
        while seen < records:
            batches = await consumer.getmany(timeout_ms=500)
            seen += sum(len(b) for b in batches.values())  # no commit per batch: a floor, not a service
        print("done", flush=True)
    finally:
        await consumer.stop()


async def _producer(bootstrap: str, records: int, rate: float) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await producer.start()
    try:
        print("ready", flush=True)
        started = time.monotonic()
        for i in range(records):
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            await producer.send_and_wait(TOPIC, RECORD, key=f"ro-{i % 512:06d}".encode())
        print("done", flush=True)
    finally:
        await producer.stop()


# librdkafka's client (``--client confluent``, confluent-kafka: not a dependency, installed on the side for this
# comparison): the same three roles, to see what a compiled client would save against aiokafka's Python


def _confluent_consumer(bootstrap: str, group: str, topic: str) -> Any:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "fetch.wait.max.ms": FETCH_WAIT_MS})  # fmt: skip
    consumer.subscribe([topic])
    return consumer


def _idle_consumers_confluent(bootstrap: str, count: int) -> None:
    consumers = [_confluent_consumer(bootstrap, f"floor-idle-{i}", IDLE_TOPIC) for i in range(count)]
    while not all(c.assignment() for c in consumers):
        for c in consumers:
            c.poll(0.05)
    print("ready", flush=True)
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    try:
        while not stop[0]:  # each consumer asked for records every 500 ms, as a sink's loop does
            for c in consumers:
                c.consume(num_messages=100, timeout=0.5 / count)
    finally:
        for c in consumers:
            c.close()


def _consumer_confluent(bootstrap: str, records: int) -> None:
    consumer = _confluent_consumer(bootstrap, "floor-reader", TOPIC)
    try:
        while not consumer.assignment():
            consumer.poll(0.1)
        print("ready", flush=True)
        seen = 0
        while seen < records:
            messages = consumer.consume(num_messages=500, timeout=0.5)
            bad = [m.error() for m in messages if m.error() is not None]
            if bad:
                raise RuntimeError(f"consume failed: {bad[0]}")
            seen += len(messages)
        print("done", flush=True)
    finally:
        consumer.close()


def _producer_confluent(bootstrap: str, records: int, rate: float) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    print("ready", flush=True)
    started = time.monotonic()
    for i in range(records):
        time.sleep(max(0.0, started + i / rate - time.monotonic()))
        outcome: list[Any] = []
        producer.produce(TOPIC, RECORD, key=f"ro-{i % 512:06d}".encode(), on_delivery=lambda err, _msg: outcome.append(err))
        while not outcome:  # wait for the acknowledgement, as send_and_wait does
            producer.poll(0.1)
        if outcome[0] is not None:
            raise RuntimeError(f"produce failed: {outcome[0]}")
    print("done", flush=True)
    producer.flush(10)


# ---------------------------------------------------------------- measuring


class Child:
    """A client process of this file (``--role``), its stdout read by a thread so that a wait can time out."""

    def __init__(self, role: str, bootstrap: str, client: str, *extra: str) -> None:
        self.role = role
        self.proc = subprocess.Popen([sys.executable, __file__, "--role", role, "--bootstrap", bootstrap, "--client", client,
                                      *extra], stdout=subprocess.PIPE, text=True)  # fmt: skip
        self._lines: queue.Queue[Optional[str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name=f"{role}-stdout").start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())
        self._lines.put(None)  # end of output: the process exited

    def wait_for(self, expected: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"{self.role}: no '{expected}' within {timeout:.0f} s") from None
            if line is None:
                raise RuntimeError(f"{self.role} exited with {self.proc.wait()} before '{expected}'")
            if line == expected:
                return

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu_of(cpu: dict[str, float], role: str) -> float:
    """CPU seconds of one watched role from :meth:`ProcessSampler.cpu_since` (summed over its processes)."""
    return sum(seconds for key, seconds in cpu.items() if key.startswith(f"{role}/"))


async def create_topics(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (TOPIC, IDLE_TOPIC)])
    finally:
        await admin.close()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings.from_env(env={}, local_broker="kafka")
    # read at mark() and cpu_since() only, without the sampler's thread: the clients are read before they are reaped
    # (an exited one is still a zombie with its CPU times), and the thread's /proc reads every 250 ms would share
    # the 2 cores with what is measured
    sampler = ProcessSampler()
    with tempfile.TemporaryDirectory(prefix="agl-floor-") as tmp, \
            local_broker(settings, kind="kafka", data_dir=Path(tmp) / "kafka", log_file=Path(tmp) / "broker.log") as broker:  # fmt: skip
        sampler.watch("broker", broker.pid)
        bootstrap = broker.bootstrap
        asyncio.run(create_topics(bootstrap))
        console.print(f"broker at {bootstrap}; settling {args.window:.0f} s")
        time.sleep(args.window)
        sampler.mark()
        time.sleep(args.window)
        broker_idle = cpu_of(sampler.cpu_since(), "broker") / args.window
        console.print(f"broker alone: {broker_idle:.4f} cores")

        idle = Child("idle-consumers", bootstrap, args.client, "--count", str(args.idle_consumers))
        try:
            idle.wait_for("ready", 120)
            sampler.watch("idle", idle.pid)
            time.sleep(5)
            sampler.mark()
            time.sleep(args.window)
            cpu = sampler.cpu_since()
        finally:
            idle.stop()
        broker_with, clients = cpu_of(cpu, "broker") / args.window, cpu_of(cpu, "idle") / args.window
        per_consumer = {"broker_cores": round((broker_with - broker_idle) / args.idle_consumers, 5),
                        "client_cores": round(clients / args.idle_consumers, 5)}  # fmt: skip
        console.print(f"{args.idle_consumers} idle consumers: broker {broker_with:.4f} cores, theirs {clients:.4f}")

        reader = Child("consumer", bootstrap, args.client, "--records", str(args.records))
        writer: Optional[Child] = None
        try:
            reader.wait_for("ready", 120)
            writer = Child("producer", bootstrap, args.client, "--records", str(args.records), "--rate", str(args.rate))
            writer.wait_for("ready", 120)
            sampler.watch("producer", writer.pid)
            sampler.watch("consumer", reader.pid)
            sampler.mark()
            started = time.monotonic()
            writer.wait_for("done", args.records / args.rate + 120)
            reader.wait_for("done", 120)
            cpu, seconds = sampler.cpu_since(), time.monotonic() - started
        finally:
            for child in (writer, reader):
                if child is not None:
                    child.stop()
        n, broker_s = args.records, cpu_of(cpu, "broker")
        record = {"records": n, "rate": args.rate, "seconds": round(seconds, 2),
                  "producer_ms": round(1000 * cpu_of(cpu, "producer") / n, 3),
                  "consumer_ms": round(1000 * cpu_of(cpu, "consumer") / n, 3),
                  "broker_ms": round(1000 * broker_s / n, 3),
                  "broker_above_idle_ms": round(1000 * (broker_s - broker_idle * seconds) / n, 3)}  # fmt: skip
    return {"broker": "Apache Kafka (local, one KRaft node, C1 only)", "client": args.client, "cpu_count": os.cpu_count(),
            "broker_idle_cores": round(broker_idle, 5), "idle_consumers": args.idle_consumers,
            "idle_consumer": per_consumer, "record": record}  # fmt: skip


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1500, help="records produced and read in the record phase")
    parser.add_argument("--rate", type=float, default=50.0, help="records/s, one per produce request")
    parser.add_argument("--idle-consumers", type=int, default=10)
    parser.add_argument("--window", type=float, default=20.0, help="seconds each idle measurement (and the settling) lasts")
    parser.add_argument("--client", choices=("aiokafka", "confluent"), default="aiokafka",
                        help="the clients' library (confluent: confluent-kafka, importable but not a dependency)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--role", choices=("idle-consumers", "consumer", "producer"), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    confluent = args.client == "confluent"
    if args.role == "idle-consumers":
        _idle_consumers_confluent(args.bootstrap, args.count) if confluent else asyncio.run(_idle_consumers(args.bootstrap, args.count))
        return 0
    if args.role == "consumer":
        _consumer_confluent(args.bootstrap, args.records) if confluent else asyncio.run(_consumer(args.bootstrap, args.records))
        return 0
    if args.role == "producer":
        if confluent:
            _producer_confluent(args.bootstrap, args.records, args.rate)
        else:
            asyncio.run(_producer(args.bootstrap, args.records, args.rate))
        return 0
    if confluent:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            parser.error("--client confluent: confluent-kafka is not importable (pip install it on the side, not into the project)")
    result = measure(args)
    table = Table(title=f"the durable path's floor on the local Apache Kafka ({args.client} clients)")
    table.add_column("what")
    table.add_column("cost")
    table.add_row("broker, no client", f"{result['broker_idle_cores']:.4f} cores")
    ic = result["idle_consumer"]
    table.add_row("one idle consumer (500 ms fetch wait)", f"broker {ic['broker_cores']:.4f} + its process {ic['client_cores']:.4f} cores")
    r = result["record"]
    table.add_row(f"one record ({r['rate']:.0f}/s, acks=all, one per request)",
                  f"producer {r['producer_ms']} + broker {r['broker_ms']} ({r['broker_above_idle_ms']} above idle) "
                  f"+ each reader {r['consumer_ms']} ms")  # fmt: skip
    Console().print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
