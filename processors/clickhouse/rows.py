"""Topic records to table rows for every sink table except spans (see :mod:`agl_stream_processors.clickhouse.spans`).

Each converter takes the decoded record (and the Kafka record time for fallbacks) and returns the
row dicts it contributes; :class:`~agl_stream_processors.clickhouse.columns.RowError` marks a record that
cannot be stored.
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional

import pyarrow as pa

from agl_stream.types import (
    AttemptEvent,
    DatasetLine,
    DeadLetter,
    ResourcesUpdate,
    RolloutSnapshot,
    TrainingRun,
    TrainingStep,
    Trajectory,
    Worker,
)
from agl_stream_processors.clickhouse.columns import (
    STR_LIST,
    UTC_MS,
    UTC_US,
    RowError,
    float_list,
    seconds_to,
    to_json,
    uint32_list,
)

US = 1_000_000

ROLLOUT_SCHEMA = pa.schema(
    [
        ("RolloutId", pa.string()),
        ("Status", pa.string()),
        ("Mode", pa.string()),
        ("ResourcesId", pa.string()),
        ("StartTime", UTC_US),
        ("EndTime", UTC_US),
        ("Attempts", pa.uint32()),
        ("AttemptId", pa.string()),
        ("AttemptSequenceId", pa.uint32()),
        ("AttemptStatus", pa.string()),
        ("WorkerId", pa.string()),
        ("Input", pa.string()),
        ("Config", pa.string()),
        ("Metadata", pa.string()),
        ("UpdatedAt", UTC_US),
    ]
)

ATTEMPT_SCHEMA = pa.schema(
    [
        ("Timestamp", UTC_US),
        ("Kind", pa.string()),
        ("RolloutId", pa.string()),
        ("AttemptId", pa.string()),
        ("AttemptSequenceId", pa.uint32()),
        ("WorkerId", pa.string()),
        ("Status", pa.string()),
        ("Error", pa.string()),
        ("Mode", pa.string()),
        ("ResourcesId", pa.string()),
        ("SpanCount", pa.uint64()),
        ("Stats", pa.string()),
        ("Metadata", pa.string()),
    ]
)

RESOURCES_SCHEMA = pa.schema(
    [
        ("ResourcesId", pa.string()),
        ("Version", pa.uint64()),
        ("CreateTime", UTC_US),
        ("UpdateTime", UTC_US),
        ("PolicyVersion", pa.uint64()),
        ("ResourceNames", STR_LIST),
        ("Resources", pa.string()),
    ]
)

TRIPLET_SCHEMA = pa.schema(
    [
        ("RolloutId", pa.string()),
        ("AttemptId", pa.string()),
        ("AttemptSequenceId", pa.uint32()),
        ("Adapter", pa.string()),
        ("TripletIndex", pa.uint32()),
        ("TripletCount", pa.uint32()),
        ("GroupId", pa.string()),
        ("Mode", pa.string()),
        ("ResourcesId", pa.string()),
        ("Status", pa.string()),
        ("Decision", pa.string()),
        ("RolloutStatus", pa.string()),
        ("PromptTokenIds", pa.list_(pa.uint32())),
        ("ResponseTokenIds", pa.list_(pa.uint32())),
        ("ResponseLogprobs", pa.list_(pa.float32())),
        ("HasLogprobs", pa.bool_()),
        ("Reward", pa.float64()),
        ("FinalReward", pa.float64()),
        ("PolicyVersion", pa.uint64()),
        ("SpanCount", pa.uint32()),
        ("Metadata", pa.string()),
        ("TrajectoryMetadata", pa.string()),
        ("FinishedAt", UTC_US),
        ("CreatedAt", UTC_US),
    ]
)

WORKER_SCHEMA = pa.schema(
    [
        ("WorkerId", pa.string()),
        ("Status", pa.string()),
        ("LastHeartbeatTime", UTC_US),
        ("LastDequeueTime", UTC_US),
        ("LastBusyTime", UTC_US),
        ("LastIdleTime", UTC_US),
        ("CurrentRolloutId", pa.string()),
        ("CurrentAttemptId", pa.string()),
        ("HeartbeatStats", pa.string()),
        ("UpdatedAt", UTC_US),
    ]
)

DEAD_LETTER_SCHEMA = pa.schema(
    [
        ("SourceTopic", pa.string()),
        ("Partition", pa.int32()),
        ("Offset", pa.int64()),
        ("Processor", pa.string()),
        ("PayloadHash", pa.uint64()),
        ("Key", pa.string()),
        ("Payload", pa.binary()),
        ("Reason", pa.string()),
        ("ErrorType", pa.string()),
        ("ReceivedAt", UTC_US),
    ]
)

TRAINING_STEP_SCHEMA = pa.schema(
    [
        ("RunId", pa.string()),
        ("Step", pa.uint64()),
        ("PolicyVersion", pa.uint64()),
        ("Timestamp", UTC_MS),
        ("Loss", pa.float64()),
        ("PolicyLoss", pa.float64()),
        ("KL", pa.float64()),
        ("Entropy", pa.float64()),
        ("RewardMean", pa.float64()),
        ("RewardStd", pa.float64()),
        ("AdvantageMean", pa.float64()),
        ("AdvantageStd", pa.float64()),
        ("GradNorm", pa.float64()),
        ("TokensPerSecond", pa.float64()),
        ("StalenessMean", pa.float64()),
        ("PublishSeconds", pa.float64()),
        ("NumTriplets", pa.uint64()),
        ("NumSequences", pa.uint64()),
        ("LearningRate", pa.float64()),
        ("Extra", pa.map_(pa.string(), pa.float64())),
    ]
)

TRAINING_RUN_SCHEMA = pa.schema(
    [
        ("RunId", pa.string()),
        ("Status", pa.string()),
        ("StartedAt", UTC_MS),
        ("UpdatedAt", UTC_MS),
        ("EndedAt", UTC_MS),
        ("Steps", pa.uint64()),
        ("AskedSteps", pa.uint64()),
        ("PolicyVersion", pa.uint64()),
        ("StopReason", pa.string()),
        ("Shortfall", pa.string()),
        ("Error", pa.string()),
        ("Algorithm", pa.string()),
        ("Aggregation", pa.string()),
        ("TrainedGroups", pa.uint64()),
        ("EqualRewardGroups", pa.uint64()),
        ("DroppedGroups", pa.uint64()),
        ("LeftOutGroups", pa.uint64()),
        ("FailedRollouts", pa.uint64()),
    ]
)


def _us(value: Optional[float], what: str) -> Optional[int]:
    return seconds_to(value, US, what)


def _record_us(record_timestamp_ms: Optional[int]) -> int:
    return (record_timestamp_ms or 0) * 1000


def rollout_rows(snapshot: RolloutSnapshot, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    rollout, attempt = snapshot.rollout, snapshot.attempt
    return [
        {
            "RolloutId": rollout.rollout_id,
            "Status": rollout.status,
            "Mode": rollout.mode or "",
            "ResourcesId": rollout.resources_id or "",
            "StartTime": _us(rollout.start_time, "rollout.start_time"),
            "EndTime": _us(rollout.end_time, "rollout.end_time"),
            "Attempts": snapshot.attempts,
            "AttemptId": attempt.attempt_id if attempt else "",
            "AttemptSequenceId": attempt.sequence_id if attempt else 0,
            "AttemptStatus": attempt.status if attempt else "",
            "WorkerId": (attempt.worker_id or "") if attempt else "",
            "Input": to_json(rollout.input),
            "Config": to_json(rollout.config.model_dump(mode="json")),
            "Metadata": to_json(rollout.metadata),
            "UpdatedAt": _us(snapshot.updated_at, "updated_at"),
        }
    ]


def attempt_rows(event: AttemptEvent, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    if event.span_count is not None and event.span_count < 0:
        raise RowError(f"span_count must not be negative, got {event.span_count}")
    return [
        {
            "Timestamp": _us(event.timestamp, "timestamp"),
            "Kind": event.kind,
            "RolloutId": event.rollout_id,
            "AttemptId": event.attempt_id,
            "AttemptSequenceId": event.attempt_sequence_id,
            "WorkerId": event.worker_id or "",
            "Status": event.status or "",
            "Error": event.error or "",
            "Mode": event.mode or "",
            "ResourcesId": event.resources_id or "",
            "SpanCount": event.span_count,
            "Stats": to_json(event.stats),
            "Metadata": to_json(event.metadata),
        }
    ]


def resources_rows(update: ResourcesUpdate, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    versions = [getattr(r, "policy_version", None) for r in update.resources.values()]
    versions = [v for v in versions if v is not None]
    return [
        {
            "ResourcesId": update.resources_id,
            "Version": update.version,
            "CreateTime": _us(update.create_time, "create_time"),
            "UpdateTime": _us(update.update_time, "update_time"),
            "PolicyVersion": max(versions) if versions else None,
            "ResourceNames": sorted(update.resources),
            "Resources": to_json({k: v.model_dump(mode="json", exclude={"api_key"}) for k, v in update.resources.items()}),
        }
    ]


def triplet_rows(trajectory: Trajectory, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    """One row per triplet; a trajectory without triplets contributes no rows."""
    rows = []
    count = len(trajectory.triplets)
    for index, triplet in enumerate(trajectory.triplets):
        logprobs = triplet.response.get("logprobs")
        if triplet.policy_version is not None and triplet.policy_version < 0:
            raise RowError(f"triplet {index}: policy_version must not be negative")
        rows.append(
            {
                "RolloutId": trajectory.rollout_id,
                "AttemptId": trajectory.attempt_id,
                "AttemptSequenceId": trajectory.attempt_sequence_id,
                "Adapter": trajectory.adapter,
                "TripletIndex": index,
                "TripletCount": count,
                "GroupId": trajectory.group_id or "",
                "Mode": trajectory.mode or "",
                "ResourcesId": trajectory.resources_id or "",
                "Status": trajectory.status,
                "Decision": trajectory.decision,
                "RolloutStatus": trajectory.rollout_status or "",
                "PromptTokenIds": uint32_list(triplet.prompt.get("token_ids"), f"triplet {index} prompt token_ids"),
                "ResponseTokenIds": uint32_list(triplet.response.get("token_ids"), f"triplet {index} response token_ids"),
                "ResponseLogprobs": float_list(logprobs, f"triplet {index} response logprobs"),
                "HasLogprobs": logprobs is not None,
                "Reward": triplet.reward,
                "FinalReward": trajectory.final_reward,
                "PolicyVersion": triplet.policy_version,
                "SpanCount": trajectory.span_count,
                "Metadata": to_json(triplet.metadata),
                "TrajectoryMetadata": to_json(trajectory.metadata),
                "FinishedAt": _us(trajectory.finished_at, "finished_at"),
                "CreatedAt": _us(trajectory.created_at, "created_at"),
            }
        )
    return rows


def worker_rows(worker: Worker, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    updated = worker.last_heartbeat_time
    return [
        {
            "WorkerId": worker.worker_id,
            "Status": worker.status,
            "LastHeartbeatTime": _us(worker.last_heartbeat_time, "last_heartbeat_time"),
            "LastDequeueTime": _us(worker.last_dequeue_time, "last_dequeue_time"),
            "LastBusyTime": _us(worker.last_busy_time, "last_busy_time"),
            "LastIdleTime": _us(worker.last_idle_time, "last_idle_time"),
            "CurrentRolloutId": worker.current_rollout_id or "",
            "CurrentAttemptId": worker.current_attempt_id or "",
            "HeartbeatStats": to_json(worker.heartbeat_stats),
            "UpdatedAt": _us(updated, "last_heartbeat_time") if updated is not None else _record_us(record_timestamp_ms),
        }
    ]


PAYLOAD_HASH_PREFIX = 4096


def payload_hash(payload: bytes) -> int:
    """Hash of the first 4 KiB: the copy that reaches ``agl.dlq`` may be cut to fit the broker limit,
    and must still collapse with the full copy a sink wrote directly."""
    return int.from_bytes(hashlib.blake2b(payload[:PAYLOAD_HASH_PREFIX], digest_size=8).digest(), "little")


def dead_letter_rows(letter: DeadLetter, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    return [
        {
            "SourceTopic": letter.source_topic,
            "Partition": letter.partition if letter.partition is not None else -1,
            "Offset": letter.offset if letter.offset is not None else -1,
            "Processor": letter.processor,
            "PayloadHash": payload_hash(letter.payload),
            "Key": (letter.key or b"").decode(errors="replace"),
            "Payload": letter.payload,
            "Reason": letter.reason,
            "ErrorType": letter.error_type,
            "ReceivedAt": _us(letter.received_at, "received_at"),
        }
    ]


DATASET_SCHEMA = pa.schema(
    [
        ("DataId", pa.string()),
        ("Split", pa.string()),
        ("Line", pa.uint64()),
        ("Lines", pa.uint64()),
        ("Item", pa.string()),
        ("FileName", pa.string()),
        ("UploadedAt", UTC_MS),
    ]
)


def dataset_rows(line: DatasetLine, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    """One ``datasets`` row per uploaded line, the item kept as the JSON text that was uploaded."""
    return [
        {
            "DataId": line.data_id,
            "Split": line.split,
            "Line": line.line,
            "Lines": line.lines,
            "Item": line.item,
            "FileName": line.file_name,
            "UploadedAt": seconds_to(line.uploaded_at, 1000, "uploaded_at"),
        }
    ]


def training_step_rows(step: TrainingStep, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    """One ``training_steps`` row; the staleness histogram rides in ``Extra`` as ``staleness_<versions behind>``."""
    extra = {**step.extra, **{f"staleness_{age}": float(rows) for age, rows in step.staleness_histogram.items()}}
    if step.total_steps is not None:
        extra["total_steps"] = float(step.total_steps)
    return [
        {
            "RunId": step.run_id,
            "Step": step.step,
            "PolicyVersion": step.policy_version,
            "Timestamp": seconds_to(step.timestamp, 1000, "timestamp"),
            "Loss": step.loss,
            "PolicyLoss": step.policy_loss,
            "KL": step.kl,
            "Entropy": step.entropy,
            "RewardMean": step.reward_mean,
            "RewardStd": step.reward_std,
            "AdvantageMean": step.advantage_mean,
            "AdvantageStd": step.advantage_std,
            "GradNorm": step.grad_norm,
            "TokensPerSecond": step.tokens_per_second,
            "StalenessMean": step.staleness_mean,
            "PublishSeconds": step.publish_seconds,
            "NumTriplets": step.num_triplets,
            "NumSequences": step.num_sequences,
            "LearningRate": step.learning_rate,
            "Extra": list(extra.items()),
        }
    ]


def training_run_rows(run: TrainingRun, record_timestamp_ms: Optional[int] = None) -> list[dict[str, Any]]:
    """One ``training_runs`` row per record; the newest (``UpdatedAt``) of a run is the one that stays."""
    return [
        {
            "RunId": run.run_id,
            "Status": run.status,
            "StartedAt": seconds_to(run.started_at, 1000, "started_at"),
            "UpdatedAt": seconds_to(run.updated_at, 1000, "updated_at"),
            "EndedAt": None if run.ended_at is None else seconds_to(run.ended_at, 1000, "ended_at"),
            "Steps": run.steps,
            "AskedSteps": run.asked_steps,
            "PolicyVersion": run.policy_version,
            "StopReason": run.stop_reason or "",
            "Shortfall": run.shortfall or "",
            "Error": run.error or "",
            "Algorithm": run.algorithm,
            "Aggregation": run.aggregation,
            "TrainedGroups": run.trained_groups,
            "EqualRewardGroups": run.equal_reward_groups,
            "DroppedGroups": run.dropped_groups,
            "LeftOutGroups": run.left_out_groups,
            "FailedRollouts": run.failed_rollouts,
        }
    ]
