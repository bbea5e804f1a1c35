"""A nemesis's schedule: seeded random faults over a run, printed, and the same again from the same seed.

Faults arrive as a Poisson process (exponential gaps, ``every`` seconds apart on average), so several can
overlap: a pause still running when a kill lands elsewhere. Each picks a target and a kind the target
allows:

- ``kill``: SIGKILL, then a restart after ``restart_after`` seconds, like a supervisor's backoff;
- ``pause``: SIGSTOP for ``hold`` seconds, then SIGCONT (a stalled VM, a long GC pause);
- ``partition``: the target's link cut for ``hold`` seconds, then restored.

Pure data and arithmetic: the executor (``tests.faults.nemesis.run``) applies it to a running topology.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Sequence

KINDS = ("kill", "pause", "partition")


@dataclass(frozen=True)
class Target:
    """Something a fault can hit, and the kinds of fault it allows."""

    name: str
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the workload starts
    kind: str  # kill | pause | partition
    target: str
    hold: float  # kill: seconds until the restart; pause, partition: seconds until it ends

    @property
    def ends(self) -> float:
        return self.at + self.hold

    def describe(self, *, at: bool = True) -> str:
        verb = {"kill": "SIGKILL, restart after", "pause": "SIGSTOP for", "partition": "cut off for"}[self.kind]
        what = f"{self.kind:<9} {self.target:<14} {verb} {self.hold:.1f} s"
        return f"{self.at:7.1f} s  {what}" if at else what


#: how long each kind holds, seconds (uniform): restarts like a supervisor's backoff, pauses and cuts past a
#: session timeout sometimes (the pipeline's consumers use 6-10 s)
HOLD_RANGE = {"kill": (1.0, 8.0), "pause": (1.0, 12.0), "partition": (1.0, 15.0)}


def make_schedule(seed: int, duration: float, every: float, targets: Sequence[Target], *, start_after: float = 5.0,
                  quiet_tail: float = 0.0) -> list[Fault]:  # fmt: skip
    """Faults at random over ``[start_after, duration - quiet_tail)``, ``every`` seconds apart on average.

    One fault per target at a time: a fault whose target is still down or held is skipped over (its slot in
    the random sequence is still used, so the rest of the schedule does not depend on it)."""
    if every <= 0:
        raise ValueError("every must be positive")
    if not targets:
        raise ValueError("no targets")
    rng = random.Random(seed)
    busy_until: dict[str, float] = {}
    faults: list[Fault] = []
    t = start_after
    while True:
        t += rng.expovariate(1.0 / every)
        target = rng.choice(list(targets))
        kind = rng.choice(target.kinds)
        low, high = HOLD_RANGE[kind]
        hold = round(rng.uniform(low, high), 1)
        if t >= duration - quiet_tail:
            return faults
        if busy_until.get(target.name, 0.0) > t:
            continue
        fault = Fault(round(t, 1), kind, target.name, hold)
        busy_until[target.name] = fault.ends + 1.0  # back and settled before the next one
        faults.append(fault)


def overlapping(faults: Sequence[Fault]) -> int:
    """The most faults in effect at one moment."""
    events = sorted([(f.at, 1) for f in faults] + [(f.ends, -1) for f in faults])
    most = now = 0
    for _t, step in events:
        now += step
        most = max(most, now)
    return most


def to_json(faults: Sequence[Fault]) -> list[dict[str, object]]:
    return [asdict(f) for f in faults]


def format_schedule(seed: int, faults: Sequence[Fault]) -> str:
    counts = {k: sum(f.kind == k for f in faults) for k in KINDS}
    head = (f"nemesis seed {seed}: {len(faults)} faults ({', '.join(f'{n} {k}' for k, n in counts.items() if n)}), "
            f"at most {overlapping(faults)} at once")  # fmt: skip
    return "\n".join([head, *(f.describe() for f in faults)])


if __name__ == "__main__":  # python -m tests.faults.nemesis.schedule SEED DURATION EVERY: the schedule alone
    import sys

    seed, duration, every = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    demo = [Target("processors", ("kill", "pause")), Target("runners-0", ("kill", "pause")),
            Target("broker-link", ("partition",))]  # fmt: skip
    print(format_schedule(seed, make_schedule(seed, duration, every, demo)))
