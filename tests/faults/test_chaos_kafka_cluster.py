"""Faults of a three-node Apache Kafka cluster under load: a node SIGKILLed, the active controller
SIGKILLed, a rolling restart of every node. Nothing enqueued may be lost or written twice.

The cluster (``agl-stream broker --brokers 3``: three KRaft nodes, each broker and controller,
replication factor 3, ``min.insync.replicas`` 2, producers with ``acks=all``) carries the
benchmark's rollout workload through the processors and two runner processes while the fault
happens; the audit then compares ClickHouse with the tasks' ground truth, as in ``test_chaos.py``.
A killed node comes back after ``DOWN_S`` with its data (same ports, same log directory).

``make test`` runs the leader kill at reduced size; ``make chaos`` runs all three at full size.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Optional

import pytest

from agl_stream.broker import KafkaBroker, choose_local_broker
from agl_stream.client import StoreClient
from agl_stream.config import Settings
from tests.faults.audit import Enqueued
from tests.faults.harness import Pipeline
from tests.faults.scenario import assert_exactly_once, count, reduced_or_full, until
from tests.faults.test_chaos import Fault, run_scenario

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(900),
    pytest.mark.skipif(choose_local_broker(Settings.from_env()) != "kafka", reason="a three-node cluster needs Apache Kafka"),
]

DOWN_S = 10.0


def busiest_leader(broker: KafkaBroker, settings: Settings) -> tuple[int, int]:
    """(node, partitions it leads) for the node leading the most partitions of the busiest topics."""
    led: Counter[int] = Counter()
    for short in ("spans", "attempts", "tasks"):
        led.update(broker.partition_leaders(settings.topic(short)).values())
    node, partitions = led.most_common(1)[0]
    return node, partitions


async def run_cluster_scenario(workdir: Path, name: str, n: int, fault: Fault) -> None:
    """``test_chaos.run_scenario`` on a three-node cluster; the fault strikes once a tenth of the rollouts succeeded."""
    async def after_some(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> Optional[str]:
        await until(lambda: count(store, enq, "succeeded") >= max(3, n // 10), 180, "rollouts to succeed", pipe)
        return await fault(pipe, store, enq)

    result, _ = await run_scenario(workdir, name, n, after_some, sleep=0.05, timeout=300, brokers=3, drain_timeout=180)
    assert_exactly_once(result)


@pytest.mark.parametrize("n", reduced_or_full(24, 200))
async def test_sigkill_the_leader_of_the_busiest_partitions(workdir: Path, n: int) -> None:
    async def kill_leader(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> str:
        assert pipe.settings is not None
        node, led = await asyncio.to_thread(busiest_leader, pipe.kafka, pipe.settings)
        await asyncio.to_thread(pipe.kafka.kill_node, node)
        await asyncio.sleep(DOWN_S)
        await asyncio.to_thread(pipe.kafka.start_node, node)
        return f"SIGKILLed node {node} (leader of {led} partitions of spans/attempts/tasks) for {DOWN_S:.0f} s"

    await run_cluster_scenario(workdir, "kafka-kill-leader", n, kill_leader)


# Full size only (make chaos), to keep CI within 45 minutes. Its reduced run lost a rollout in 2 of 4 runs on
# 2026-11-27: the claim race fixed in agl_stream/kafka/claim.py (full size since: 4/4 clean).
@pytest.mark.parametrize("n", [pytest.param(200, id="full", marks=pytest.mark.chaos)])
async def test_sigkill_the_active_controller(workdir: Path, n: int) -> None:
    async def kill_controller(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> str:
        node = pipe.kafka.active_controller()
        assert node is not None, "no node's log says it became the KRaft leader"
        await asyncio.to_thread(pipe.kafka.kill_node, node)
        await asyncio.sleep(DOWN_S)
        after = pipe.kafka.active_controller()
        await asyncio.to_thread(pipe.kafka.start_node, node)
        assert after is not None and after != node, "no other node took over as the active controller"
        return f"SIGKILLed the active controller, node {node}, for {DOWN_S:.0f} s (node {after} took over)"

    await run_cluster_scenario(workdir, "kafka-kill-controller", n, kill_controller)


# Full size only (make chaos): the reduced run took 126 s of CI's 45 minutes, the most of any test;
# the single-node broker restart (test_chaos.py) and the leader kill keep a broker fault in make test.
@pytest.mark.parametrize("n", [pytest.param(200, id="full", marks=pytest.mark.chaos)])
async def test_rolling_restart_of_every_node(workdir: Path, n: int) -> None:
    async def rolling_restart(pipe: Pipeline, store: StoreClient, enq: Enqueued) -> str:
        for node in pipe.kafka.nodes:
            await asyncio.to_thread(pipe.kafka.stop_node, node.node_id)
            await asyncio.to_thread(pipe.kafka.start_node, node.node_id)
        return "restarted nodes 1, 2, 3 one after the other (SIGTERM, start, all three listed again)"

    await run_cluster_scenario(workdir, "kafka-rolling-restart", n, rolling_restart)
