"""Trajectories in S3's shape: the ``triplets`` table (with ``rollouts`` for the task) as S3 ``Trajectory`` records.

S3's API reference describes a ``Trajectory`` of ``Transition`` s; this module maps our rows onto it:

==============================  =====================================================================
S3                              agl-stream
==============================  =====================================================================
``trajectory_id``               the rollout id (one trajectory per rollout, see below)
``transitions``                 the trajectory's triplets in ``TripletIndex`` order (the LLM calls' order)
``input.token_ids``             ``PromptTokenIds``
``output.token_ids``            ``ResponseTokenIds``
``input.text``/``output.text``  the token ids decoded with a local tokenizer, else null: the table keeps
                                token ids only (the prompt messages and completion choices stay in ``spans``)
``reward``                      ``Reward``: the reward span the adapter matched to that LLM call, or null
transition ``metadata``         the triplet's own metadata (``response_id``, ``agent_name``, ``span_id``, ...)
                                plus ``triplet_index``, ``policy_version`` and the behaviour ``logprobs``
``total_reward``                :func:`total_reward`
trajectory ``metadata``         rollout and attempt: ids, mode, status, final reward, group, resources,
                                policy version, adapter, decision, times, the task input, metadata
==============================  =====================================================================

Which trajectories: a rollout's training signal, the one a learner trains - the live (non ``replay:``)
trajectory of the attempt the state machine decided ``final``. ``ExportSelection.adapter`` picks a
replay's rows instead. Should one final attempt have been adapted twice under the same selection (two
adapter labels), the later one is exported, so ``trajectory_id`` stays unique.

The models are named ``S3*`` because ``agl_stream.types.Trajectory`` (our ``agl.triplets`` record) and
``agl_stream.adapter.triplet.Transition`` (upstream's token-level view) already own the plain names.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TextIO

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.client.sql_ids import chunks, in_list, in_lists
from agl_stream_processors.clickhouse.client import ClickHouse

#: token ids -> text
Decoder = Callable[[list[int]], str]
#: (rollout id, attempt id, adapter label): the triplets table's key of one trajectory
TrajectoryKey = tuple[str, str, str]

FORMATS = ("jsonl", "json")
MODES = ("train", "val", "test")
REPLAY_PREFIX = "replay:"  # replayed rows' adapter label (agl_stream_processors.replay.REPLAY_PREFIX)
#: trajectories read per query: bounds the memory of token ids held at once
TRAJECTORIES_PER_QUERY = 200


class ExportError(ValueError):
    """Bad export arguments (an unknown mode or format, an unusable tokenizer)."""


# ---------------------------------------------------------------------------------------------- S3 models


class S3Content(BaseModel):
    """One side of a transition: S3's ``input`` (the prompt) or ``output`` (the response)."""

    model_config = ConfigDict(extra="forbid")
    text: Optional[str] = Field(default=None, description="decoded token ids; null without a tokenizer")
    token_ids: list[int] = Field(default_factory=list)


class S3Transition(BaseModel):
    """S3's ``Transition``: one LLM call of the trajectory (one triplet)."""

    model_config = ConfigDict(extra="forbid")
    input: S3Content
    output: S3Content
    reward: Optional[float] = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class S3Trajectory(BaseModel):
    """S3's ``Trajectory``: one rollout's transitions, their total reward and the rollout's information."""

    model_config = ConfigDict(extra="forbid")
    trajectory_id: str
    transitions: list[S3Transition] = Field(default_factory=list)
    total_reward: Optional[float] = Field(default=None, description="see total_reward()")
    metadata: dict[str, Any] = Field(default_factory=dict)


def total_reward(transitions: Iterable[S3Transition]) -> Optional[float]:
    """The sum of the transitions' non-null rewards; null when no transition has a reward.

    Why not ``final_reward``: the adapter matches each reward span to the latest LLM call that ended
    before it, so an agent that emits one reward at the end has it on its *last* transition only (and
    then ``total_reward == metadata["final_reward"]``); an agent that emits several rewards gets their
    sum. A reward emitted before any LLM call ended matches no transition: it is in
    ``metadata["final_reward"]`` only. Null rather than 0.0 keeps "no reward" apart from "zero reward".
    """
    rewards = [t.reward for t in transitions if t.reward is not None]
    return math.fsum(rewards) if rewards else None


