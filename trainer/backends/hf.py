"""A Hugging Face causal LM as a trainable policy: forward to response log-probs, AdamW, LR schedule, clipping.

CPU: fp32 weights, optionally bf16 autocast for the forward pass. GPU: bf16 autocast and gradient
checkpointing. The optimizer keeps fp32 master weights in both cases (the model's own parameters).

Multi-GPU FSDP (torchrun) is not implemented: this backend trains on one device. A multi-GPU node
runs one learner on one GPU today; sharding across GPUs is future work.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Iterator, Literal, Optional

import torch
from pydantic import BaseModel, ConfigDict, Field
from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

from agl_stream_trainer.algorithms.batch import TrainBatch


class OptimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = Field(default=1e-6, gt=0)
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_steps: int = Field(default=0, ge=0)
    total_steps: Optional[int] = Field(default=None, ge=1, description="for cosine decay; None = constant after warmup")
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    max_grad_norm: float = Field(default=1.0, gt=0)


#: padded tokens per micro batch when the config leaves it open. On CPU the fp32 activations kept for the backward
#: pass cost about 1.6 MB per token for SmolLM2-135M, plus ~1.3 MB per response token for the logits (measured,
#: docs/learning.md): 8,192-token micro batches of the quiz's rows took a 23 GB machine out of memory; with 4,096 the
#: demo's whole process (learner, engine, runner threads) peaked at 14-21 GB
GPU_MICRO_BATCH_TOKENS = 8192
CPU_MICRO_BATCH_TOKENS = 4096


class BackendConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    device: str = Field(default="auto", description="auto (cuda if present), cpu, cuda, cuda:N")
    autocast_bf16: Optional[bool] = Field(default=None, description="None: on for GPU, off for CPU")
    gradient_checkpointing: Optional[bool] = Field(default=None, description="None: on for GPU, off for CPU")
    micro_batch_tokens: Optional[int] = Field(
        default=None, ge=1, description=f"padded tokens per forward/backward micro batch; None: {GPU_MICRO_BATCH_TOKENS} on GPU, "
        f"{CPU_MICRO_BATCH_TOKENS} on CPU",
    )  # fmt: skip


def unique_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` on CPU without the second name of tied tensors (safetensors refuses shared storage)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        ptr = tensor.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        out[name] = tensor.detach().to("cpu").contiguous()
    return out


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def lr_multiplier(step: int, cfg: OptimConfig) -> float:
    """Linear warmup, then constant, cosine or linear decay to ``min_lr_ratio``."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant" or not cfg.total_steps:
        return 1.0
    span = max(cfg.total_steps - cfg.warmup_steps, 1)
    progress = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
    decay = 0.5 * (1 + math.cos(math.pi * progress)) if cfg.schedule == "cosine" else 1 - progress
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * decay


@dataclass
class ForwardOut:
    logprobs: torch.Tensor  # (B, R) log pi(response token)
    entropy: Optional[torch.Tensor]  # (B, R) entropy of pi at each response position


class HFPolicy:
    """The trainable policy: a transformers causal LM plus its optimizer and LR schedule."""

    def __init__(self, model: Any, optim: OptimConfig, backend: Optional[BackendConfig] = None) -> None:
        self.backend = backend or BackendConfig()
        self.device = resolve_device(self.backend.device)
        self.model = model.to(self.device)
        gpu = self.device.type == "cuda"
        default_tokens = GPU_MICRO_BATCH_TOKENS if gpu else CPU_MICRO_BATCH_TOKENS
        self.micro_batch_tokens = self.backend.micro_batch_tokens or default_tokens
        self.autocast = self.backend.autocast_bf16 if self.backend.autocast_bf16 is not None else gpu
        checkpointing = self.backend.gradient_checkpointing if self.backend.gradient_checkpointing is not None else gpu
        if checkpointing:
            self.model.gradient_checkpointing_enable()
            self.model.config.use_cache = False
        self.optim_config = optim
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=optim.lr,
            betas=optim.betas,
            eps=optim.eps,
            weight_decay=optim.weight_decay,
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_multiplier(s, optim))

    # ---------------------------------------------------------------- forward

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def forward(self, batch: TrainBatch, *, with_entropy: bool = False, entropy_grad: bool = True, model: Any = None) -> ForwardOut:
        """Log-probs (and entropies) of the response tokens under ``model`` (default: the policy).

        Only the last ``R + 1`` positions go through the LM head (``logits_to_keep``): with the
        left-padded prompt layout those are exactly the positions that predict response tokens,
        so the (B, L, vocab) logits of the prompt are never materialized.
        """
        net = model if model is not None else self.model
        input_ids = batch.input_ids.to(self.device)
        rlen = batch.response_length
        with self._autocast():
            out = net(
                input_ids=input_ids,
                attention_mask=batch.attention_mask.to(self.device),
                position_ids=batch.position_ids.to(self.device),
                use_cache=False,
                logits_to_keep=rlen + 1,
            )
        logits = out.logits[:, :rlen, :].float()  # position P-1+j predicts response token j
        labels = input_ids[:, batch.prompt_length : batch.prompt_length + rlen]
        logprobs = logprobs_from_logits(logits, labels, inplace_backward=False)
        entropy = None
        if with_entropy:
            if entropy_grad:
                entropy = entropy_from_logits(logits)
            else:
                with torch.no_grad():
                    entropy = entropy_from_logits(logits.detach())
        return ForwardOut(logprobs, entropy)

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch, model: Any = None) -> torch.Tensor:
        chunks = [self.forward(mb, model=model).logprobs.cpu() for mb in self.micro_batches(batch)]
        return torch.cat(chunks, dim=0)

    def micro_batches(self, batch: TrainBatch) -> Iterator[TrainBatch]:
        """Consecutive row slices holding at most ``micro_batch_tokens`` padded tokens (>= 1 row)."""
        width = batch.input_ids.shape[1]
        rows = max(1, self.micro_batch_tokens // max(width, 1))
        for start in range(0, batch.num_sequences, rows):
            yield batch.select(list(range(start, min(start + rows, batch.num_sequences))))

    # ---------------------------------------------------------------- optimizer

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self) -> float:
        """Clip, step, advance the schedule; returns the pre-clip gradient norm."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim_config.max_grad_norm)
        grad_norm = float(norm)
        if math.isfinite(grad_norm):
            self.optimizer.step()
        self.scheduler.step()
        self.zero_grad()
        return grad_norm

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Model weights on CPU, contiguous, tied duplicates dropped (what publishing and checkpoints write)."""
        return unique_state_dict(self.model)

    def frozen_copy(self) -> Any:
        """A frozen copy of the current model (the KL reference policy)."""
        import copy

        ref = copy.deepcopy(self.model)
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref
