"""The training server's jobs, put together from their parts (see the package's docstring)."""

from __future__ import annotations

from agl_stream_trainer.server.jobs.training import TrainingJobs


class JobManager(TrainingJobs):
    """One training run or one evaluation at a time; checkpoints; the silent-client watchdog."""
