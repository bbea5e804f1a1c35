"""The vLLM engine (GPU only): launch or attach to a vLLM OpenAI server and reload its weights in place.

Publishing writes the new weights as ``model.safetensors`` into the folder the server loaded the
model from (atomically, replacing the shards), then asks every worker to reload through vLLM's
development endpoint ``POST /collective_rpc {"method": "reload_weights"}`` and clears the prefix
cache (``POST /reset_prefix_cache``), whose KV entries belong to the old weights. Both endpoints
exist only when the server runs with ``VLLM_SERVER_DEV_MODE=1`` (``launch`` sets it).

vLLM applies the collective RPC between engine steps: requests that are mid-generation keep
running and their remaining tokens come from the new weights (vLLM has no per-request weight
pinning); the ``ResourcesUpdate`` is written after the reload returns.

What was verified: the HTTP calls and file layout against vLLM's documented dev-mode endpoints.
What was not: a live vLLM server, since the build machines have no GPU and no vLLM wheel; the
tests that need one are skipped with that reason. NCCL broadcast of weights (no disk round trip)
is not implemented.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from agl_stream.service import ServiceProcess
from agl_stream_trainer.engines.base import Weights


def vllm_available() -> tuple[bool, str]:
    """(usable, reason): vLLM needs the package and a CUDA GPU."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency of trainer/
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA GPU on this machine (vLLM is GPU-only)"
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False, "the vllm package is not installed (pip install 'agl-stream[gpu]' on a GPU machine)"
    return True, ""


class VLLMEngine:
    def __init__(self, base_url: str, model_name: str, model_dir: Path, *, process: Optional[ServiceProcess] = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.endpoint = self.base_url + "/v1"
        self.model_name = model_name
        self.model_dir = Path(model_dir)
        self.process = process
        self.policy_version = 0

    @classmethod
    async def launch(
        cls,
        model_dir: Path,
        model_name: str,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 600.0,
    ) -> "VLLMEngine":
        ok, reason = vllm_available()
        if not ok:
            raise RuntimeError(f"cannot launch vLLM: {reason}")
        cmd = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model_dir), "--served-model-name", model_name,
            "--host", host, "--port", str(port), "--dtype", "bfloat16", *extra_args,
        ]
        # its own process group, and it dies with this process: vLLM's workers are its children
        process = ServiceProcess("vllm", cmd, env={"VLLM_SERVER_DEV_MODE": "1"}, stop_timeout=30.0).start()
        engine = cls(f"http://{host}:{port}", model_name, model_dir, process=process)
        await engine.wait_ready(startup_timeout)
        return engine

    async def wait_ready(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                if self.process is not None and not self.process.alive:
                    raise RuntimeError(f"vLLM exited with code {self.process.returncode}")
                try:
                    if (await client.get(self.base_url + "/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"vLLM at {self.base_url} not ready within {timeout:.0f}s")
                await asyncio.sleep(1.0)

    def _write_weights(self, weights: Weights) -> None:
        from safetensors.torch import save_file

        from agl_stream_trainer.engines.generation import load_weights_file

        tensors = load_weights_file(weights) if isinstance(weights, (str, Path)) else dict(weights)
        tmp = self.model_dir / ".model.safetensors.tmp"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata={"format": "pt"})
        for shard in self.model_dir.glob("model-*.safetensors"):
            shard.unlink()
        (self.model_dir / "model.safetensors.index.json").unlink(missing_ok=True)
        os.replace(tmp, self.model_dir / "model.safetensors")

    async def publish(self, version: int, weights: Weights) -> None:
        import httpx

        await asyncio.to_thread(self._write_weights, weights)
        async with httpx.AsyncClient(timeout=600) as client:
            resp = await client.post(self.base_url + "/collective_rpc", json={"method": "reload_weights"})
            resp.raise_for_status()
            resp = await client.post(self.base_url + "/reset_prefix_cache")
            resp.raise_for_status()
        self.policy_version = version

    async def close(self) -> None:
        if self.process is not None:
            # graceful, then SIGKILL for vLLM and every worker it started
            await asyncio.to_thread(self.process.stop)
