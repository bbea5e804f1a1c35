"""Exported checkpoints load with plain transformers and generate exactly what the embedded server served."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load_file

from agl_stream_trainer.backends.hf import HFPolicy, OptimConfig
from agl_stream_trainer.checkpoint import MODEL_FILE, CheckpointManager, TrainerState
from agl_stream_trainer.export import (
    MANIFEST_FILE,
    ExportFormatUnavailable,
    export_checkpoint,
    list_checkpoints,
    onnx_unavailable_reason,
    resolve_checkpoint,
)

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
NEW_TOKENS = 12


@pytest.fixture(scope="module")
def checkpoints(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint root with steps 1..3; steps 2 and 3 hold weights perturbed away from the base."""
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, _tok, _ = load_model_and_tokenizer(str(tiny_model_dir))
    policy = HFPolicy(model, OptimConfig(lr=1e-3))
    manager = CheckpointManager(tmp_path_factory.mktemp("export") / "ck", keep=5)
    manager.save(policy, TrainerState(step=1, policy_version=1))
    torch.manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5 * torch.randn_like(p))
    manager.save(policy, TrainerState(step=2, policy_version=2))
    manager.save(policy, TrainerState(step=3, policy_version=3, extra={"scheduler": {}}))
    return manager.root


def _greedy(model: Any, tokenizer: Any) -> tuple[list[int], list[int]]:
    """(prompt ids, new token ids) of plain transformers greedy generation on the chat prompt."""
    enc = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, return_dict=True, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=NEW_TOKENS, do_sample=False)
    plen = enc["input_ids"].shape[1]
    return enc["input_ids"][0].tolist(), out[0, plen:].tolist()


def _served(base_dir: Path, weights: Path, version: int) -> dict[str, Any]:
    """The embedded server's temperature-0 chat completion after swapping ``weights`` in, as the learner publishes."""
    from agl_stream_trainer.engines.embedded import EmbeddedServer
    from agl_stream_trainer.engines.generation import Generator
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, tokenizer, _ = load_model_and_tokenizer(str(base_dir))
    generator = Generator(model, tokenizer)
    server = EmbeddedServer(generator, "tiny").start()
    try:
        assert generator.swap(weights, version).result(timeout=60) == version
        resp = httpx.post(server.base_url + "/v1/chat/completions",
                          json={"messages": MESSAGES, "max_tokens": NEW_TOKENS, "temperature": 0}, timeout=120)
        resp.raise_for_status()
        return resp.json()
    finally:
        server.stop()
        generator.close()


