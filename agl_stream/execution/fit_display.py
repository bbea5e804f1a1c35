"""``Trainer.fit``'s live display: learner step, policy version, batch reward, rollouts done and rate, ETA.

It follows two topics like any other consumer (no import of a service): ``agl.rollouts`` for
rollouts reaching a final status, ``agl.training_steps`` for the learner's steps (the record says
the run's step budget, which gives the ETA; without one the ETA comes from the expected rollouts,
when the caller knows them). On a terminal the display is a rich live panel, and the job's log
lines go to a file instead of scrolling past it (warnings and errors still show above the panel);
elsewhere (CI, a pipe) logging is left alone and the panel is printed once, at the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from agl_stream.config import Settings
from agl_stream.types import TERMINAL_ROLLOUT_STATUSES, RolloutSnapshot, TrainingStep

logger = logging.getLogger(__name__)

RATE_WINDOW_S = 30.0


@dataclass
class FitState:
    """What the display shows, fed by records; pure bookkeeping (tested without a broker)."""

    started_at: float = field(default_factory=time.time)
    expected_rollouts: Optional[int] = None
    succeeded: int = 0
    failed: int = 0
    step: Optional[TrainingStep] = None
    first_step_at: Optional[float] = None
    finished: dict[str, str] = field(default_factory=dict)  # rollout id -> final status
    _recent: deque[float] = field(default_factory=deque)  # when the last rollouts finished (for the rate)

    def on_rollout(self, snapshot: RolloutSnapshot, now: Optional[float] = None) -> None:
        rollout = snapshot.rollout
        if rollout.status not in TERMINAL_ROLLOUT_STATUSES or rollout.rollout_id in self.finished:
            return
        if rollout.start_time is not None and rollout.start_time < self.started_at - 5:
            return  # a rollout of an earlier job on the same topic
        self.finished[rollout.rollout_id] = rollout.status
        if rollout.status == "succeeded":
            self.succeeded += 1
        else:
            self.failed += 1
        self._recent.append(now if now is not None else time.time())

    def on_step(self, step: TrainingStep) -> None:
        if step.timestamp < self.started_at - 5:
            return
        if self.step is None or step.step >= self.step.step:
            self.step = step
        if self.first_step_at is None:
            self.first_step_at = step.timestamp

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    def rate(self, now: Optional[float] = None) -> float:
        """Rollouts finished per second over the last 30 seconds (since the start when shorter)."""
        now = now if now is not None else time.time()
        while self._recent and self._recent[0] < now - RATE_WINDOW_S:
            self._recent.popleft()
        window = min(RATE_WINDOW_S, max(now - self.started_at, 1e-9))
        return len(self._recent) / window

    def eta(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds left: from the learner's pace toward its step budget, else from the rollout rate."""
        now = now if now is not None else time.time()
        step = self.step
        if step is not None and step.total_steps:
            if step.step >= step.total_steps:
                return 0.0
            per_step = (now - self.started_at) / max(step.step, 1)
            return per_step * (step.total_steps - step.step)
        if self.expected_rollouts:
            rate = self.rate(now)
            left = max(self.expected_rollouts - self.done, 0)
            return left / rate if rate > 0 else None
        return None


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "–"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else (f"{minutes}m {secs:02d}s" if minutes else f"{secs}s")


