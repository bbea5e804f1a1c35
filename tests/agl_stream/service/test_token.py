"""The kit's one token check: where a token may be presented, and the constant-time verdict."""

from __future__ import annotations

import base64

from starlette.datastructures import Headers

from agl_stream.service import TokenVerdict, presented_token, token_verdict


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_bearer_is_always_read_and_the_other_places_only_when_asked_for() -> None:
    assert presented_token(Headers({"Authorization": "Bearer  s3cret "})) == "s3cret"
    assert presented_token(Headers({"authorization": "bearer s3cret"})) == "s3cret"  # scheme and header any case
    basic = Headers({"Authorization": _basic("agl", "s3cret")})
    assert presented_token(basic) is None
    assert presented_token(basic, basic_password=True) == "s3cret"
    assert presented_token(Headers({"Authorization": "Basic !!!"}), basic_password=True) is None
    assert presented_token(Headers({"Authorization": _basic("agl", "")}), basic_password=True) is None
    assert presented_token(Headers({"api-key": "k"})) is None
    assert presented_token(Headers({"API-Key": "k"}), headers_also=("api-key",)) == "k"
    assert presented_token(Headers({}), cookies={"c": "v"}) is None
    assert presented_token(Headers({}), cookies={"c": "v"}, cookie="c") == "v"
    assert presented_token(Headers({"Authorization": "Bearer b"}), cookies={"c": "v"}, cookie="c") == "b"


def test_verdicts() -> None:
    assert token_verdict(None, None) is TokenVerdict.ACCEPTED  # the service runs without a token
    assert token_verdict("anything", None) is TokenVerdict.ACCEPTED
    assert token_verdict(None, "t") is TokenVerdict.MISSING
    assert token_verdict("", "t") is TokenVerdict.MISSING
    assert token_verdict("u", "t") is TokenVerdict.WRONG
    assert token_verdict("t", "t") is TokenVerdict.ACCEPTED
    assert token_verdict("é", "t") is TokenVerdict.WRONG  # non-ASCII compares (as bytes) instead of raising
