"""One token check for every service that takes a shared secret (ingest, SQL door, dashboard, training server).

Where a request may carry the token differs by client, so the places are options: ``Authorization: Bearer``
always; Basic auth's password for ClickHouse clients (a DSN ``http://user:<token>@host``); a named header
(OpenAI-style ``api-key``, ``X-ClickHouse-Key``); a cookie (the dashboard's page). The comparison is
constant-time. What a refusal looks like stays each service's own (its clients parse it): the check
returns a :class:`TokenVerdict` and the service answers it.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
from typing import Mapping, Optional, Sequence


class TokenVerdict(enum.Enum):
    ACCEPTED = "accepted"  # the right token, or no token is required
    MISSING = "missing"  # usually 401
    WRONG = "wrong"  # 401 or 403, as the service's clients expect


def presented_token(headers: Mapping[str, str], *, headers_also: Sequence[str] = (), basic_password: bool = False,
                    cookies: Optional[Mapping[str, str]] = None, cookie: Optional[str] = None) -> Optional[str]:  # fmt: skip
    """The token a request carries (``headers`` as the framework gives them: case-insensitive), else None."""
    scheme, _, value = headers.get("authorization", "").partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return value
    if basic_password and scheme.lower() == "basic" and value:
        try:
            return base64.b64decode(value, validate=True).decode().partition(":")[2] or None
        except (binascii.Error, UnicodeDecodeError):
            return None
    for name in headers_also:
        if headers.get(name):
            return headers[name]
    if cookie is not None and cookies is not None and cookies.get(cookie):
        return cookies[cookie]
    return None


def token_verdict(presented: Optional[str], expected: Optional[str]) -> TokenVerdict:
    """Compare in constant time; ``expected`` None means the service runs without a token."""
    if expected is None:
        return TokenVerdict.ACCEPTED
    if not presented:
        return TokenVerdict.MISSING
    if not hmac.compare_digest(presented.encode(), expected.encode()):
        return TokenVerdict.WRONG
    return TokenVerdict.ACCEPTED
