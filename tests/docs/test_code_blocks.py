"""Every Python code block of README.md and docs/*.md runs, so a documented example cannot rot.

Each block runs as its own script (``python block.py``, so ``if __name__ == "__main__":`` blocks run
too) in a fresh data directory with a local stack, from the repository root. A block may need a
smaller setting to run quickly here (the tiny random model instead of SmolLM2, one training step);
the substitution is written right above the block, visible to readers, as an HTML comment:

    <!-- docs-test {"replace": [["\\"smollm2\\"", "\\"tiny\\""]], "env": {"NAME": "value"}} -->

``replace`` pairs are applied in order and each must match (a stale substitution fails the test);
``env`` adds environment variables; ``server`` (a model spec) starts ``agl-stream server start`` with
that model for the block, in its own data directory, and sets ``AGL_SERVER_URL`` and
``AGL_SERVER_TOKEN``. Nothing else is changed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?:<!-- docs-test (?P<spec>\{.*?\}) -->\n)?```python\n(?P<code>.*?)\n```", re.DOTALL)


@dataclass
class CodeBlock:
    document: Path
    line: int
    code: str
    replace: list[tuple[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    server: Optional[str] = None

    @property
    def id(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"

    def runnable(self) -> str:
        code = self.code
        for old, new in self.replace:
            if old not in code:
                raise AssertionError(f"{self.id}: the docs-test substitution {old!r} no longer matches the block")
            code = code.replace(old, new)
        return code


def code_blocks() -> list[CodeBlock]:
    blocks = []
    for document in DOCUMENTS:
        text = document.read_text()
        for match in BLOCK.finditer(text):
            spec = json.loads(match.group("spec")) if match.group("spec") else {}
            unknown = set(spec) - {"replace", "env", "server"}
            assert not unknown, f"{document}: unknown docs-test keys {unknown}"
            line = text[: match.start("code")].count("\n") + 1
            blocks.append(CodeBlock(document, line, match.group("code"), [tuple(p) for p in spec.get("replace", [])],
                                    dict(spec.get("env", {})), spec.get("server")))  # fmt: skip
    return blocks


BLOCKS = code_blocks()


def test_blocks_are_found() -> None:
    documents = {b.document.name for b in BLOCKS}
    assert {"README.md", "train-your-agent.md"} <= documents
    assert len(BLOCKS) >= 4


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_code_block_runs(block: CodeBlock, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.runnable() + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGL_")}
    env.update(AGL_DATA_DIR=str(tmp_path / "agl"), AGL_PARTITIONS="2", AGL_KAFKA_SESSION_TIMEOUT_MS="6000",
               HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), **block.env)  # fmt: skip
    server = None
    if block.server is not None:
        from tests.trainer.server.running import RunningServer

        server = RunningServer(tmp_path / "server" / "agl", block.server).start()
        env.update(AGL_SERVER_URL=server.url, AGL_SERVER_TOKEN=server.token)
    try:
        run = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    finally:
        if server is not None:
            server.stop()
    assert run.returncode == 0, f"{block.id} failed:\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
