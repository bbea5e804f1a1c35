"""Where the shipped deployment files are: the ``agl_stream_deploy`` data package (``deploy/`` in a checkout)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

DEPLOY_DIR = Path(str(files("agl_stream_deploy")))
