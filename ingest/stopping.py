"""Front doors that stop with whoever started them, within a bound (issue 32).

``agl-stream ingest ...`` runs under uvicorn, which installs its own signal handlers. The CLI process
arms :func:`agl_stream.service.stop_with_parent` itself; with ``--workers N`` uvicorn's manager starts the
workers, so each arms the same against the manager from the app factory, told to by ``AGL_INGEST_WORKER_STOP_S``.
"""

from __future__ import annotations

from agl_stream.config import Settings
from agl_stream.service import StopDeadline, stop_with_parent

#: set by the CLI for uvicorn's worker processes: their stop timeout, seconds
#: after uvicorn's graceful shutdown (in-flight requests), the producers' flush
FLUSH_BUDGET_S = 5.0


def stop_timeout(graceful_s: float) -> float:
    """A front door's whole stop: uvicorn's graceful shutdown (``graceful_s`` + 5 s, see the CLI), then the flush."""
    return graceful_s + 5.0 + FLUSH_BUDGET_S


def stop_with_manager() -> bool:
    """In a uvicorn worker the CLI started: stop, bounded, when uvicorn's manager process dies."""
    bound = Settings.from_env().ingest_worker_stop_s
    if bound is None:
        return False
    return stop_with_parent(StopDeadline(bound, name="ingest worker"), always=True)