def test_huggingface_export_generates_what_the_server_served(checkpoints: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = resolve_checkpoint(checkpoints, "latest")
    result = export_checkpoint(ckpt, str(tiny_model_dir), tmp_path / "hf", "huggingface")
    out = tmp_path / "hf"
    assert result.output_dir == out and result.format == "huggingface"
    assert (result.step, result.policy_version, result.model_name) == (3, 3, "tiny-llama")
    assert result.files == sorted(p.name for p in out.iterdir())
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", MANIFEST_FILE} <= set(result.files)
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["source_checkpoint"] == str(ckpt.resolve()) and manifest["step"] == 3 and manifest["policy_version"] == 3
    assert manifest["weights_only"] is False

    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == "<|im_end|>"
    exported = model.state_dict()
    for name, tensor in load_file(str(ckpt / MODEL_FILE)).items():
        assert torch.equal(exported[name], tensor), name

    prompt_ids, tokens = _greedy(model, tokenizer)
    served = _served(tiny_model_dir, ckpt / MODEL_FILE, 3)
    assert served["policy_version"] == 3
    assert served["prompt_token_ids"] == prompt_ids  # the exported tokenizer carries the served chat template
    assert served["choices"][0]["token_ids"] == tokens
    assert len(tokens) > 0

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    _, base_tokens = _greedy(base, AutoTokenizer.from_pretrained(tiny_model_dir))
    assert base_tokens != tokens  # the checkpoint's weights were exported, not the base's


def test_safetensors_export_is_weights_and_config_only(checkpoints: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    ckpt = resolve_checkpoint(checkpoints, "2")
    result = export_checkpoint(ckpt, str(tiny_model_dir), tmp_path / "st", "safetensors", model_name="my-policy")
    out = result.output_dir
    assert result.files == ["agl_export.json", "config.json", "model.safetensors"]
    assert (result.step, result.policy_version, result.model_name) == (2, 2, "my-policy")
    assert (out / MODEL_FILE).read_bytes() == (ckpt / MODEL_FILE).read_bytes()
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert manifest["weights_only"] is True and manifest["format"] == "safetensors" and manifest["checkpoint_name"] == ckpt.name
    model = AutoModelForCausalLM.from_pretrained(out)  # config + weights are enough to rebuild the model
    want = load_file(str(ckpt / MODEL_FILE))
    for name, tensor in model.state_dict().items():
        if name in want:
            assert torch.equal(tensor, want[name]), name


def test_onnx_is_refused_with_what_to_install(checkpoints: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    reason = onnx_unavailable_reason()
    with pytest.raises(ExportFormatUnavailable) as err:
        export_checkpoint(resolve_checkpoint(checkpoints), str(tiny_model_dir), tmp_path / "onnx", "onnx")
    message = str(err.value)
    assert "onnx" in message and "optimum-cli export onnx" in message
    if reason is not None:  # this environment: neither onnx nor onnxscript is installed
        assert reason in message and "pip install" in message
    assert not (tmp_path / "onnx").exists()


def test_unknown_format_is_a_value_error(checkpoints: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown export format 'gguf'"):
        export_checkpoint(resolve_checkpoint(checkpoints), str(tiny_model_dir), tmp_path / "x", "gguf")  # type: ignore[arg-type]


def test_existing_output_is_refused_unless_overwrite(checkpoints: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()  # an empty folder is fine
    export_checkpoint(resolve_checkpoint(checkpoints, "1"), str(tiny_model_dir), out, "safetensors")
    (out / "mine.txt").write_text("user data")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_checkpoint(resolve_checkpoint(checkpoints, "3"), str(tiny_model_dir), out, "safetensors")
    assert (out / "mine.txt").exists() and json.loads((out / MANIFEST_FILE).read_text())["step"] == 1

    result = export_checkpoint(resolve_checkpoint(checkpoints, "3"), str(tiny_model_dir), out, "safetensors", overwrite=True)
    assert result.step == 3 and not (out / "mine.txt").exists()
    assert json.loads((out / MANIFEST_FILE).read_text())["step"] == 3
    assert sorted(os.listdir(tmp_path)) == ["out"]  # no temporary or moved-aside folders left


def test_failed_export_leaves_nothing_behind(checkpoints: Path, tiny_model_dir: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import PreTrainedTokenizerBase

    def broken(*_a: Any, **_k: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        export_checkpoint(resolve_checkpoint(checkpoints), str(tiny_model_dir), tmp_path / "hf", "huggingface")
    assert os.listdir(tmp_path) == []


def test_missing_or_wrong_checkpoint_is_file_not_found(checkpoints: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        export_checkpoint(tmp_path / "nope", str(tiny_model_dir), tmp_path / "out")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a learner checkpoint: model.safetensors, trainer_state.json missing"):
        export_checkpoint(tmp_path / "empty", str(tiny_model_dir), tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="checkpoint root.*resolve_checkpoint"):
        export_checkpoint(checkpoints, str(tiny_model_dir), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_checkpoint_from_another_base_is_refused(checkpoints: Path, tmp_path: Path) -> None:
    from agl_stream_trainer.models import build_tiny_model

    other = build_tiny_model(tmp_path / "narrow", layers=1, hidden=32)
    with pytest.raises(ValueError, match="does not fit base model"):
        export_checkpoint(resolve_checkpoint(checkpoints), str(other), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_list_and_resolve_checkpoints(checkpoints: Path, tmp_path: Path) -> None:
    infos = list_checkpoints(checkpoints)
    assert [(c.name, c.step, c.policy_version) for c in infos] == [
        ("step-00000001", 1, 1), ("step-00000002", 2, 2), ("step-00000003", 3, 3)]
    assert [c.is_latest for c in infos] == [False, False, True]
    assert all(c.created.tzinfo is not None and c.path.parent == checkpoints for c in infos)
    assert resolve_checkpoint(checkpoints, "latest") == checkpoints / "step-00000003"
    assert resolve_checkpoint(checkpoints, "step-00000001") == checkpoints / "step-00000001"
    assert resolve_checkpoint(checkpoints, "2") == checkpoints / "step-00000002"
    with pytest.raises(FileNotFoundError, match="available: step-00000001, step-00000002, step-00000003"):
        resolve_checkpoint(checkpoints, "step-9")
    assert list_checkpoints(tmp_path / "none") == []
    with pytest.raises(FileNotFoundError, match="no checkpoints under"):
        resolve_checkpoint(tmp_path / "none", "latest")


def test_latest_follows_the_pointer_and_skips_partial_folders(checkpoints: Path, tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "ck"
    shutil.copytree(checkpoints, root)
    (root / "latest").write_text("step-00000002\n")  # e.g. step 3 written by a learner that then rolled back
    assert resolve_checkpoint(root) == root / "step-00000002"
    assert [c.is_latest for c in list_checkpoints(root)] == [False, True, False]
    (root / ".step-00000004.tmp99").mkdir()  # a save in progress
    shutil.copytree(root / "step-00000001", root / ".step-00000004.tmp99", dirs_exist_ok=True)
    (root / "step-00000005").mkdir()  # no weights, no state: not a checkpoint
    assert [c.step for c in list_checkpoints(root)] == [1, 2, 3]
    (root / "latest").write_text("step-00000007")  # dangling: fall back to the highest step
    assert resolve_checkpoint(root, "latest") == root / "step-00000003"
    (root / "latest").unlink()
    assert resolve_checkpoint(root, "latest") == root / "step-00000003"
