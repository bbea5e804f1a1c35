"""The live line a client shows while a job runs: learner step, policy version, batch reward."""

from __future__ import annotations

from typing import Any, Optional

from agl_stream.training_service.types import JobStatus


class JobProgress:
    def __init__(self, title: str, *, enabled: bool = True) -> None:
        self.title = title
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> "JobProgress":
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            # on stderr: stdout stays for results (the CLI prints the result's JSON there)
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                                      TimeElapsedColumn(), transient=False, console=Console(stderr=True))  # fmt: skip
            self._progress.start()
            self._task = self._progress.add_task(self.title, total=None, info="waiting for the server")
        return self

    def update(self, status: JobStatus) -> None:
        if self._progress is None:
            return
        info = f"{status.state} | step {status.step}"
        if status.max_steps:
            info += f"/{status.max_steps}"
        info += f" | policy v{status.policy_version}"
        if status.reward_mean is not None:
            info += f" | reward {status.reward_mean:.3f}"
        total: Optional[int] = status.max_steps
        self._progress.update(self._task, completed=status.step, total=total, info=info)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
