"""Upstream's ``agentlightning.runner.agent`` path: ``LitAgentRunner`` (defined in :mod:`agl_stream.runner.runner`)."""

from __future__ import annotations

from agl_stream.runner.runner import LitAgentRunner

__all__ = ["LitAgentRunner"]
