"""Benchmark: the rollout workload at a fixed offered load below saturation (default 10 rollouts/s).

The same run as :mod:`bench_rollouts` (same stack, workload, audit and CPU accounting), but rollouts
are enqueued open-loop at ``--rate`` per second, so the latencies are those of a pipeline that
keeps up: attempt ``finished`` -> its triplet row in ClickHouse, and ``finished`` -> the rollout
reading ``succeeded`` both on ``agl.rollouts`` (as a client sees it) and in the ``rollouts`` table.
DESIGN target: p99 <= 1 s for each.

Run: ``python tests/benchmarks/bench_rollouts_offered.py [--rate 10] [--rollouts 600] [--json out.json]``
(any ``bench_rollouts.py`` option works).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks import bench_rollouts  # noqa: E402

DEFAULTS = ["--rate", "10", "--rollouts", "600"]


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    args = list(sys.argv[1:] if argv is None else argv)
    # the defaults go first: options given on the command line come later and win
    return bench_rollouts.main([*DEFAULTS, *args])


if __name__ == "__main__":
    main()
