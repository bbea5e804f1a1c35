"""Request guards shared by both ingest servers: bearer-token auth and bounded body reading.

Both servers face agents on other machines, so nothing is trusted: the token is compared in
constant time, bodies are counted while they stream in (a missing or lying Content-Length cannot
make the server buffer more than the limit) and gzip bodies are inflated with the same cap, so a
small compressed bomb is refused instead of filling memory. No request header is ever copied
into a span or a log line by the ingest servers, so ``Authorization`` and API keys stay out of both.
"""

from __future__ import annotations

import zlib
from typing import Optional

from fastapi import HTTPException, Request

from agl_stream.service import TokenVerdict, presented_token, token_verdict


def check_token(request: Request, expected: Optional[str]) -> None:
    """Raise 401 unless auth is off or the request carries the expected token (Bearer, OpenAI-style ``api-key``
    or Anthropic-style ``x-api-key``), checked by the service kit's one token check."""
    verdict = token_verdict(presented_token(request.headers, headers_also=("api-key", "x-api-key")), expected)
    if verdict is TokenVerdict.MISSING:
        raise HTTPException(401, "missing bearer token (set Authorization: Bearer <AGL_INGEST_TOKEN>)",
                            headers={"WWW-Authenticate": "Bearer"})
    if verdict is TokenVerdict.WRONG:
        raise HTTPException(401, "invalid bearer token", headers={"WWW-Authenticate": "Bearer"})


async def read_body(request: Request, limit: int) -> bytes:
    """The raw request body, refusing (413) anything larger than ``limit`` bytes on the wire."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise HTTPException(400, f"invalid Content-Length {declared!r}")
        if int(declared) > limit:
            raise HTTPException(413, f"request body of {declared} bytes exceeds the limit of {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode_content_encoding(body: bytes, encoding: Optional[str], limit: int) -> bytes:
    """Undo ``Content-Encoding`` (identity or gzip) with the inflated size capped at ``limit``."""
    encoding = (encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise HTTPException(415, f"unsupported Content-Encoding {encoding!r} (use gzip or identity)")
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise HTTPException(400, f"invalid gzip body: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise HTTPException(413, f"decompressed body exceeds the limit of {limit} bytes")
    if not inflater.eof:
        raise HTTPException(400, "invalid gzip body: truncated stream")
    return out
