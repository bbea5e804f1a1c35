"""The real LLM proxy in front of the fake backend's calculator player, for the program-agent smoke tests."""

from __future__ import annotations

import contextlib
from typing import Iterator

from agl_stream.config import Settings
from agl_stream_ingest.options import IngestOptions
from agl_stream_ingest.proxy.app import create_app
from agl_stream_ingest.proxy.config import ProxyConfig
from tests.ingest.fake_backend import create_fake_backend
from tests.ingest.helpers import ServedApp


@contextlib.contextmanager
def calculator_proxy(topics: Settings, served_name: str) -> Iterator[ServedApp]:
    """A proxy serving ``served_name`` (the model the program asks for) from the perfect calculator player."""
    with ServedApp(create_fake_backend()) as backend:
        config = ProxyConfig.from_mapping({"model_list": [{"model_name": served_name, "litellm_params": {
            "model": "openai/calculator", "api_base": f"{backend.url}/v1", "api_key": "k"}}]})  # fmt: skip
        with ServedApp(create_app(topics, IngestOptions(), config)) as served:
            yield served