def render(state: FitState, *, dashboard_url: Optional[str] = None, log_file: Optional[Path] = None,
           now: Optional[float] = None) -> Any:  # fmt: skip
    """The panel: a progress bar toward the step budget (or the expected rollouts) and the numbers."""
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table

    now = now if now is not None else time.time()
    step = state.step
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    if step is not None and step.total_steps:
        total, completed, unit = step.total_steps, step.step, "steps"
    elif state.expected_rollouts:
        total, completed, unit = state.expected_rollouts, state.done, "rollouts"
    else:
        total, completed, unit = None, 0, ""
    if total:
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=total, completed=min(completed, total), width=36),
                    f"{completed}/{total} {unit}", f"[dim]ETA[/] {_duration(state.eta(now))}")  # fmt: skip
        grid.add_row("progress", bar)
    if step is not None:
        grid.add_row("learner", f"step [bold]{step.step}[/]  ·  policy [bold]v{step.policy_version}[/]  ·  batch reward "
                     f"[bold]{step.reward_mean:.3f}[/]  ·  loss {step.loss:.4f}  ·  stale {step.staleness_mean:.2f}")  # fmt: skip
    else:
        grid.add_row("learner", "[dim]no step yet[/]")
    failed = f"  ·  [red]{state.failed} failed[/]" if state.failed else ""
    grid.add_row("rollouts", f"[bold]{state.done}[/] done ([green]{state.succeeded} succeeded[/]{failed})  ·  "
                 f"[bold]{state.rate(now):.1f}[/]/s")  # fmt: skip
    grid.add_row("elapsed", _duration(now - state.started_at))
    if dashboard_url:
        grid.add_row("dashboard", f"[link={dashboard_url}]{dashboard_url}[/link]")
    if log_file is not None:
        grid.add_row("logs", str(log_file))
    return Panel(grid, title="[bold]agl-stream[/] · training", title_align="left", border_style="magenta", expand=False)


class FitProgress:
    """Follow the job's topics and keep the panel live until the job ends (an async context manager)."""

    def __init__(
        self,
        settings: Settings,
        *,
        dashboard_url: Optional[str] = None,
        log_file: Optional[Path] = None,
        expected_rollouts: Optional[int] = None,
        console: Any = None,
    ) -> None:
        from rich.console import Console

        self.settings = settings
        self.dashboard_url = dashboard_url
        self.log_file = log_file
        self.console = console or Console(stderr=True)
        self.live_terminal = bool(self.console.is_terminal)
        self.state = FitState(expected_rollouts=expected_rollouts)
        self._followers: list[Any] = []
        self._live: Any = None
        self._task: Optional[asyncio.Task[None]] = None
        self._saved_handlers: Optional[tuple[list[logging.Handler], int]] = None

    async def __aenter__(self) -> "FitProgress":
        from agl_stream.client.follow import TopicFollower

        if self.live_terminal and self.log_file is not None:
            self._route_logs(self.log_file)
        self._followers = [
            TopicFollower(self.settings, "rollouts", RolloutSnapshot, lambda _k, v: self.state.on_rollout(v)),
            TopicFollower(self.settings, "training_steps", TrainingStep, lambda _k, v: self.state.on_step(v)),
        ]
        for follower in self._followers:
            await follower.start(catch_up_timeout=1.0)
        if self.live_terminal:
            from rich.live import Live

            self._live = Live(self._render(), console=self.console, refresh_per_second=2, transient=False)
            self._live.start()
            self._task = asyncio.create_task(self._refresh(), name="fit-progress")
        elif self.dashboard_url:
            self.console.print(f"agl-stream dashboard: {self.dashboard_url}")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._settle()
        for follower in self._followers:
            await follower.stop()
        if self._live is not None:
            self._live.update(self._render())
            self._live.stop()
        else:
            self.console.print(self._render())
        self._restore_logs()

    async def _settle(self, quiet: float = 0.5, limit: float = 3.0) -> None:
        """Let the last snapshots arrive (the job ends right after its last rollout): the final panel must be true."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            changed = await asyncio.gather(*(f.wait_changed(quiet) for f in self._followers))
            if not any(changed):
                return

    def _render(self) -> Any:
        return render(self.state, dashboard_url=self.dashboard_url, log_file=self.log_file if self._saved_handlers else None)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self._live.update(self._render())

    def _route_logs(self, path: Path) -> None:
        """Log lines to ``path``; warnings and errors also above the live panel."""
        from rich.logging import RichHandler

        root = logging.getLogger()
        self._saved_handlers = (list(root.handlers), root.level)
        path.parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(path, encoding="utf-8")
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        to_console = RichHandler(console=self.console, level=logging.WARNING, show_path=False, markup=False)
        root.handlers = [to_file, to_console]

    def _restore_logs(self) -> None:
        if self._saved_handlers is None:
            return
        root = logging.getLogger()
        for handler in root.handlers:
            handler.close()
        root.handlers, level = self._saved_handlers
        root.setLevel(level)
        self._saved_handlers = None
