"""Garbage collector settings for a processors process: fewer, cheaper collections.

The apps allocate containers by the thousand per batch (decoded spans, row tuples, fetched records)
and keep them for a batch or an attempt. With CPython's default thresholds (700, 10, 10) the
collector ran every 700 allocations, promoted those short-lived objects to the older generations,
and its full collections walked them again together with every object the imports created: 8% of
the sinks' CPU and 14% of the triplet processor's in a perf profile at saturation. Freezing what
start-up created takes it out of every collection; a larger first threshold lets a batch die young.
"""

from __future__ import annotations

import gc

#: container allocations between young collections (CPython's default is 700); cyclic garbage
#: waits for at most this many allocations, a few MB
YOUNG_THRESHOLD = 50_000


def tune_gc(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Collect, freeze the survivors (modules, app objects) and raise the young threshold; once per process."""
    gc.collect()  # garbage frozen now would never be freed
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
