"""vLLM serves, one update is published, and the next completion reflects it (GPU + vllm only)."""

from __future__ import annotations

import socket

import httpx
import pytest
import torch

from agl_stream_trainer.engines.vllm import VLLMEngine, vllm_available

available, reason = vllm_available()
pytestmark = [pytest.mark.gpu, pytest.mark.integration, pytest.mark.skipif(not available, reason=reason)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_vllm_publish_changes_the_next_completion(tiny_model_dir, tmp_path) -> None:
    import shutil

    from agl_stream_trainer.backends.hf import unique_state_dict
    from agl_stream_trainer.models import load_model_and_tokenizer

    model_dir = tmp_path / "served"
    shutil.copytree(tiny_model_dir, model_dir)
    engine = await VLLMEngine.launch(model_dir, "tiny", port=_free_port(), extra_args=["--enforce-eager", "--gpu-memory-utilization", "0.3"])
    try:
        body = {"model": "tiny", "prompt": [100, 200, 300], "max_tokens": 8, "temperature": 0, "return_token_ids": True}
        async with httpx.AsyncClient(timeout=120) as client:
            before = (await client.post(engine.endpoint + "/completions", json=body)).json()
            model, _tok, _ = load_model_and_tokenizer(str(tiny_model_dir))
            torch.manual_seed(0)
            weights = {k: v + 0.5 * torch.randn_like(v) for k, v in unique_state_dict(model).items()}
            await engine.publish(1, weights)
            after = (await client.post(engine.endpoint + "/completions", json=body)).json()
        assert before["choices"][0]["token_ids"] != after["choices"][0]["token_ids"]
        assert engine.policy_version == 1
    finally:
        await engine.close()
