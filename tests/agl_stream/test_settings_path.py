"""One settings path: every ``AGL_*`` variable is a field of ``Settings``, read by ``Settings.from_env`` only,
and listed in docs/operations.md; child processes get them back through ``Settings.to_env``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agl_stream.config import Settings, SettingsError, env_name, settings_table
from agl_stream.instrumentation import INSTRUMENTATIONS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agl_stream", "processors", "trainer", "ingest", "topics", "controller")
#: files allowed to touch AGL_* variables in os.environ, and why
ALLOWED = {
    "agl_stream/config.py": "the one loader",
    "agl_stream/env_var.py": "upstream's public resolve_*_env_var functions, kept for upstream users",
    "agl_stream/air/instrument.py": "saves and restores AGL_INSTRUMENT_OPENAI, which it sets for processes started later",
}


def _agl_constants(tree: ast.Module) -> set[str]:
    """Module-level names bound to an AGL_* literal or to ``env_name(...)``."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            literal = isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.startswith("AGL_")
            helper = isinstance(value, ast.Call) and getattr(value.func, "id", None) == "env_name"
            if literal or helper:
                names.add(node.targets[0].id)
    return names


def _names_agl(node: ast.AST, constants: set[str]) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.startswith("AGL_")
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return isinstance(first, ast.Constant) and str(first.value).startswith("AGL_")
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "env_name":
        return True
    return isinstance(node, ast.Name) and node.id in constants


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def raw_reads() -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if relative in ALLOWED:
                continue
            tree = ast.parse(path.read_text())
            constants = _agl_constants(tree)
            for node in ast.walk(tree):
                where = f"{relative}:{getattr(node, 'lineno', '?')}"
                if isinstance(node, ast.keyword) and node.arg == "envvar":
                    found.append(f"{where}: a CLI option reads the environment itself (envvar=)")
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    getter = (node.func.attr == "get" and _is_environ(node.func.value)) or node.func.attr == "getenv"
                    if getter and node.args and _names_agl(node.args[0], constants):
                        found.append(f"{where}: reads an AGL_* variable itself")
                elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
                    if _names_agl(node.slice, constants):
                        found.append(f"{where}: reads an AGL_* variable itself")
                elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                    if _names_agl(node.left, constants) and any(_is_environ(c) for c in node.comparators):
                        found.append(f"{where}: looks an AGL_* variable up itself")
    return found


def test_no_service_reads_an_agl_variable_except_through_the_settings() -> None:
    assert raw_reads() == []


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The scan above is not vacuous: each way of reading the environment is caught."""
    source = (
        'import os\nimport typer\nTOKEN = "AGL_X_TOKEN"\n'
        'a = os.environ.get("AGL_X")\nb = os.environ[TOKEN]\nc = os.getenv(f"AGL_{a}")\nd = TOKEN in os.environ\n'
        'e = typer.Option(None, envvar="AGL_Y")\n'
    )
    tree = ast.parse(source)
    constants = _agl_constants(tree)
    hits = [n for n in ast.walk(tree) if (isinstance(n, ast.keyword) and n.arg == "envvar")
            or (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args and _names_agl(n.args[0], constants))
            or (isinstance(n, ast.Subscript) and _is_environ(n.value) and _names_agl(n.slice, constants))
            or (isinstance(n, ast.Compare) and _names_agl(n.left, constants))]  # fmt: skip
    assert len(hits) == 5


def test_every_variable_is_in_the_operations_table() -> None:
    docs = (ROOT / "docs" / "operations.md").read_text()
    assert settings_table() in docs, "regenerate it: python -c 'from agl_stream.config import settings_table; print(settings_table())'"


def test_every_instrumentation_has_its_switch() -> None:
    for item in INSTRUMENTATIONS:
        assert f"instrument_{item.name}" in Settings.model_fields, item.name


def test_children_rebuild_the_same_settings_from_to_env(tmp_path: Path) -> None:
    parent = Settings.from_env(env={"AGL_SPAN_OVERFLOW": "drop", "AGL_INGEST_TOKEN": "t0k3n"}, kafka_bootstrap="h:9092",
                               partitions=8, data_dir=tmp_path, store_span_counts=False, log_level="DEBUG")  # fmt: skip
    child = Settings.from_env(env=parent.to_env())
    assert child == parent
    # a flag that sets a field back to its default still reaches the child over the parent's environment
    flagged = Settings.from_env(env={"AGL_STORE_SPAN_COUNTS": "false"}, store_span_counts=True)
    assert flagged.to_env()[env_name("store_span_counts")] == "true"


def test_a_bad_value_names_its_variable_whichever_way_it_came() -> None:
    with pytest.raises(SettingsError, match="AGL_SPAN_BUFFER"):
        Settings.from_env(env={"AGL_SPAN_BUFFER": "0"})
    with pytest.raises(SettingsError, match="AGL_DASHBOARD_PORT"):
        Settings.from_env(env={}).with_values(dashboard_port=70000)
