"""Replay re-derives triplets from stored spans with another adapter configuration."""

from __future__ import annotations

import json
from typing import Optional

import pytest
import typer
from typer.testing import CliRunner

from agl_stream import semconv
from agl_stream.adapter import TracerTraceToTriplet
from agl_stream.config import Settings
from agl_stream.types import Span, Trajectory
from agl_stream_processors.cli import replay as replay_command
from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.replay import ReplayError, Selection, parse_since, publish_to_topic, read_spans, replay, write_to_table
from tests.processors.clickhouse.store import ch, insert_records, make_snapshot, make_span, store_dsn  # noqa: F401

T0 = 1_800_000_000.0


def _attempt(rollout_id: str, base: int) -> list[Span]:
    """main agent -> write agent (LLM call) and check agent (LLM call), then a final reward of 1."""
    seq = iter(range(1, 100))

    def span(name: str, start: float, end: float, parent: Optional[Span], attributes: dict) -> Span:
        n = next(seq)
        return make_span(
            rollout_id, sequence_id=n, span_id=f"{base + n:016x}", parent_id=parent.span_id if parent else None,
            name=name, attributes=attributes, start_time=T0 + start, end_time=T0 + end,
        )  # fmt: skip

    main = span("agent main", 0, 10, None, {"agent.name": "main"})
    write = span("agent write", 1, 4, main, {"agent.name": "write"})
    llm1 = span(semconv.LLM_CALL_SPAN_NAME, 1.5, 3.5, write, {"prompt_token_ids": [base, 2], "response_token_ids": [3, 4], "gen_ai.response.id": f"r{base}a"})
    check = span("agent check", 5, 8, main, {"agent.name": "check"})
    llm2 = span(semconv.LLM_CALL_SPAN_NAME, 5.5, 7.5, check, {"prompt_token_ids": [base, 6], "response_token_ids": [7], "gen_ai.response.id": f"r{base}b"})
    reward = span(semconv.AGL_ANNOTATION, 9, 9, main, {"agentlightning.reward.0.name": "primary", "agentlightning.reward.0.value": 1.0})
    return [main, write, llm1, check, llm2, reward]


@pytest.fixture
def stored(ch: ClickHouse) -> dict[str, list[Span]]:  # noqa: F811
    attempts = {"ro-00000000000a": _attempt("ro-00000000000a", 100), "ro-00000000000b": _attempt("ro-00000000000b", 200)}
    insert_records(ch, "spans", [s for spans in attempts.values() for s in spans])
    insert_records(ch, "rollouts", [make_snapshot(r) for r in attempts])
    return attempts


def test_stored_spans_give_the_same_triplets_as_the_originals(ch: ClickHouse, stored: dict[str, list[Span]]) -> None:  # noqa: F811
    adapter = TracerTraceToTriplet()
    trajectories = {t.rollout_id: t for t in replay(ch, adapter, label="same")}
    assert set(trajectories) == set(stored)
    for rollout_id, spans in stored.items():
        expected = adapter(spans)
        assert [t.model_dump() for t in trajectories[rollout_id].triplets] == [t.model_dump() for t in expected]
        assert trajectories[rollout_id].final_reward == 1.0
        assert trajectories[rollout_id].mode == "train" and trajectories[rollout_id].adapter == "replay:same"


def test_another_adapter_configuration_changes_the_triplets(ch: ClickHouse, stored: dict[str, list[Span]]) -> None:  # noqa: F811
    only_write = list(replay(ch, TracerTraceToTriplet(agent_match="write"), label="write-only", selection=Selection(("ro-00000000000a",))))
    assert len(only_write) == 1
    assert [(t.prompt_token_ids, t.response_token_ids, t.reward) for t in only_write[0].triplets] == [([100, 2], [3, 4], 1.0)]
    assert write_to_table(ch, only_write) == 1
    cols, rows = ch.query_rows("SELECT Adapter, PromptTokenIds, Reward FROM triplets FINAL")
    assert rows == [("replay:write-only", [100, 2], 1.0)]
    # replayed rows stay out of the live analytics
    from agl_stream_processors.analytics import get_saved_query

    assert ch.query_rows(get_saved_query("reward_by_policy_version").sql)[1] == []


