"""Per-attempt keys: what the controller hands an agent instead of the front doors' shared token.

A key names its rollout and attempt and is signed (HMAC-SHA256) with a secret the controller and every proxy
replica share (``AGL_ATTEMPT_KEY_SECRET``), so any replica checks any key with no lookup: a key writes only
its own attempt's routes. Revocation (a finished attempt's key stops working) is the proxy's view of
``agl.attempts``; the key itself does not expire. The format is ``agl-ak.<rollout id>.<attempt id>.<signature>``
(ids are ``ro-``/``at-`` plus hex, or any id without dots; the signature is 32 url-safe base64 characters).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import NamedTuple, Optional

PREFIX = "agl-ak"


class AttemptKey(NamedTuple):
    rollout_id: str
    attempt_id: str


def _signature(secret: str, rollout_id: str, attempt_id: str) -> str:
    digest = hmac.new(secret.encode(), f"{rollout_id}\x00{attempt_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest[:24]).decode()


def mint_attempt_key(secret: str, rollout_id: str, attempt_id: str) -> str:
    """The key of one attempt (deterministic: minting it twice gives the same key)."""
    if not secret:
        raise ValueError("an attempt key needs a secret")
    if "." in rollout_id or "." in attempt_id:
        raise ValueError(f"ids in an attempt key cannot hold dots: {rollout_id!r}, {attempt_id!r}")
    return f"{PREFIX}.{rollout_id}.{attempt_id}.{_signature(secret, rollout_id, attempt_id)}"


def is_attempt_key(token: Optional[str]) -> bool:
    return token is not None and token.startswith(PREFIX + ".")


def verify_attempt_key(secret: str, token: str) -> Optional[AttemptKey]:
    """The attempt a key names, or None if it is not a key signed with ``secret``."""
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or not secret:
        return None
    _, rollout_id, attempt_id, signature = parts
    if not hmac.compare_digest(signature.encode(), _signature(secret, rollout_id, attempt_id).encode()):
        return None
    return AttemptKey(rollout_id, attempt_id)
