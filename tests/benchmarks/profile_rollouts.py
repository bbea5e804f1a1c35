"""Profile the rollout benchmark: py-spy on every processor app and one runner, while it runs.

    python tests/benchmarks/profile_rollouts.py --out reports/profile            # default workload
    python tests/benchmarks/profile_rollouts.py --out reports/profile --gil      # only GIL holders
    python tests/benchmarks/profile_rollouts.py --out reports/profile -- --rate 10

Runs ``bench_rollouts.py`` (arguments after ``--`` are passed on), waits until the processor apps
and the runners are up and the workload is flowing, then records each process with ``py-spy record
--format raw`` (collapsed stacks, readable by speedscope and flamegraph.pl) for ``--seconds``, and
prints, per process, the functions with the most samples, self and inclusive. Besides the stacks it
writes each process's CPU split between user and kernel time (``/proc/<pid>/stat``) and its minor
page faults over the same window: kernel time from page faults does not show in a Python profile.

py-spy is a development tool, not a dependency: ``pip install py-spy`` (it needs ptrace; in a
container, ``--cap-add SYS_PTRACE``). docs/performance.md says what the profiles showed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from process_sampler import label  # noqa: E402

APPS = ("state-machine", "triplets", "sinks")
TICK = os.sysconf("SC_CLK_TCK")


def find_targets(root: psutil.Process) -> dict[str, int]:
    """The processor apps (by name) and the first runner process under ``root``."""
    found: dict[str, int] = {}
    for proc in root.children(recursive=True):
        name = label(proc)
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if name in APPS:
            found.setdefault(name, proc.pid)
        elif "runner" in cmd and "--n-runners 1" in cmd:
            found.setdefault("runner", proc.pid)
    return found


def proc_times(pid: int) -> Optional[tuple[float, float, int]]:
    """(user seconds, kernel seconds, minor faults) of a process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) / TICK, int(fields[12]) / TICK, int(fields[7])


def summarize(path: Path, top: int) -> str:
    """Self and inclusive sample counts per function of a py-spy raw (collapsed) file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")[1:]]  # drop the thread frame and lines
        total += n
        if frames:
            own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "  (no samples)\n"
    lines = [f"  {total} samples"]
    for title, counts in (("self", own), ("inclusive", inclusive)):
        lines.append(f"  -- {title}")
        lines += [f"  {100 * c / total:5.1f}%  {f[:140]}" for f, c in counts.most_common(top)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("reports/profile"), help="where profiles go")
    parser.add_argument("--seconds", type=int, default=12, help="recording window per process")
    parser.add_argument("--warmup", type=float, default=6.0, help="seconds after the runners are up")
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="only sample the thread holding the GIL")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("bench_args", nargs="*", help="arguments for bench_rollouts.py (after --)")
    args = parser.parse_args()
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        print("error: py-spy is not installed (pip install py-spy)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    bench = subprocess.Popen([sys.executable, str(HERE / "bench_rollouts.py"), *args.bench_args],
                             stdout=(args.out / "bench.log").open("w"), stderr=subprocess.STDOUT)  # fmt: skip
    root = psutil.Process(bench.pid)
    targets: dict[str, int] = {}
    deadline = time.monotonic() + 180
    while len(targets) < len(APPS) + 1 and time.monotonic() < deadline and bench.poll() is None:
        targets = find_targets(root)
        time.sleep(0.5)
    if len(targets) < len(APPS) + 1:
        bench.kill()
        print(f"error: found only {sorted(targets)} (see {args.out / 'bench.log'})", file=sys.stderr)
        return 1
    time.sleep(args.warmup)
    before = {name: proc_times(pid) for name, pid in targets.items()}
    flags = ["--format", "raw", "--nonblocking", "--threads", "--rate", str(args.rate), "--duration", str(int(args.seconds))]
    spies = {
        name: subprocess.Popen([spy, "record", "--pid", str(pid), *flags, *(["--gil"] if args.gil else []),
                                "--output", str(args.out / f"{name}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        for name, pid in targets.items()
    }
    time.sleep(args.seconds)
    after = {name: proc_times(pid) for name, pid in targets.items()}
    for proc in spies.values():
        proc.wait()
    code = bench.wait()
    report = [f"bench_rollouts {' '.join(args.bench_args)} (exit {code}); window {args.seconds:.0f} s\n"]
    for name in targets:
        a, b = before[name], after[name]
        if a and b:
            report.append(f"{name}: user {b[0] - a[0]:.2f} s, kernel {b[1] - a[1]:.2f} s, "
                          f"minor faults {b[2] - a[2]}\n")  # fmt: skip
        path = args.out / f"{name}.txt"
        report.append(summarize(path, args.top) if path.exists() else "  (py-spy wrote nothing: ptrace allowed?)\n")
    text = "\n".join(report)
    (args.out / "summary.txt").write_text(text)
    print(text)
    print(f"stacks: {args.out}/<process>.txt (collapsed; open in https://www.speedscope.app)")
    return code


if __name__ == "__main__":
    sys.exit(main())
