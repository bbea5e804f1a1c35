"""Options of the ingest servers: the ``ingest_*`` fields of the settings (``AGL_INGEST_*``), as one value.

The servers run under ``uvicorn --workers N``: each worker builds its app from the environment in a
fresh process, so the command line turns its flags into those variables (``Settings.to_env``) before
starting uvicorn.
"""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from agl_stream.config import Settings

_DEFAULTS = Settings.model_fields


class IngestOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = Field(default=_DEFAULTS["ingest_max_body_bytes"].default, ge=1024,
                                description="413 above this (wire and inflated)")  # fmt: skip
    request_timeout: float = Field(default=_DEFAULTS["ingest_request_timeout"].default, gt=0,
                                   description="receiving the body / the whole backend call")  # fmt: skip
    produce_timeout: float = Field(default=_DEFAULTS["ingest_produce_timeout"].default, gt=0,
                                   description="503 when the broker does not ack within this")  # fmt: skip
    token: Optional[str] = Field(default=None, repr=False, description="bearer token clients must send; None = no auth")
    attempt_key_secret: Optional[str] = Field(default=None, repr=False, description="LLM proxy: checks per-attempt keys")

    @classmethod
    def from_settings(cls, settings: Settings) -> "IngestOptions":
        return cls(max_body_bytes=settings.ingest_max_body_bytes, request_timeout=settings.ingest_request_timeout,
                   produce_timeout=settings.ingest_produce_timeout, token=settings.ingest_token,
                   attempt_key_secret=settings.attempt_key_secret)  # fmt: skip
