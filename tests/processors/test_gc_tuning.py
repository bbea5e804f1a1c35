"""A processors process collects less often and never walks what start-up created, yet still frees cycles."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc, weakref
from agl_stream_processors.gc_tuning import YOUNG_THRESHOLD, tune_gc

class Node:
    pass

tune_gc()
assert gc.get_threshold()[0] == YOUNG_THRESHOLD and gc.get_freeze_count() > 0
cycle = Node(); cycle.me = cycle
gone = weakref.ref(cycle)
del cycle
kept = [[] for _ in range(2 * YOUNG_THRESHOLD)]  # containers that stay alive, as a batch does, start a collection
assert gone() is None, "a cycle made after tuning was not collected"
print("ok")
"""


def test_tuning_freezes_start_up_and_still_collects_cycles() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
