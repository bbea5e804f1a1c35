"""S3-shaped trajectories from the real triplets and rollouts tables: exact JSON, filters, total_reward."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from agl_stream_processors.clickhouse import ClickHouse
from agl_stream_processors.export import (
    ExportError,
    ExportSelection,
    S3Content,
    S3Trajectory,
    S3Transition,
    export_trajectories,
    total_reward,
    write_trajectories,
)
from agl_stream_processors.export.trajectories import load_decoder
from tests.processors.export.data import EXPECTED, T0, populate

pytestmark = pytest.mark.integration


def _ids(ch: ClickHouse, **selection: object) -> list[str]:
    return [t.trajectory_id for t in export_trajectories(ch, ExportSelection(**selection))]  # type: ignore[arg-type]


def test_final_live_trajectories_in_s3_shape(ch: ClickHouse) -> None:
    populate(ch)
    exported = list(export_trajectories(ch))
    # the superseded attempt of ro-alpha and its replayed rows are left out; the oldest comes first
    assert [json.loads(t.model_dump_json()) for t in exported] == [EXPECTED["ro-alpha"], EXPECTED["ro-beta"], EXPECTED["ro-gamma"]]
    alpha = exported[0]
    assert [t.reward for t in alpha.transitions] == [None, 0.25, 1.0] and alpha.total_reward == 1.25
    assert alpha.metadata["final_reward"] == 1.0  # only on the last transition; 0.25 came from an earlier reward span


def test_filters(ch: ClickHouse) -> None:
    populate(ch)
    assert _ids(ch, rollout_ids=("ro-gamma", "ro-beta", "ro-nope")) == ["ro-beta", "ro-gamma"]
    assert _ids(ch, mode="val") == ["ro-beta"]
    assert _ids(ch, mode="train", rollout_ids=("ro-beta",)) == []
    assert _ids(ch, since=T0 + 15) == ["ro-beta", "ro-gamma"]
    assert _ids(ch, limit=2) == ["ro-alpha", "ro-beta"]
    assert _ids(ch, rollout_ids=("ro-gamma", "ro-beta"), limit=1) == ["ro-beta"]
    (replayed,) = export_trajectories(ch, ExportSelection(adapter="replay:tracer"))
    assert (replayed.trajectory_id, replayed.total_reward, replayed.metadata["adapter"]) == ("ro-alpha", 0.5, "replay:tracer")
    assert replayed.metadata["attempt_id"] == "at-2" and len(replayed.transitions) == 1
    with pytest.raises(ExportError, match="--mode"):
        ExportSelection(mode="eval")


def test_total_reward_sums_the_rewards_present_and_is_null_without_any() -> None:
    def transition(reward: float | None) -> S3Transition:
        return S3Transition(input=S3Content(), output=S3Content(), reward=reward)

    assert total_reward([transition(None), transition(0.25), transition(1.0)]) == 1.25
    assert total_reward([transition(0.0), transition(None)]) == 0.0
    assert total_reward([transition(None)]) is None and total_reward([]) is None
    assert total_reward([transition(0.1)] * 10) == 1.0  # an exactly rounded sum


def test_jsonl_and_json_writers() -> None:
    trajectories = [S3Trajectory(trajectory_id=f"ro-{i}") for i in range(2)]
    lines = io.StringIO()
    assert write_trajectories(trajectories, lines, "jsonl") == 2
    assert [json.loads(line)["trajectory_id"] for line in lines.getvalue().splitlines()] == ["ro-0", "ro-1"]
    array = io.StringIO()
    assert write_trajectories(trajectories, array, "json") == 2
    assert [t["trajectory_id"] for t in json.loads(array.getvalue())] == ["ro-0", "ro-1"]
    empty = io.StringIO()
    assert write_trajectories([], empty, "json") == 0 and json.loads(empty.getvalue()) == []
    with pytest.raises(ExportError, match="--format"):
        write_trajectories([], io.StringIO(), "xml")


def test_s3_models_do_not_take_over_the_existing_names() -> None:
    import agl_stream.types as types
    from agl_stream.adapter.triplet import Transition

    assert types.Trajectory is not S3Trajectory and Transition is not S3Transition
    assert {"input", "output", "reward", "metadata"} == set(S3Transition.model_fields)
    assert {"trajectory_id", "transitions", "total_reward", "metadata"} == set(S3Trajectory.model_fields)


def write_tokenizer(path: Path) -> Path:
    """A word-level tokenizer.json built here (nothing is downloaded): ids 0-9 are words."""
    from tokenizers import Tokenizer, models

    words = "[UNK] what is two plus four ? the answer 4".split()
    Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]")).save(str(path))
    return path


def test_a_local_tokenizer_decodes_the_token_ids(ch: ClickHouse, tmp_path: Path) -> None:
    populate(ch)
    decode = load_decoder(write_tokenizer(tmp_path / "tokenizer.json"))
    assert load_decoder(tmp_path)([1, 2]) == "what is"  # a folder holding a tokenizer.json
    first = next(iter(export_trajectories(ch, ExportSelection(rollout_ids=("ro-alpha",)), decode))).transitions[0]
    assert first.input.model_dump() == {"text": "what is two", "token_ids": [1, 2, 3]}
    assert first.output.model_dump() == {"text": "plus four", "token_ids": [4, 5]}
    with pytest.raises(ExportError, match="no such file"):
        load_decoder(tmp_path / "missing")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ExportError, match="not a tokenizer.json"):
        load_decoder(tmp_path / "bad.json")