def test_adapter_errors_are_reported_per_attempt_and_non_triplet_adapters_refused(ch: ClickHouse, stored: dict[str, list[Span]]) -> None:  # noqa: F811
    from agl_stream_processors.replay import ReplayReport

    def flaky(spans: list[Span]) -> list:
        if spans[0].rollout_id.endswith("a"):
            raise RuntimeError("cannot adapt")
        return []

    report = ReplayReport("flaky")
    produced = list(replay(ch, flaky, label="flaky", report=report))
    assert [t.rollout_id for t in produced] == ["ro-00000000000b"]
    assert report.failures == {"ro-00000000000a/at-00000001": "RuntimeError: cannot adapt"}
    with pytest.raises(ReplayError, match="not a list of Triplet"):
        list(replay(ch, lambda spans: {"messages": []}, label="messages"))


def test_selection_by_time_and_spans_come_back_in_sequence_order(ch: ClickHouse, stored: dict[str, list[Span]]) -> None:  # noqa: F811
    assert list(replay(ch, TracerTraceToTriplet(), label="x", selection=Selection(since=T0 + 1))) == []
    assert len(list(replay(ch, TracerTraceToTriplet(), label="x", selection=Selection(since=T0 - 1, limit=1)))) == 1
    spans = read_spans(ch, [("ro-00000000000b", "at-00000001")])[("ro-00000000000b", "at-00000001")]
    assert [s.sequence_id for s in spans] == [1, 2, 3, 4, 5, 6]


def test_replay_command_writes_rows_with_its_label(ch: ClickHouse, stored: dict[str, list[Span]], store_dsn: str) -> None:  # noqa: F811
    app = typer.Typer()
    app.command()(replay_command)
    result = CliRunner().invoke(
        app, ["--adapter", "tracer", "--adapter-option", "agent_match=check", "--from", store_dsn, "--label", "check"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["attempts"], summary["trajectories"], summary["triplets"], summary["written"]) == (2, 2, 2, 2)
    assert ch.query_rows("SELECT count() FROM triplets FINAL WHERE Adapter = 'replay:check'")[1] == [(2,)]
    bad = CliRunner().invoke(app, ["--adapter", "no_such_adapter", "--from", store_dsn])
    assert bad.exit_code == 2 and "unknown adapter" in bad.output


def test_parse_since() -> None:
    assert parse_since("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_since("2026-01-01T00:00:00") == 1767225600.0
    with pytest.raises(ReplayError):
        parse_since("yesterday")


async def test_replayed_trajectories_can_be_published_to_a_topic(
    topics: Settings, ch: ClickHouse, stored: dict[str, list[Span]]  # noqa: F811
) -> None:
    from agl_stream.kafka import RecordConsumer

    trajectories = list(replay(ch, TracerTraceToTriplet(agent_match="check"), label="check"))
    assert await publish_to_topic(topics, topics.topic("triplets"), trajectories) == 2
    received: list[Trajectory] = []
    async with RecordConsumer(topics, [topics.topic("triplets")], group_id=None) as consumer:
        while len(received) < 2:
            good, bad = await consumer.get_decoded(Trajectory, timeout=1.0)
            assert not bad
            received.extend(d.value for d in good)
    assert sorted((t.rollout_id, t.adapter, len(t.triplets)) for t in received) == [
        ("ro-00000000000a", "replay:check", 1),
        ("ro-00000000000b", "replay:check", 1),
    ]


def test_replay_stamps_the_decision_the_rollouts_table_records(ch: ClickHouse) -> None:  # noqa: F811
    """A retried rollout: attempt 1 (superseded, reported late) and attempt 2 (ended the rollout)."""
    from agl_stream.types import Attempt, AttemptEvent
    from tests.processors.clickhouse.store import make_attempt_events

    rid = "ro-0000000000rc"
    first = [s.model_copy(update={"attempt_id": "at-00000001"}) for s in _attempt(rid, 300)]
    second = [s.model_copy(update={"attempt_id": "at-00000002"}) for s in _attempt(rid, 400)]
    insert_records(ch, "spans", first + second)
    snapshot = make_snapshot(rid)
    snapshot = snapshot.model_copy(update={"attempts": 2, "attempt": Attempt(rollout_id=rid, attempt_id="at-00000002",
                                                                             sequence_id=2, status="succeeded")})  # fmt: skip
    insert_records(ch, "rollouts", [snapshot])
    events = make_attempt_events(rid, "at-00000001") + [
        e.model_copy(update={"attempt_sequence_id": 2}) for e in make_attempt_events(rid, "at-00000002")
    ]
    insert_records(ch, "attempts", [e for e in events if isinstance(e, AttemptEvent)])
    decided = {t.attempt_id: (t.decision, t.rollout_status, t.trainable) for t in replay(ch, TracerTraceToTriplet(), label="d")}
    assert decided == {"at-00000001": ("superseded", "succeeded", False), "at-00000002": ("final", "succeeded", True)}
