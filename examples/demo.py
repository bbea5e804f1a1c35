"""The main job behind ``make demo``.

Today it tours the foundation end to end: start the local Kafka-protocol broker (or use
``AGL_KAFKA_BOOTSTRAP``), create the catalog topics, push a handful of rollout tasks, read them back
through a consumer group and print a summary. Later stages of the pipeline extend it.
"""

from __future__ import annotations

import asyncio
import sys
import time

from rich.console import Console
from rich.table import Table

from agl_stream import AttemptedRollout, Attempt, RolloutConfig, Settings, generate_attempt_id, generate_rollout_id
from agl_stream.broker import broker_for
from agl_stream.kafka import RecordConsumer, RecordProducer
from topics.admin import ensure_topics

console = Console()

TASKS = [
    {"question": "What is 2 + 3?", "answer": "5"},
    {"question": "What is 7 * 6?", "answer": "42"},
    {"question": "What is 10 - 4?", "answer": "6"},
    {"question": "What is 9 / 3?", "answer": "3"},
    {"question": "What is 12 + 30?", "answer": "42"},
    {"question": "What is 8 * 8?", "answer": "64"},
]


async def tour(settings: Settings) -> int:
    with console.status("creating topics"):
        report = await ensure_topics(settings)
    console.print(f"[green]topics ready[/] ({len(report.created)} created, {len(report.topics)} in the catalog)")
    if not report.ok:
        for problem in report.problems:
            console.print(f"[red]{problem}")
        return 1

    tasks_topic = settings.topic("tasks")
    sent: dict[str, AttemptedRollout] = {}
    async with RecordProducer(settings) as producer:
        for task in TASKS:
            rid = generate_rollout_id()
            record = AttemptedRollout(
                rollout_id=rid,
                input=task,
                mode="train",
                config=RolloutConfig(max_attempts=2, retry_condition=["failed", "timeout"]),
                attempt=Attempt(rollout_id=rid, attempt_id=generate_attempt_id()),
            )
            await producer.send(tasks_topic, record, key=rid)
            sent[rid] = record
        await producer.flush()
    console.print(f"[green]enqueued[/] {len(sent)} tasks on {tasks_topic}")

    received: dict[str, tuple[int, int, AttemptedRollout]] = {}
    consumer = RecordConsumer(settings, [tasks_topic], group_id=f"demo-{int(time.time())}")
    async with consumer:
        deadline = time.monotonic() + 60
        while len(received) < len(sent) and time.monotonic() < deadline:
            good, bad = await consumer.get_decoded(AttemptedRollout, timeout=0.5)
            for item in good:
                if item.value.rollout_id in sent:
                    received[item.value.rollout_id] = (item.record.partition, item.record.offset, item.value)
            for rejected in bad:
                console.print(f"[yellow]rejected record: {rejected.error.reason}")
            consumer.done_many(d.record for d in good)
            consumer.done_many(r.record for r in bad)
            await consumer.commit()

    table = Table("rollout", "attempt", "partition", "offset", "question", "mode", title="tasks read back from the broker")
    for rid, (partition, offset, record) in sorted(received.items(), key=lambda kv: (kv[1][0], kv[1][1])):
        table.add_row(rid, record.attempt.attempt_id, str(partition), str(offset), record.input["question"], record.mode)
    console.print(table)
    ok = len(received) == len(sent) and all(received[r][2] == sent[r] for r in sent)
    console.print(
        f"[{'green' if ok else 'red'}]{len(received)}/{len(sent)} tasks round-tripped intact "
        f"across {len({p for p, _, _ in received.values()})} partitions"
    )
    return 0 if ok else 1


def main() -> int:
    settings = Settings.from_env()
    with broker_for(settings) as bootstrap:
        where = "configured cluster" if settings.kafka_bootstrap else "local Tansu broker"
        console.print(f"[bold]agl-stream demo[/] - Kafka at {bootstrap} ({where})")
        return asyncio.run(tour(settings.model_copy(update={"kafka_bootstrap": bootstrap})))


if __name__ == "__main__":
    sys.exit(main())
