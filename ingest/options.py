"""Options of the ingest servers, read from ``AGL_INGEST_*`` variables.

The servers run under ``uvicorn --workers N``: each worker builds its app from the environment in a
fresh process, so the command line turns its flags into these variables before starting uvicorn.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agl_stream.config import SettingsError
from agl_stream_ingest.security import DEFAULT_MAX_BODY_BYTES, TOKEN_ENV

ENV = {
    "max_body_bytes": "AGL_INGEST_MAX_BODY_BYTES",
    "request_timeout": "AGL_INGEST_REQUEST_TIMEOUT",
    "produce_timeout": "AGL_INGEST_PRODUCE_TIMEOUT",
    "token": TOKEN_ENV,
}


class IngestOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, description="413 above this (wire and inflated)")
    request_timeout: float = Field(default=60.0, gt=0, description="receiving the body / the whole backend call")
    produce_timeout: float = Field(default=30.0, gt=0, description="503 when the broker does not ack within this")
    token: Optional[str] = Field(default=None, repr=False, description="bearer token clients must send; None = no auth")

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, **overrides: object) -> "IngestOptions":
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        for name, var in ENV.items():
            raw = env.get(var, "").strip()
            if raw:
                values[name] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValidationError as exc:
            problems = [f"{ENV.get(str(e['loc'][0]), e['loc'][0])}: {e['msg']}" for e in exc.errors(include_url=False)]
            raise SettingsError("invalid ingest options: " + "; ".join(problems)) from None

    def to_env(self) -> dict[str, str]:
        """The variables that rebuild these options in a worker process."""
        return {ENV[name]: str(value) for name, value in self.model_dump().items() if value is not None}
