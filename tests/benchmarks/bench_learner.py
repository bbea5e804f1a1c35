"""Benchmark: learner throughput and weight-publish time on whatever device is present.

Numbers (one run, same model):

* ``learner``: one GRPO step (``agl_stream_trainer.algorithms.grpo.train_step``: recompute pi_old, PPO-clip
  loss, backward, AdamW) on a synthetic batch of ``--batch`` sequences of ``--prompt`` +
  ``--response`` tokens: seconds per step (median of ``--steps`` after one warm-up), tokens/s
  over all tokens and over response tokens, and on a GPU the model FLOPs utilization
  ``6 * params * tokens / seconds / --peak-tflops`` (plus the recompute forward: 8x instead of 6x).
* ``publish_embedded_inprocess``: ``EmbeddedEngine.publish`` to a co-located generator (state dict
  swap, no file), median seconds.
* ``publish_embedded_http``: the remote path: safetensors file written, ``POST /agl/v1/weights``,
  server loads and swaps; median seconds, and MB of weights.
* ``publish_vllm``: only with a GPU and the vllm package; otherwise reported as skipped with the
  reason.

Models: ``--model tiny`` (random 2-layer Llama, the CPU default), ``smollm2`` (135M), a folder, or
``--random-size 0.5b`` for a random-init Llama of about 0.5B parameters (the GPU default).

Run: ``python tests/benchmarks/bench_learner.py [--model tiny] [--batch 8] [--prompt 128]
[--response 128] [--steps 3] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from agl_stream.types import Trajectory, Triplet  # noqa: E402
from agl_stream_trainer.algorithms.batch import collate, rows_from_trajectories  # noqa: E402
from agl_stream_trainer.algorithms.grpo import GRPOConfig, train_step  # noqa: E402
from agl_stream_trainer.backends.hf import BackendConfig, HFPolicy, OptimConfig, unique_state_dict  # noqa: E402
from agl_stream_trainer.engines.embedded import EmbeddedEngine, EmbeddedServer  # noqa: E402
from agl_stream_trainer.engines.generation import Generator  # noqa: E402
from agl_stream_trainer.engines.vllm import vllm_available  # noqa: E402
from agl_stream_trainer.models import build_tiny_model, cache_dir, load_model_and_tokenizer  # noqa: E402


def random_llama(directory: Path, size: str) -> Path:
    """A random-init Llama of roughly ``size`` parameters with the SmolLM2 tokenizer."""
    shapes = {"0.5b": (1024, 24, 16, 2816), "1.5b": (1536, 28, 12, 8960)}
    hidden, layers, heads, inter = shapes[size]
    from transformers import LlamaConfig, LlamaForCausalLM

    from agl_stream_trainer.models import load_smollm2_tokenizer

    tok = load_smollm2_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=max(1, heads // 4), intermediate_size=inter, max_position_embeddings=4096,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


def synthetic_batch(tokenizer: Any, batch: int, prompt: int, response: int, group: int = 4) -> Any:
    g = torch.Generator().manual_seed(0)
    trajs = []
    for i in range(batch):
        p = torch.randint(100, 40000, (prompt,), generator=g).tolist()
        r = torch.randint(100, 40000, (response,), generator=g).tolist()
        trajs.append(Trajectory(rollout_id=f"ro-{i}", attempt_id="at-0", group_id=f"g{i // group}", final_reward=float(i % 2),
                                triplets=[Triplet(prompt={"token_ids": p}, response={"token_ids": r, "logprobs": [-10.0] * response},
                                                  policy_version=0)]))
    return collate(rows_from_trajectories(trajs), tokenizer.pad_token_id)


def bench_learner(model: Any, tokenizer: Any, args: argparse.Namespace) -> dict[str, Any]:
    policy = HFPolicy(model, OptimConfig(lr=1e-6), BackendConfig(device=args.device, micro_batch_tokens=args.micro_batch_tokens))
    batch = synthetic_batch(tokenizer, args.batch, args.prompt, args.response)
    cfg = GRPOConfig()
    train_step(policy, batch, cfg)  # warm-up
    times = []
    for _ in range(args.steps):
        if policy.device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        train_step(policy, batch, cfg)
        if policy.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    seconds = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    tokens = batch.num_tokens
    out = {
        "device": str(policy.device),
        "params_m": params / 1e6,
        "sequences": batch.num_sequences,
        "tokens": tokens,
        "step_seconds": seconds,
        "tokens_per_second": tokens / seconds,
        "response_tokens_per_second": float(batch.response_mask.sum()) / seconds,
    }
    if policy.device.type == "cuda":
        out["mfu"] = 8 * params * tokens / seconds / (args.peak_tflops * 1e12)  # fwd(pi_old) + fwd + bwd
        out["peak_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


async def bench_publish(model_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    served, tokenizer, _ = load_model_and_tokenizer(str(model_dir))
    weights = {k: v.clone() for k, v in unique_state_dict(served).items()}
    megabytes = sum(v.numel() * v.element_size() for v in weights.values()) / 2**20
    generator = Generator(served, tokenizer)
    server = EmbeddedServer(generator, "bench").start()
    results: dict[str, Any] = {}
    try:
        local = EmbeddedEngine(server.base_url, "bench", generator=generator)
        times = []
        for version in range(1, args.publishes + 1):
            started = time.perf_counter()
            await local.publish(version, weights)
            times.append(time.perf_counter() - started)
        results["publish_embedded_inprocess"] = {"seconds": statistics.median(times), "weights_mb": megabytes}
        with tempfile.TemporaryDirectory() as tmp:
            remote = EmbeddedEngine(server.base_url, "bench", publish_dir=Path(tmp))
            times = []
            for version in range(100, 100 + args.publishes):
                started = time.perf_counter()
                await remote.publish(version, weights)
                times.append(time.perf_counter() - started)
        results["publish_embedded_http"] = {"seconds": statistics.median(times), "weights_mb": megabytes}
    finally:
        server.stop()
        generator.close()
    ok, reason = vllm_available()
    if ok:
        from agl_stream_trainer.engines.vllm import VLLMEngine

        engine = await VLLMEngine.launch(model_dir, "bench", port=args.vllm_port, extra_args=["--enforce-eager"])
        try:
            times = []
            for version in range(1, args.publishes + 1):
                started = time.perf_counter()
                await engine.publish(version, weights)
                times.append(time.perf_counter() - started)
            results["publish_vllm"] = {"seconds": statistics.median(times), "weights_mb": megabytes}
        finally:
            await engine.close()
    else:
        results["publish_vllm"] = {"skipped": reason}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="tiny | smollm2 | a folder (default: tiny on CPU, --random-size on GPU)")
    parser.add_argument("--random-size", default="0.5b", choices=["0.5b", "1.5b"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--publishes", type=int, default=3)
    parser.add_argument("--micro-batch-tokens", type=int, default=16384)
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak of the GPU (H100 SXM: 989)")
    parser.add_argument("--vllm-port", type=int, default=8011)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    gpu = torch.cuda.is_available() and args.device != "cpu"
    if args.model is None:
        model_dir = random_llama(Path(tempfile.mkdtemp()) / "rand", args.random_size) if gpu else build_tiny_model(cache_dir() / "tiny-llama")
    elif args.model in ("tiny", "smollm2"):
        from agl_stream_trainer.models import resolve_model_dir

        model_dir = resolve_model_dir(args.model)
    else:
        model_dir = Path(args.model)
    model, tokenizer, _ = load_model_and_tokenizer(str(model_dir))
    report: dict[str, Any] = {"model": str(model_dir), "learner": bench_learner(model, tokenizer, args)}
    if not gpu:
        report["gpu"] = {"skipped": "no CUDA GPU on this machine: MFU and the vLLM publish are not measured"}
    report.update(asyncio.run(bench_publish(model_dir, args)))
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
