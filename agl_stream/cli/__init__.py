"""Command-line entry points (``agl-stream``)."""
