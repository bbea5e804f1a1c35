"""py-spy on every Python process of a few process trees, for as long as a benchmark run lasts.

``SpyTrees(out).attach("front_door", pid)`` records the process and each Python descendant (a supervisor's
apps, uvicorn's workers) with ``py-spy record --format raw`` (collapsed stacks: speedscope, flamegraph.pl) into
``out/<role>-<label>-<pid>.txt``; ``stop()`` ends the recordings (SIGINT: py-spy writes its file) and returns
each file's summary (the functions with the most samples, self and inclusive: ``profile_rollouts.summarize``; the busy
samples by route, HTTP machinery, Kafka client, ClickHouse: ``spy_breakdown``).
py-spy is a development tool (pinned in the dev extra); it needs ptrace.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests.benchmarks.process_sampler import label
from tests.benchmarks.profile_rollouts import summarize
from tests.benchmarks.spy_breakdown import breakdown


def _is_python(proc: psutil.Process) -> bool:
    try:
        return "python" in Path(proc.exe()).name
    except psutil.Error:
        return False


class SpyTrees:
    def __init__(self, out: Path, *, rate: int = 50) -> None:
        spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
        if spy is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.spy = spy
        self.out = out
        self.rate = rate
        self.recordings: dict[Path, subprocess.Popen[bytes]] = {}
        out.mkdir(parents=True, exist_ok=True)

    def attach(self, role: str, pid: int) -> None:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            if not _is_python(proc):
                continue
            path = self.out / f"{role}-{label(proc)}-{proc.pid}.txt"
            self.recordings[path] = subprocess.Popen(
                [self.spy, "record", "--pid", str(proc.pid), "--format", "raw", "--nonblocking", "--rate", str(self.rate),
                 "--output", str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip

    def stop(self, top: int = 15) -> dict[str, str]:
        for proc in self.recordings.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        summaries: dict[str, str] = {}
        for path, proc in self.recordings.items():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            summaries[path.stem] = (summarize(path, top) + "  -- busy samples by what they were doing\n" + breakdown(path)
                                    if path.exists() else "  (py-spy wrote nothing: ptrace allowed?)\n")  # fmt: skip
        (self.out / "summary.txt").write_text("".join(f"{name}\n{text}\n" for name, text in summaries.items()))
        return summaries
