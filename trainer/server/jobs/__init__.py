"""Jobs: one training run (the ``RL`` algorithm) or one evaluation of a checkpoint at a time.

A job's record (``<root>/jobs/<job_id>/job.json``) is rewritten at every state change, so a
restarted server lists what ran; a job that was running when the server stopped reads as failed
with that reason. Checkpoints live under ``<root>/checkpoints/<job_id>`` (or the job's
``checkpoint_dir``), where the learner writes them; their names are ``<job_id>/step-NNNNNNNN``.
The runners are the client's: a job enqueues tasks and waits for their outcomes, whoever runs them.

The parts, one job each: ``record`` (a job's record and its run), ``registry`` (the jobs, one at a time, the
silent-client watchdog), ``checkpoints`` (the checkpoint catalogue), ``training`` and ``evaluation`` (the two
kinds of job); :class:`JobManager` puts them together.
"""

from agl_stream_trainer.server.jobs.manager import JobManager
from agl_stream_trainer.server.jobs.training import DEFAULT_TRAINER_CONFIG, deep_merge

__all__ = ["DEFAULT_TRAINER_CONFIG", "JobManager", "deep_merge"]
