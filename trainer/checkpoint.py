"""Learner checkpoints: model and optimizer in safetensors, plus a JSON state (policy version, step, offsets).

Layout of ``<root>/step-<N>/``::

    model.safetensors        the policy weights (``save_pretrained``-compatible names)
    optimizer.safetensors    AdamW state tensors, flattened as ``state.<param index>.<name>``
    trainer_state.json       step, policy version, consumer offsets (and the records past them
                             that were already trained), optimizer param groups, LR scheduler
                             state, scheduler progress, anything extra

A checkpoint is written to a temporary folder and renamed into place, then ``<root>/latest`` is
rewritten (atomically) to name it, so a crash mid-write never leaves a half checkpoint as the
latest. Consumer offsets are the ``agl-learner`` group's positions at the time of the checkpoint:
per partition, the first record not done yet (the learner commits up to there just before). On
resume the learner seeks there, so the batches after the checkpoint are replayed onto the
checkpoint's weights (at-least-once, consistent with the weights). Records past that position can
be done already (groups interleave on the topic, and one can complete and train before a group
with an earlier record): their offsets are saved too (``done_offsets``) and the resumed learner
skips them instead of training them a second time. ``settled_rollouts`` lists the rollouts whose
group left the batcher (trained or dropped) up to its memory: a trajectory published again after the
checkpoint is recognised as a duplicate (see :mod:`agl_stream_trainer.batching`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch
from safetensors.torch import load_file, save_file

STATE_FILE = "trainer_state.json"
MODEL_FILE = "model.safetensors"
OPTIM_FILE = "optimizer.safetensors"


@dataclass
class TrainerState:
    step: int = 0
    policy_version: int = 0
    offsets: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset to read
    extra: dict[str, Any] = field(default_factory=dict)
    done_offsets: dict[str, list[int]] = field(default_factory=dict)  # "topic:partition" -> done offsets past it
    settled_rollouts: list[str] = field(default_factory=list)  # rollouts trained or dropped (duplicates skip)


def offsets_to_json(offsets: dict[Any, int]) -> dict[str, int]:
    return {f"{tp.topic}:{tp.partition}": int(off) for tp, off in offsets.items()}


def offsets_from_json(data: dict[str, int]) -> dict[Any, int]:
    from aiokafka import TopicPartition

    out = {}
    for key, off in data.items():
        topic, _, part = key.rpartition(":")
        out[TopicPartition(topic, int(part))] = int(off)
    return out


def _flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for idx, state in sd["state"].items():
        for name, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{name}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(str(idx), {})[name] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = value
    for idx, values in meta.get("scalars", {}).items():
        state.setdefault(int(idx), {}).update(values)
    return {"state": state, "param_groups": meta["param_groups"]}


class CheckpointManager:
    def __init__(self, root: Path, keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = max(1, keep)

    def latest(self) -> Optional[Path]:
        pointer = self.root / "latest"
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        return path if (path / STATE_FILE).exists() else None

    def save(self, policy: Any, state: TrainerState) -> Path:
        """Write a checkpoint of ``policy`` (an HFPolicy) and ``state``; returns its folder."""
        self.root.mkdir(parents=True, exist_ok=True)
        name = f"step-{state.step:08d}"
        final = self.root / name
        tmp = self.root / f".{name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_file(policy.state_dict(), str(tmp / MODEL_FILE), metadata={"format": "pt"})
        optim_tensors, optim_meta = _flatten_optimizer(policy.optimizer)
        save_file(optim_tensors, str(tmp / OPTIM_FILE), metadata={"format": "pt"})
        doc = {
            "step": state.step,
            "policy_version": state.policy_version,
            "offsets": state.offsets,
            "done_offsets": state.done_offsets,
            "settled_rollouts": state.settled_rollouts,
            "extra": state.extra,
            "optimizer": optim_meta,
            "lr_scheduler": policy.scheduler.state_dict(),
        }
        (tmp / STATE_FILE).write_text(json.dumps(doc, indent=1, default=float))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        pointer_tmp = self.root / f".latest.tmp{os.getpid()}"
        pointer_tmp.write_text(name)
        os.replace(pointer_tmp, self.root / "latest")
        self._prune(keep_name=name)
        return final

    def load(self, policy: Any, path: Optional[Path] = None) -> Optional[TrainerState]:
        """Restore ``policy`` (weights, optimizer, LR schedule) from ``path`` or the latest; None if none."""
        path = path or self.latest()
        if path is None:
            return None
        doc = json.loads((path / STATE_FILE).read_text())
        weights = load_file(str(path / MODEL_FILE))
        missing, unexpected = policy.model.load_state_dict(weights, strict=False)
        missing = [k for k in missing if k not in tied_names(policy.model)]
        if missing or unexpected:
            raise ValueError(f"checkpoint {path} does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
        optim_state = _unflatten_optimizer(load_file(str(path / OPTIM_FILE)), doc["optimizer"])
        policy.optimizer.load_state_dict(optim_state)
        policy.scheduler.load_state_dict(doc["lr_scheduler"])
        return TrainerState(
            step=int(doc["step"]),
            policy_version=int(doc["policy_version"]),
            offsets={k: int(v) for k, v in doc.get("offsets", {}).items()},
            done_offsets={k: [int(o) for o in v] for k, v in doc.get("done_offsets", {}).items()},
            settled_rollouts=[str(r) for r in doc.get("settled_rollouts", [])],
            extra=doc.get("extra", {}),
        )

    def _prune(self, keep_name: str) -> None:
        steps = sorted(p for p in self.root.glob("step-*") if p.is_dir())
        for old in steps[: max(0, len(steps) - self.keep)]:
            if old.name != keep_name:
                shutil.rmtree(old, ignore_errors=True)


def tied_names(model: Any) -> set[str]:
    tied = getattr(model, "_tied_weights_keys", None) or []
    if isinstance(tied, dict):
        return set(tied)
    return set(tied)
