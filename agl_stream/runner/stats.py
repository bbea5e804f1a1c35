"""Runner counters and their display: a rich live line on a terminal, nothing extra otherwise."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class RunnerStats:
    started_at: float = field(default_factory=time.monotonic)
    rollouts_started: int = 0
    rollouts_succeeded: int = 0
    rollouts_failed: int = 0
    rollouts_rejected: int = 0
    spans: int = 0
    spans_dropped: int = 0
    hook_errors: int = 0
    running: int = 0
    redelivered_skipped: int = 0  # task records of attempts this runner had already claimed (not run again)

    @property
    def rollouts_done(self) -> int:
        return self.rollouts_succeeded + self.rollouts_failed

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started_at
        return self.rollouts_done / elapsed if elapsed > 0 else 0.0

    def summary(self) -> str:
        return (
            f"rollouts done {self.rollouts_done} (succeeded {self.rollouts_succeeded}, failed {self.rollouts_failed}), "
            f"running {self.running}, rejected tasks {self.rollouts_rejected}, spans {self.spans} "
            f"(dropped {self.spans_dropped}), {self.rate:.1f} rollouts/s"
        )


def progress_wanted(flag: Optional[bool]) -> bool:
    """Explicit flag wins; by default show progress only on an interactive terminal."""
    return sys.stderr.isatty() if flag is None else flag


async def show_progress(stats: RunnerStats, stop: asyncio.Event, max_rollouts: Optional[int] = None) -> None:
    """Render a live progress line until ``stop`` is set."""
    from rich.console import Console
    from rich.live import Live

    console = Console(stderr=True)

    def render() -> Any:
        total = f"/{max_rollouts}" if max_rollouts else ""
        return (
            f"[bold]agl-stream runner[/bold]  done [green]{stats.rollouts_succeeded}[/green] ok, "
            f"[red]{stats.rollouts_failed}[/red] failed{total}  running {stats.running}  "
            f"spans {stats.spans}  {stats.rate:.1f} rollouts/s"
        )

    with Live(render(), console=console, refresh_per_second=4, transient=False) as live:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 0.25)
            except asyncio.TimeoutError:
                pass
            live.update(render())
