"""Upstream's ``agentlightning.utils.id`` path: ``generate_id`` (defined in :mod:`agl_stream.ids`)."""

from __future__ import annotations

from agl_stream.ids import generate_id

__all__ = ["generate_id"]
