"""The local stack's optional dashboard."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from agl_stream.config import Settings
from agl_stream.execution import local_stack
from agl_stream.execution.local_stack import LocalStack

pytestmark = [pytest.mark.integration]


def test_the_dashboard_moves_to_a_free_port_when_its_port_is_taken_after_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs starting side by side both find 4747 free; the second to bind it must not lose its dashboard
    (the CI failure of stop 46: two ``Trainer.fit`` tests on two xdist workers)."""
    settings = Settings.from_env(env={}, data_dir=tmp_path / "agl")
    stack = LocalStack(settings, processors=False)
    stack.log_dir.mkdir(parents=True)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        monkeypatch.setattr(local_stack, "_port_free", lambda port: True)  # the race: free when checked
        try:
            url = asyncio.run(stack.start_dashboard(port=taken, timeout=60))
            assert url is not None and url.startswith("http://127.0.0.1:")
            assert f":{taken}/" not in url
            assert stack.dashboard is not None and stack.dashboard.alive
        finally:
            stack.stop()
