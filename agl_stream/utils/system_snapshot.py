"""Upstream's ``agentlightning.utils.system_snapshot`` path: the runner's host snapshot (defined in
:mod:`agl_stream.runner.system_snapshot`, where the runner's heartbeats use it)."""

from __future__ import annotations

from agl_stream.runner.system_snapshot import system_snapshot

__all__ = ["system_snapshot"]
