"""Exports of the agl tables in other tools' shapes (``agl-stream export ...``).

Why a package of its own: an export reads the tables the sinks write and writes files another
trainer or toolkit reads, so it depends on the ClickHouse side only and never on a topic.
"""

from agl_stream_processors.export.trajectories import (
    ExportError,
    ExportSelection,
    S3Content,
    S3Trajectory,
    S3Transition,
    export_trajectories,
    total_reward,
    write_trajectories,
)

__all__ = [
    "ExportError", "ExportSelection", "S3Content", "S3Trajectory", "S3Transition", "export_trajectories", "total_reward",
    "write_trajectories",
]  # fmt: skip
