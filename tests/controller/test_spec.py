"""How the task reaches the command (pure logic)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agl_stream_controller import CommandSpec, InputDelivery, TaskFieldMissing, mapped_env, task_document


def test_env_map_reads_dotted_paths_strings_as_they_are_the_rest_as_json() -> None:
    doc = task_document({"question": "2+2?", "tools": ["calc", "search"], "n": 3}, rollout_id="ro-1", attempt_id="at-1",
                        mode="train")  # fmt: skip
    env = mapped_env({"QUESTION": "input.question", "FIRST_TOOL": "input.tools.0", "N": "input.n",
                      "TOOLS": "input.tools", "ROLLOUT": "rollout_id"}, doc)  # fmt: skip
    assert env == {"QUESTION": "2+2?", "FIRST_TOOL": "calc", "N": "3", "TOOLS": '["calc", "search"]', "ROLLOUT": "ro-1"}


def test_a_missing_field_is_named() -> None:
    doc = task_document({"question": "?"}, rollout_id="ro-1", attempt_id="at-1", mode=None)
    with pytest.raises(TaskFieldMissing, match=r"env_map ANSWER: the task has no 'input.answer' \(no 'answer'\)"):
        mapped_env({"ANSWER": "input.answer"}, doc)


def test_a_spec_refuses_what_cannot_be_run_or_named() -> None:
    with pytest.raises(ValidationError):
        CommandSpec(argv=[])
    with pytest.raises(ValidationError, match="environment variable names"):
        InputDelivery(env_map={"NOT-A-NAME": "input.x"})
    assert CommandSpec(argv=["agent"]).input.json_file_env == "AGL_TASK_FILE"
