"""A small system snapshot for heartbeats (upstream's ``system_snapshot(include_gpu=False)``)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import psutil

_PROCESS = psutil.Process()


def system_snapshot(include_gpu: bool = False) -> dict[str, Any]:
    memory = psutil.virtual_memory()
    snapshot: dict[str, Any] = {
        "time": time.time(),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "cpu_percent": psutil.cpu_percent(interval=None),
        "cpu_count": psutil.cpu_count(),
        "memory_percent": memory.percent,
        "memory_available_mb": round(memory.available / 2**20, 1),
        "process_rss_mb": round(_PROCESS.memory_info().rss / 2**20, 1),
        "process_threads": _PROCESS.num_threads(),
    }
    if include_gpu:
        snapshot["gpus"] = _gpu_snapshot()
    return snapshot


def _gpu_snapshot() -> list[dict[str, Any]]:
    """GPU memory per device when torch with CUDA is importable; empty otherwise (agents stay torch-free)."""
    try:
        import torch  # noqa: PLC0415 - optional, only when asked for
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(index)
        gpus.append({"index": index, "memory_used_mb": round((total - free) / 2**20, 1), "memory_total_mb": round(total / 2**20, 1)})
    return gpus
