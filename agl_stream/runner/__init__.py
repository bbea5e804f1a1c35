"""The runner: executes agents on ``agl.tasks`` and reports attempts, spans and worker heartbeats."""

from typing import TYPE_CHECKING

from agl_stream._porting import module_getattr
from agl_stream.runner.hooks import Hook
from agl_stream.runner.loader import load_agent
from agl_stream.runner.stats import RunnerStats
from agl_stream.runner.runner import RUNNER_GROUP, LitAgentRunner
from agl_stream.runner.system_snapshot import system_snapshot

__all__ = ["RUNNER_GROUP", "Hook", "LitAgentRunner", "RunnerStats", "load_agent", "system_snapshot"]

if not TYPE_CHECKING:  # upstream's names in this module, kept or refused: the tables in agl_stream/_porting.py
    __getattr__ = module_getattr(__name__)
