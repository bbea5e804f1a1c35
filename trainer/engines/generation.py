"""Batched sampling with a KV cache on one worker thread, and in-place weight swaps between batches.

:class:`Generator` owns the model. Requests queue up; the worker thread takes every request that
is waiting (up to ``max_batch_rows`` sequences), left-pads their prompts into one batch and decodes
them together, one token per step for all rows, each row with its own temperature, top-p, token
budget and stop tokens. The log-probability reported for a sampled token is the raw model
log-softmax (before temperature / top-p), like vLLM's default ``raw_logprobs``, so the learner's
recomputed log-probs are directly comparable.

Weight swaps (:meth:`Generator.swap`) are applied by the same thread *between* batches: a batch
that is decoding finishes on the weights it started with (and reports that version), queued
requests wait for the swap and then run on the new weights. Nothing is dropped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Union

import torch

logger = logging.getLogger(__name__)

TokenCallback = Callable[[int, int, float], None]  # (choice index, token id, logprob)


@dataclass
class GenRequest:
    prompt_ids: list[int]
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    n: int = 1
    seed: Optional[int] = None
    stop_token_ids: tuple[int, ...] = ()
    on_token: Optional[TokenCallback] = None
    future: "Future[GenResult]" = field(default_factory=Future)


@dataclass
class Choice:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"


@dataclass
class GenResult:
    prompt_ids: list[int]
    choices: list[Choice]
    policy_version: int


@dataclass
class _Swap:
    weights: Union[Mapping[str, torch.Tensor], Path, str]
    version: int
    future: "Future[int]" = field(default_factory=Future)


def load_weights_file(path: Union[Path, str]) -> dict[str, torch.Tensor]:
    """A state dict from a ``.safetensors`` file or every ``*.safetensors`` in a folder."""
    from safetensors.torch import load_file

    path = Path(path)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise FileNotFoundError(f"no .safetensors weights at {path}")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(load_file(str(f)))
    return weights


class Generator:
    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        policy_version: int = 0,
        max_batch_rows: int = 16,
        max_context: Optional[int] = None,
        device: Optional[str] = None,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device) if device else next(model.parameters()).device
        self.policy_version = policy_version
        self.max_batch_rows = max_batch_rows
        self.max_context = max_context or int(getattr(model.config, "max_position_embeddings", 2048))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
        self._queue: "queue.Queue[GenRequest]" = queue.Queue()
        self._swaps: "queue.Queue[_Swap]" = queue.Queue()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agl-generator", daemon=True)
        self.requests_served = 0
        self.batches_run = 0
        self.generating = 0  # rows of the batch being decoded right now (0 when idle)
        self._thread.start()

    # ---------------------------------------------------------------- public API (any thread)

    def submit(self, request: GenRequest) -> "Future[GenResult]":
        if self._stop.is_set():
            raise RuntimeError("generator is closed")
        if not request.prompt_ids:
            raise ValueError("empty prompt")
        if len(request.prompt_ids) + 1 > self.max_context:
            raise ValueError(f"prompt of {len(request.prompt_ids)} tokens exceeds the context of {self.max_context}")
        self._queue.put(request)
        self._wake.set()
        return request.future

    def swap(self, weights: Union[Mapping[str, torch.Tensor], Path, str], version: int) -> "Future[int]":
        """Serve ``weights`` as ``version`` from the next batch on; the future resolves once applied."""
        swap = _Swap(weights, version)
        self._swaps.put(swap)
        self._wake.set()
        return swap.future

    def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    # ---------------------------------------------------------------- worker thread

    def _run(self) -> None:
        while not self._stop.is_set():
            self._apply_swaps()
            batch = self._take_batch()
            if not batch:
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            try:
                self.generating = sum(req.n for req in batch)
                self._generate(batch)
            except Exception as exc:  # one bad batch must not kill the server
                logger.exception("generation failed")
                for req in batch:
                    if not req.future.done():
                        req.future.set_exception(exc)
            finally:
                self.generating = 0
        for req in self._drain():
            req.future.set_exception(RuntimeError("generator closed"))

    def _drain(self) -> list[GenRequest]:
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def _apply_swaps(self) -> None:
        while True:
            try:
                swap = self._swaps.get_nowait()
            except queue.Empty:
                return
            try:
                started = time.perf_counter()
                weights = swap.weights if isinstance(swap.weights, Mapping) else load_weights_file(swap.weights)
                missing, unexpected = self.model.load_state_dict(dict(weights), strict=False)
                tied = set(getattr(self.model, "_tied_weights_keys", None) or [])
                missing = [k for k in missing if k not in tied]
                if missing or unexpected:
                    raise ValueError(f"weights do not match the served model: missing {missing[:3]}, unexpected {unexpected[:3]}")
                self.policy_version = swap.version
                logger.info("now serving policy version %d (swap %.3fs)", swap.version, time.perf_counter() - started)
                swap.future.set_result(swap.version)
            except Exception as exc:
                swap.future.set_exception(exc)

    def _take_batch(self) -> list[GenRequest]:
        batch: list[GenRequest] = []
        rows = 0
        while rows < self.max_batch_rows:
            try:
                req = self._queue.get_nowait()
            except queue.Empty:
                break
            batch.append(req)
            rows += req.n
        return batch

    @torch.no_grad()
    def _generate(self, batch: list[GenRequest]) -> None:
        version = self.policy_version
        rows: list[tuple[GenRequest, int]] = [(req, i) for req in batch for i in range(req.n)]
        bsz = len(rows)
        plen = max(len(req.prompt_ids) for req, _ in rows)
        budgets = torch.tensor([min(req.max_tokens, self.max_context - len(req.prompt_ids)) for req, _ in rows])
        steps = int(budgets.max())
        input_ids = torch.full((bsz, plen), self.pad_id, dtype=torch.long)
        attention = torch.zeros((bsz, plen), dtype=torch.long)
        for r, (req, _) in enumerate(rows):
            input_ids[r, plen - len(req.prompt_ids) :] = torch.tensor(req.prompt_ids)
            attention[r, plen - len(req.prompt_ids) :] = 1
        temps = torch.tensor([max(req.temperature, 0.0) for req, _ in rows], dtype=torch.float32)
        top_ps = torch.tensor([req.top_p for req, _ in rows], dtype=torch.float32)
        gens = [_rng(req.seed, i) for req, i in rows]
        stops = [self.eos_ids | set(req.stop_token_ids) for req, _ in rows]
        choices = [Choice() for _ in rows]
        finished = torch.zeros(bsz, dtype=torch.bool)

        position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
        past = None
        step_ids, step_pos = input_ids, position_ids
        for _step in range(steps):
            out = self.model(
                input_ids=step_ids.to(self.device),
                attention_mask=attention.to(self.device),
                position_ids=step_pos.to(self.device),
                past_key_values=past,
                use_cache=True,
                logits_to_keep=1,  # only the next-token distribution; no (B, prompt, vocab) logits
            )
            past = out.past_key_values
            logits = out.logits[:, -1, :].float().cpu()
            raw_logprobs = torch.log_softmax(logits, dim=-1)
            next_ids = torch.full((bsz,), self.pad_id, dtype=torch.long)
            for r in range(bsz):
                if finished[r]:
                    continue
                token = _sample(logits[r], float(temps[r]), float(top_ps[r]), gens[r])
                next_ids[r] = token
                choice = choices[r]
                choice.token_ids.append(token)
                choice.logprobs.append(float(raw_logprobs[r, token]))
                req, index = rows[r]
                if req.on_token is not None:
                    req.on_token(index, token, choice.logprobs[-1])
                if token in stops[r]:
                    finished[r] = True
                    choice.finish_reason = "stop"
                elif len(choice.token_ids) >= int(budgets[r]):
                    finished[r] = True
                    choice.finish_reason = "length"
            if bool(finished.all()):
                break
            step_ids = next_ids[:, None]
            step_pos = step_pos[:, -1:] + 1
            attention = torch.cat([attention, torch.ones((bsz, 1), dtype=torch.long)], dim=1)

        self.batches_run += 1
        cursor = 0
        for req in batch:
            result = GenResult(list(req.prompt_ids), choices[cursor : cursor + req.n], version)
            cursor += req.n
            self.requests_served += 1
            req.future.set_result(result)


def _rng(seed: Optional[int], index: int) -> Optional[torch.Generator]:
    if seed is None:
        return None
    gen = torch.Generator()
    gen.manual_seed(seed * 1_000_003 + index)
    return gen


def _sample(logits: torch.Tensor, temperature: float, top_p: float, gen: Optional[torch.Generator]) -> int:
    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < top_p  # always keeps the top token
        sorted_probs = torch.where(keep, sorted_probs, torch.zeros_like(sorted_probs))
        choice = torch.multinomial(sorted_probs / sorted_probs.sum(), 1, generator=gen)
        return int(order[choice])
    return int(torch.multinomial(probs, 1, generator=gen))
