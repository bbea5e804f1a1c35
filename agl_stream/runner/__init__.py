"""The runner: executes agents on ``agl.tasks`` and reports attempts, spans and worker heartbeats."""

from agl_stream.runner.hooks import Hook
from agl_stream.runner.loader import load_agent
from agl_stream.runner.progress import RunnerStats
from agl_stream.runner.runner import RUNNER_GROUP, LitAgentRunner
from agl_stream.runner.system_snapshot import system_snapshot

__all__ = ["RUNNER_GROUP", "Hook", "LitAgentRunner", "RunnerStats", "load_agent", "system_snapshot"]
