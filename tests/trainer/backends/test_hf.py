"""The HF backend's micro batch size: a default per device, an explicit value kept."""

import torch

from agl_stream_trainer.backends.hf import CPU_MICRO_BATCH_TOKENS, BackendConfig, HFPolicy, OptimConfig


def test_cpu_micro_batches_default_to_the_cpu_size() -> None:
    policy = HFPolicy(torch.nn.Linear(2, 2), OptimConfig(lr=1e-3), BackendConfig(device="cpu"))
    assert policy.micro_batch_tokens == CPU_MICRO_BATCH_TOKENS == 4096


def test_an_explicit_micro_batch_size_is_kept() -> None:
    policy = HFPolicy(torch.nn.Linear(2, 2), OptimConfig(lr=1e-3), BackendConfig(device="cpu", micro_batch_tokens=512))
    assert policy.micro_batch_tokens == 512
