"""Upstream's ``agentlightning.utils`` path: the helpers agl-stream has an equivalent for.

``agl_stream.utils.id`` and ``agl_stream.utils.system_snapshot`` re-export agl-stream's own; the
other upstream helper modules (``otel``, ``otlp``, ``metrics``, ``server_launcher``) raise an
``ImportError`` naming their replacement (see ``agl_stream._porting``).
"""
