"""Turn a learner checkpoint into a model folder a user can load elsewhere (the core of ``download_model``).

A checkpoint (``<root>/step-<N>/``, see :mod:`agl_stream_trainer.checkpoint`) holds only the policy
weights, the optimizer and the learner's state: no config, no tokenizer. Those come from the base
model the learner was configured with (``model:`` in trainer.yaml: ``"tiny"``, ``"smollm2"`` or a
``save_pretrained`` folder), so :func:`export_checkpoint` needs that spec too.

Formats:

- ``"huggingface"``: ``config.json``, ``generation_config.json``, the checkpoint's weights written
  by ``save_pretrained`` (safetensors) and the tokenizer (with its chat template and ``<|im_end|>``
  as eos), so ``AutoModelForCausalLM.from_pretrained(dir)`` and ``AutoTokenizer.from_pretrained(dir)``
  load it and greedy generation matches what the embedded inference server served.
- ``"safetensors"``: weights only: the checkpoint's ``model.safetensors`` copied byte for byte, and
  ``config.json``. No tokenizer: take it from the base model.
- ``"onnx"``: not produced here. ``torch.onnx.export`` needs the ``onnx`` package (and ``onnxscript``
  for the default exporter), which the trainer does not depend on; :class:`ExportFormatUnavailable`
  says so and what to install.

Every format also writes ``agl_export.json`` (source checkpoint, step, policy version, base model).
The folder is written next to ``output_dir`` under a temporary name and renamed into place, so a
failed export never leaves a half-written model where a user would load it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Optional, get_args

from agl_stream_trainer.checkpoint import MODEL_FILE, STATE_FILE, tied_names

ExportFormat = Literal["huggingface", "safetensors", "onnx"]
EXPORT_FORMATS: tuple[str, ...] = get_args(ExportFormat)
MANIFEST_FILE = "agl_export.json"
LATEST_POINTER = "latest"


class ExportFormatUnavailable(RuntimeError):
    """The requested format cannot be produced in this environment (the message says what is missing)."""


@dataclass(frozen=True)
class CheckpointInfo:
    name: str  # folder name, e.g. "step-00000012"
    step: int
    policy_version: int
    created: datetime  # when trainer_state.json was written (UTC); the state file has no timestamp of its own
    path: Path
    is_latest: bool = False  # named by the root's ``latest`` pointer


@dataclass
class ExportResult:
    output_dir: Path
    format: str
    files: list[str] = field(default_factory=list)  # paths relative to output_dir, sorted
    model_name: str = ""
    policy_version: int = 0
    step: int = 0
    checkpoint: Optional[Path] = None


# ---------------------------------------------------------------- finding checkpoints


def _read_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / STATE_FILE).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path / STATE_FILE} is not valid JSON: {exc}") from None


def _is_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / STATE_FILE).is_file() and (path / MODEL_FILE).is_file()


def _info(path: Path, latest_name: Optional[str]) -> CheckpointInfo:
    doc = _read_state(path)
    mtime = (path / STATE_FILE).stat().st_mtime
    return CheckpointInfo(
        name=path.name,
        step=int(doc.get("step", 0)),
        policy_version=int(doc.get("policy_version", 0)),
        created=datetime.fromtimestamp(mtime, tz=timezone.utc),
        path=path,
        is_latest=path.name == latest_name,
    )


def _latest_name(root: Path) -> Optional[str]:
    pointer = root / LATEST_POINTER
    if not pointer.is_file():
        return None
    name = pointer.read_text().strip()
    return name if name and _is_checkpoint(root / name) else None


def list_checkpoints(root: Path) -> list[CheckpointInfo]:
    """The complete checkpoints under ``root``, oldest step first; [] when the learner has written none yet.

    Folders being written (``.step-N.tmp<pid>``) and folders without weights or state are skipped,
    so what is listed can be exported.
    """
    root = Path(root)
    if not root.is_dir():
        return []
    latest = _latest_name(root)
    found = [_info(p, latest) for p in root.iterdir() if not p.name.startswith(".") and _is_checkpoint(p)]
    return sorted(found, key=lambda c: (c.step, c.name))


def resolve_checkpoint(root: Path, name_or_latest: str = "latest") -> Path:
    """One checkpoint folder under ``root``: ``"latest"``, a folder name (``step-00000012``) or a step (``"12"``).

    ``"latest"`` follows the pointer the CheckpointManager rewrites after each save; without a valid
    pointer (an older layout, or a pointer to a pruned folder) it falls back to the highest step.
    """
    root = Path(root)
    checkpoints = list_checkpoints(root)
    if not checkpoints:
        raise FileNotFoundError(
            f"no checkpoints under {root} (expected step-N folders with {MODEL_FILE} and {STATE_FILE})")
    key = str(name_or_latest).strip()
    if key == LATEST_POINTER:
        latest = [c for c in checkpoints if c.is_latest]
        return (latest or checkpoints[-1:])[-1].path
    for c in checkpoints:
        if c.name == key:
            return c.path
    if key.isdigit():
        for c in reversed(checkpoints):
            if c.step == int(key):
                return c.path
    names = ", ".join(c.name for c in checkpoints)
    raise FileNotFoundError(f"no checkpoint {key!r} under {root}; available: {names}, or 'latest'")


# ---------------------------------------------------------------- exporting


def onnx_unavailable_reason() -> Optional[str]:
    """Why ONNX cannot be exported here, or None if nothing is missing.

    Checked by module presence rather than by trying an export, because the attempt is what fails
    late: the default (dynamo) exporter needs ``onnxscript`` and both exporters need ``onnx``.
    """
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        return (f"ONNX export needs the {' and '.join(repr(m) for m in missing)} package(s), which are not installed "
                f"(torch.onnx.export requires them): pip install {' '.join(missing)}")
    return None


def _onnx_error() -> ExportFormatUnavailable:
    reason = onnx_unavailable_reason() or "agl-stream does not write ONNX itself"
    return ExportFormatUnavailable(
        f"cannot export format 'onnx': {reason}. Alternatively export format='huggingface' and convert that folder "
        "with Hugging Face Optimum (pip install 'optimum-onnx[onnxruntime]'; "
        "optimum-cli export onnx --model <dir> <out>), "
        "which also exports the KV-cache inputs a decoder needs."
    )


def _check_checkpoint(checkpoint: Path) -> Path:
    checkpoint = Path(checkpoint)
    if not checkpoint.exists():
        raise FileNotFoundError(f"checkpoint {checkpoint} does not exist")
    if not checkpoint.is_dir():
        raise FileNotFoundError(
            f"checkpoint {checkpoint} is not a folder (expected a step-N folder of the learner's checkpoint_dir)")
    if _is_checkpoint(checkpoint):
        return checkpoint.resolve()
    if list_checkpoints(checkpoint):
        raise FileNotFoundError(f"{checkpoint} is a checkpoint root, not a checkpoint: pick one with "
                                f"resolve_checkpoint({str(checkpoint)!r}, 'latest')")
    absent = [f for f in (MODEL_FILE, STATE_FILE) if not (checkpoint / f).is_file()]
    raise FileNotFoundError(f"{checkpoint} is not a learner checkpoint: {', '.join(absent)} missing")


def _check_output(output_dir: Path, overwrite: bool) -> None:
    if output_dir.is_dir() and not any(output_dir.iterdir()):
        return
    if output_dir.exists() and not overwrite:
        raise FileExistsError(f"{output_dir} exists and is not empty; pass overwrite=True to replace it")


def _load_checkpoint_model(checkpoint: Path, base_model: str) -> tuple[Any, Any]:
    """(model, tokenizer): the base model's architecture and tokenizer carrying the checkpoint's weights.

    The weights are loaded in the checkpoint's own dtype and checked name by name against the base
    model, so a checkpoint from another base fails here instead of exporting a silently mixed model.
    """
    from safetensors.torch import load_file

    from agl_stream_trainer.models import load_model_and_tokenizer

    weights = load_file(str(checkpoint / MODEL_FILE))
    dtypes = {t.dtype for t in weights.values() if t.is_floating_point()}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    model, tokenizer, _ = load_model_and_tokenizer(base_model, dtype=dtype)
    try:
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except RuntimeError as exc:  # shape mismatch
        raise ValueError(f"checkpoint {checkpoint} does not fit base model {base_model!r}: {exc}") from None
    missing = [k for k in missing if k not in tied_names(model)]
    if missing or unexpected:
        raise ValueError(f"checkpoint {checkpoint} does not fit base model {base_model!r}: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval(), tokenizer


def _default_model_name(state: dict[str, Any], base_model: str) -> str:
    # the name the learner served the policy under when trainer.yaml sets no engine.model_name
    name = state.get("extra", {}).get("model_name")
    if name:
        return str(name)
    return base_model if base_model in ("smollm2", "tiny") else Path(base_model).name


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _publish(tmp: Path, output_dir: Path) -> None:
    """Rename the finished folder into place; an existing one (overwrite) is moved aside first, then deleted."""
    old: Optional[Path] = None
    if output_dir.is_dir() and any(output_dir.iterdir()):
        old = output_dir.with_name(f".{output_dir.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(output_dir, old)
    elif output_dir.exists() and not output_dir.is_dir():
        output_dir.unlink()
    os.replace(tmp, output_dir)  # onto an absent or empty folder
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_checkpoint(
    checkpoint: Path,
    base_model: str,
    output_dir: Path,
    format: ExportFormat = "huggingface",
    *,
    overwrite: bool = False,
    model_name: Optional[str] = None,
) -> ExportResult:
    """Write the checkpoint's policy to ``output_dir`` in ``format``; see the module docstring for the layouts.

    ``base_model`` is the trainer config's model spec, which supplies config and tokenizer.
    Raises FileNotFoundError (no such checkpoint), FileExistsError (non-empty ``output_dir`` without
    ``overwrite``), ExportFormatUnavailable (onnx here), ValueError (unknown format, or weights that
    do not fit ``base_model``).
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    checkpoint = _check_checkpoint(checkpoint)
    if format == "onnx":
        raise _onnx_error()
    output_dir = Path(output_dir).absolute()
    _check_output(output_dir, overwrite)

    state = _read_state(checkpoint)
    step, version = int(state.get("step", 0)), int(state.get("policy_version", 0))
    name = model_name or _default_model_name(state, base_model)
    model, tokenizer = _load_checkpoint_model(checkpoint, base_model)

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = output_dir.with_name(f".{output_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tmp.mkdir()
        if format == "huggingface":
            model.save_pretrained(tmp)  # safetensors (the only format transformers 5 writes)
            tokenizer.save_pretrained(tmp)
        else:  # safetensors: the checkpoint's own bytes, plus what is needed to rebuild the architecture
            shutil.copyfile(checkpoint / MODEL_FILE, tmp / MODEL_FILE)
            model.config.save_pretrained(tmp)
        manifest = {
            "format": format,
            "weights_only": format == "safetensors",
            "source_checkpoint": str(checkpoint),
            "checkpoint_name": checkpoint.name,
            "step": step,
            "policy_version": version,
            "base_model": base_model,
            "model_name": name,
            "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
        files = _files(tmp)
        _publish(tmp, output_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(output_dir=output_dir, format=format, files=files, model_name=name,
                        policy_version=version, step=step, checkpoint=checkpoint)