# ---------------------------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class ExportSelection:
    """Which trajectories to export: every filter narrows; the oldest (by creation) come first."""

    rollout_ids: tuple[str, ...] = ()
    mode: Optional[str] = None
    since: Optional[float] = None  # epoch seconds: trajectories created (adapted) at or after
    limit: Optional[int] = None
    adapter: Optional[str] = None  # an exact adapter label (e.g. "replay:tracer"); None: the live rows

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise ExportError(f"--mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.limit is not None and self.limit < 1:
            raise ExportError(f"--limit must be at least 1, not {self.limit}")


def select_trajectories(ch: ClickHouse, selection: ExportSelection = ExportSelection()) -> list[TrajectoryKey]:
    """Keys of the selected trajectories, one per rollout, oldest first (ties by rollout id).

    Explicit rollout ids are read in bounded chunks (:mod:`agl_stream.client.sql_ids`); a rollout's
    rows all fall in its own chunk, so each chunk's first ``limit`` merged and cut again are the
    first ``limit`` of the whole selection."""
    where = ["Decision = 'final'"]
    params: dict[str, Any] = {}
    if selection.adapter is None:
        where.append(f"Adapter NOT LIKE '{REPLAY_PREFIX}%'")
    else:
        where.append("Adapter = {adapter:String}")
        params["adapter"] = selection.adapter
    if selection.mode is not None:
        where.append("Mode = {mode:String}")
        params["mode"] = selection.mode
    having = ""
    if selection.since is not None:
        having = "HAVING Created >= {since:Int64}"
        params["since"] = int(selection.since * 1_000_000)
    limit = f"LIMIT {int(selection.limit)}" if selection.limit else ""

    def select(extra: str) -> list[tuple[int, str, str, str]]:
        _cols, rows = ch.query_rows(
            f"""
            SELECT RolloutId, argMax(tuple(AttemptId, Adapter), tuple(First, AttemptId, Adapter)) AS Pick,
                   toUnixTimestamp64Micro(max(First)) AS Created
            FROM (SELECT RolloutId, AttemptId, Adapter, min(CreatedAt) AS First FROM triplets FINAL
                  WHERE {' AND '.join(where + ([extra] if extra else []))} GROUP BY RolloutId, AttemptId, Adapter)
            GROUP BY RolloutId {having} ORDER BY Created, RolloutId {limit}
            """,
            params,
        )
        return [(int(created), rid, str(pick[0]), str(pick[1])) for rid, pick, created in rows]

    if not selection.rollout_ids:
        found = select("")
    else:
        found = sorted(row for ids in in_lists(selection.rollout_ids) for row in select(f"RolloutId IN {ids}"))
        if selection.limit:
            found = found[: int(selection.limit)]
    return [(rid, aid, adapter) for _created, rid, aid, adapter in found]


# ---------------------------------------------------------------------------------------------- reading

_TRIPLET_COLUMNS = """RolloutId, AttemptId, Adapter, TripletIndex, AttemptSequenceId, GroupId, Mode, ResourcesId, Status,
    Decision, RolloutStatus, PromptTokenIds, ResponseTokenIds, ResponseLogprobs, HasLogprobs, Reward, FinalReward,
    PolicyVersion, SpanCount, Metadata, TrajectoryMetadata,
    toUnixTimestamp64Micro(FinishedAt) AS FinishedUs, toUnixTimestamp64Micro(CreatedAt) AS CreatedUs"""


def read_trajectories(
    ch: ClickHouse, keys: Sequence[TrajectoryKey], decode: Optional[Decoder] = None
) -> Iterator[S3Trajectory]:
    """The S3 trajectories of ``keys``, in that order, read a bounded chunk of trajectories at a time."""
    for chunk in chunks(keys, max_ids=TRAJECTORIES_PER_QUERY):
        columns, rows = ch.query_rows(
            f"SELECT {_TRIPLET_COLUMNS} FROM triplets FINAL WHERE (RolloutId, AttemptId, Adapter) IN {in_list(chunk)} "
            "ORDER BY RolloutId, AttemptId, Adapter, TripletIndex"
        )
        triplets: dict[TrajectoryKey, list[dict[str, Any]]] = {key: [] for key in chunk}
        for row in rows:
            record = dict(zip(columns, row))
            triplets[(record["RolloutId"], record["AttemptId"], record["Adapter"])].append(record)
        rollouts = _read_rollouts(ch, [key[0] for key in chunk])
        for key in chunk:
            if triplets[key]:  # rows a TTL removed between the two queries are skipped, not invented
                yield _trajectory(triplets[key], rollouts.get(key[0]), decode)


def _read_rollouts(ch: ClickHouse, rollout_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    columns, rows = ch.query_rows(
        f"SELECT RolloutId, Status, Input, Metadata FROM rollouts FINAL WHERE RolloutId IN {in_list(rollout_ids)}"
    )
    return {row[0]: dict(zip(columns, row)) for row in rows}


def export_trajectories(
    ch: ClickHouse, selection: ExportSelection = ExportSelection(), decode: Optional[Decoder] = None
) -> Iterator[S3Trajectory]:
    """The selected trajectories in S3's shape, oldest first (what ``agl-stream export trajectories`` writes)."""
    return read_trajectories(ch, select_trajectories(ch, selection), decode)


def _json(text: Optional[str]) -> Any:
    """A stored JSON column (``to_json`` of a free-form field); empty means null."""
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # not ours: hand it on as it is rather than failing the export


def _seconds(micros: Optional[int]) -> Optional[float]:
    return micros / 1_000_000 if micros is not None else None


def _content(token_ids: Sequence[int], decode: Optional[Decoder]) -> S3Content:
    ids = [int(t) for t in token_ids]
    return S3Content(text=decode(ids) if decode is not None else None, token_ids=ids)


def _trajectory(rows: list[dict[str, Any]], rollout: Optional[dict[str, Any]], decode: Optional[Decoder]) -> S3Trajectory:
    transitions = []
    for row in rows:
        own = _json(row["Metadata"])
        transitions.append(
            S3Transition(
                input=_content(row["PromptTokenIds"], decode),
                output=_content(row["ResponseTokenIds"], decode),
                reward=row["Reward"],
                metadata={
                    **(own if isinstance(own, dict) else {}),
                    "triplet_index": int(row["TripletIndex"]),
                    "policy_version": row["PolicyVersion"],
                    "logprobs": [float(x) for x in row["ResponseLogprobs"]] if row["HasLogprobs"] else None,
                },
            )
        )
    first = rows[0]
    versions = [row["PolicyVersion"] for row in rows if row["PolicyVersion"] is not None]
    metadata = {
        "rollout_id": first["RolloutId"],
        "attempt_id": first["AttemptId"],
        "attempt_sequence_id": int(first["AttemptSequenceId"]),
        "mode": first["Mode"] or None,
        "status": (rollout["Status"] if rollout else None) or first["RolloutStatus"] or None,  # the rollout's, now
        "attempt_status": first["Status"] or None,
        "decision": first["Decision"],
        "final_reward": first["FinalReward"],
        "group_id": first["GroupId"] or None,
        "resources_id": first["ResourcesId"] or None,
        "policy_version": min(versions) if versions else None,  # the oldest, as Trajectory.policy_version
        "adapter": first["Adapter"],
        "span_count": int(first["SpanCount"]),
        "finished_at": _seconds(first["FinishedUs"]),
        "created_at": _seconds(first["CreatedUs"]),
        "task": _json(rollout["Input"]) if rollout else None,
        "rollout_metadata": _json(rollout["Metadata"]) if rollout else None,
        "trajectory_metadata": _json(first["TrajectoryMetadata"]),
    }
    return S3Trajectory(
        trajectory_id=first["RolloutId"], transitions=transitions, total_reward=total_reward(transitions), metadata=metadata
    )


# ---------------------------------------------------------------------------------------------- writing


def write_trajectories(trajectories: Iterable[S3Trajectory], out: TextIO, fmt: str = "jsonl") -> int:
    """Write ``jsonl`` (one trajectory per line) or ``json`` (one array, a trajectory per line); returns the count.

    Streams either way: nothing but the current trajectory is held."""
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    count = 0
    for trajectory in trajectories:
        line = trajectory.model_dump_json()
        if fmt == "jsonl":
            out.write(line + "\n")
        else:
            out.write(("[\n" if count == 0 else ",\n") + line)
        count += 1
    if fmt == "json":
        out.write("\n]\n" if count else "[]\n")
    return count


def load_decoder(path: Path) -> Decoder:
    """A decoder from a local tokenizer: a ``tokenizer.json`` (or a folder holding one) through the fast
    ``tokenizers`` library, else a folder ``transformers`` loads offline. Never downloads anything;
    special tokens are kept so the text is what the model saw."""
    if not path.exists():
        raise ExportError(f"--tokenizer {path}: no such file or folder")
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.is_file():
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ExportError("--tokenizer needs the 'tokenizers' package (pip install 'agl-stream[trainer]')") from None
        try:
            fast = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises plain Exceptions for malformed files
            raise ExportError(f"--tokenizer {file}: not a tokenizer.json ({' '.join(str(exc).split())[:200]})") from None
        return lambda ids: fast.decode(ids, skip_special_tokens=False)
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ExportError(f"--tokenizer {path}: no tokenizer.json there, and 'transformers' is not installed") from None
    try:
        slow = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # OSError, ValueError, ...: whatever the folder lacks
        raise ExportError(f"--tokenizer {path}: cannot load a tokenizer ({' '.join(str(exc).split())[:200]})") from None
    return lambda ids: str(slow.decode(ids, skip_special_tokens=False))
