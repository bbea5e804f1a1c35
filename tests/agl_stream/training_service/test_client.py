"""``agl_stream.Client``'s transport rules, over httpx's mock transport: retries, error answers, the token."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx
import pytest

from agl_stream.training_service import Client, TrainingServiceError


def _client(handler, **kwargs) -> Client:  # type: ignore[no-untyped-def]
    client = Client("http://server.test", transport=httpx.MockTransport(handler), **kwargs)
    client.retry_delay = 0.0
    return client


def test_the_token_travels_as_a_bearer_header(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setenv("AGL_SERVER_TOKEN", "from-env")
    with _client(lambda r: seen.append(r.headers.get("authorization")) or httpx.Response(200, json=[])) as c:
        c.list_data()
    with _client(lambda r: seen.append(r.headers.get("authorization")) or httpx.Response(200, json=[]), token="given") as c:
        c.list_data()
    assert seen == ["Bearer from-env", "Bearer given"]


def test_unavailable_answers_are_retried_then_reported() -> None:
    calls = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return httpx.Response(503, json={"error": {"code": "not_stored", "message": "try later"}}) if len(calls) < 3 else \
            httpx.Response(200, json={"status": "ok"})  # fmt: skip

    with _client(flaky, max_retries=3) as c:
        assert c.health() == {"status": "ok"} and len(calls) == 3
    calls.clear()
    with _client(flaky, max_retries=1) as c, pytest.raises(TrainingServiceError) as info:
        c.health()
    assert (info.value.status, info.value.code) == (503, "not_stored") and "try later" in str(info.value) and len(calls) == 2


def test_a_refusal_is_not_retried_and_keeps_the_servers_message() -> None:
    calls = []

    def refuse(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(404, json={"error": {"code": "unknown_data_id", "message": "unknown data_id 'x'"}})

    with _client(refuse) as c, pytest.raises(TrainingServiceError, match="unknown data_id 'x'") as info:
        c.list_checkpoints()
    assert (info.value.status, info.value.code, len(calls)) == (404, "unknown_data_id", 1)
    with _client(lambda r: httpx.Response(500, text="boom")) as c, pytest.raises(TrainingServiceError, match="boom"):
        c.list_jobs()


def test_an_unreachable_server_is_one_clear_error() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with _client(down, max_retries=2) as c, pytest.raises(TrainingServiceError, match="cannot reach") as info:
        c.health()
    assert info.value.code == "unreachable" and info.value.status is None


def test_upload_sends_the_files_text_and_names(tmp_path: Path) -> None:
    bodies = []
    (tmp_path / "t.jsonl").write_text('{"question": "q"}\n')

    def upload(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        return httpx.Response(201, json={"data_id": "d1", "train_lines": 1})

    with _client(upload) as c:
        assert c.upload_data(tmp_path / "t.jsonl", data_id="d1") == "d1"
        with pytest.raises(TrainingServiceError, match="cannot read test file"):
            c.upload_data(tmp_path / "t.jsonl", tmp_path / "missing.jsonl")
    assert b'"train_file":"t.jsonl"' in bodies[0] and b'"data_id":"d1"' in bodies[0] and len(bodies) == 1


def _archive(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_download_model_unpacks_into_a_new_folder_and_refuses_unsafe_archives(tmp_path: Path) -> None:
    good = _archive({"config.json": b"{}", "model.safetensors": b"w"})
    with _client(lambda r: httpx.Response(200, content=good)) as c:
        out = c.download_model(tmp_path / "model")
        assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
        with pytest.raises(FileExistsError, match="overwrite"):
            c.download_model(tmp_path / "model")
        with pytest.raises(ValueError, match="unknown format"):
            c.download_model(tmp_path / "other", format="gguf")
    evil = _archive({"../escape.txt": b"x"})
    with _client(lambda r: httpx.Response(200, content=evil)) as c, pytest.raises(tarfile.TarError):
        c.download_model(tmp_path / "evil")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "evil").exists()
