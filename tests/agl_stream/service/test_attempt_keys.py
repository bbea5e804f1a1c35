"""Per-attempt keys (pure logic; the proxy's use of them is tested in tests/ingest/test_proxy_keys.py)."""

from __future__ import annotations

import pytest

from agl_stream.service import AttemptKey, is_attempt_key, mint_attempt_key, verify_attempt_key


def test_a_key_names_its_attempt_and_only_its_secret_verifies_it() -> None:
    key = mint_attempt_key("s3cret", "ro-0123abcd", "at-89ef")
    assert is_attempt_key(key) and key == mint_attempt_key("s3cret", "ro-0123abcd", "at-89ef")
    assert verify_attempt_key("s3cret", key) == AttemptKey("ro-0123abcd", "at-89ef")
    assert verify_attempt_key("other", key) is None


def test_a_key_edited_to_name_another_attempt_fails() -> None:
    key = mint_attempt_key("s3cret", "ro-a", "at-a")
    _, _, _, signature = key.split(".")
    assert verify_attempt_key("s3cret", f"agl-ak.ro-b.at-a.{signature}") is None
    assert verify_attempt_key("s3cret", key[:-2] + "AA") is None
    assert verify_attempt_key("s3cret", "agl-ak.ro-a.at-a") is None and not is_attempt_key("sk-plain-token")


def test_ids_with_dots_and_an_empty_secret_are_refused() -> None:
    with pytest.raises(ValueError, match="dots"):
        mint_attempt_key("s", "ro.1", "at-1")
    with pytest.raises(ValueError, match="secret"):
        mint_attempt_key("", "ro-1", "at-1")
