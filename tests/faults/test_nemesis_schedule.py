"""The nemesis's schedule: replayable from its seed, one fault per target at a time, several at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.nemesis.run import process_names, targets_for
from tests.faults.nemesis.schedule import HOLD_RANGE, Fault, Target, format_schedule, make_schedule, overlapping

ROOT = Path(__file__).resolve().parents[2]
#: the command's default topology: two processors replicas, two runner hosts, the learner, the store front door,
#: three brokers each behind its proxies, and the SQL door behind its own
PROCESSES = process_names(2, 2, learner=True, front_door=True)
TARGETS = targets_for(PROCESSES, links="nodes", broker_nodes=[1, 2, 3], sql_door=True)


def test_the_default_topology_is_the_issues() -> None:
    assert PROCESSES == ["processors", "processors-1", "runners-0", "runners-1", "learner", "store"]
    names = {t.name: t.kinds for t in TARGETS}
    assert all(names[p] == ("kill", "pause", "partition") for p in PROCESSES)
    assert names["sql-door"] == ("partition",)  # a link, not a process: cut off only


def test_a_long_run_hits_every_target_and_several_at_once() -> None:
    faults = make_schedule(3, 20_000 / 5, 30, TARGETS)  # 20,000 rollouts at about 5/s
    assert {f.target for f in faults} == {t.name for t in TARGETS}
    assert {f.kind for f in faults if f.target == "sql-door"} == {"partition"}
    assert overlapping(faults) >= 2


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    a = make_schedule(7, 3600, 30, TARGETS)
    assert a == make_schedule(7, 3600, 30, TARGETS)
    assert a != make_schedule(8, 3600, 30, TARGETS)


def test_faults_come_every_so_often_on_average_and_overlap() -> None:
    faults = make_schedule(1, 20_000, 30, TARGETS)
    gaps = [b.at - a.at for a, b in zip(faults, faults[1:])]
    # one per target at a time skips some draws, so the mean gap is a little above 30 s
    assert 30 <= sum(gaps) / len(gaps) <= 45
    assert overlapping(faults) >= 2
    assert {f.kind for f in faults} == {"kill", "pause", "partition"}
    assert all(HOLD_RANGE[f.kind][0] <= f.hold <= HOLD_RANGE[f.kind][1] for f in faults)


def test_a_target_takes_one_fault_at_a_time_and_only_kinds_it_allows() -> None:
    faults = make_schedule(2, 20_000, 5, TARGETS)
    allowed = {t.name: set(t.kinds) for t in TARGETS}
    last_end: dict[str, float] = {}
    for fault in faults:
        assert fault.kind in allowed[fault.target]
        assert fault.at >= last_end.get(fault.target, 0.0), fault
        last_end[fault.target] = fault.ends


def test_broker_faults_only_where_the_broker_replicates() -> None:
    one_node = {t.name: t.kinds for t in targets_for(["runners-0"], links="single", broker_nodes=[1])}
    assert not any(name.startswith("broker-") and name != "broker-link" for name in one_node)
    assert one_node["broker-link"] == ("partition",)  # clients cut from the one node, which keeps its data
    cluster = {t.name: t.kinds for t in targets_for(["runners-0"], links="nodes", broker_nodes=[1, 2, 3])}
    assert all(cluster[f"broker-{n}"] == ("kill", "pause", "partition") for n in (1, 2, 3))
    assert "broker-link" not in cluster
    bare = targets_for(["runners-0"], links="none", broker_nodes=[1, 2, 3])
    assert all("partition" not in t.kinds for t in bare)  # no proxies: no partitions


def test_overlap_counts_faults_in_effect_together() -> None:
    faults = [Fault(0, "pause", "a", 10), Fault(5, "kill", "b", 10), Fault(12, "pause", "c", 1)]
    assert overlapping(faults) == 2


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        make_schedule(1, 100, 0, TARGETS)
    with pytest.raises(ValueError):
        make_schedule(1, 100, 10, [])


def test_the_command_prints_the_schedule_a_seed_replays() -> None:
    cmd = [sys.executable, "-m", "tests.faults.nemesis", "--schedule-only", "--seed", "11", "--duration", "600"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    # the run prints the same schedule before it starts (same targets, same seed)
    assert out.strip() == format_schedule(11, make_schedule(11, 600, 30, TARGETS, quiet_tail=15.0))
    assert Target("processors-1", ("kill", "pause", "partition")) in TARGETS
    assert Target("broker-2", ("kill", "pause", "partition")) in TARGETS
