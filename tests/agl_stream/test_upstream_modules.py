"""Every public module path of upstream ``agentlightning`` 0.3.0 resolves under ``agl_stream``.

A script ported by swapping ``agentlightning`` for ``agl_stream`` in its imports must, for each
upstream module, either import it with every name upstream exports there, or get an ``ImportError``
whose message names the replacement (for the module, or for each name agl-stream does not keep).
The table "Every upstream module" of ``docs/porting-from-agent-lightning.md`` says which, row by row,
and is checked here against the package.

The module list is ``upstream_modules_0_3_0.json`` (module -> exported names), generated from the
side venv's package files without importing upstream (``make upstream`` creates the venv)::

    .venv/bin/python -m tests.agl_stream.test_upstream_modules --regenerate

A public module is a ``.py`` file of the package whose dotted path has no segment starting with
``_``. Its exported names are its ``__all__`` when it has one; otherwise the public names its top
level binds with ``def``/``class``/assignment (not loggers, ``TypeVar``/``ParamSpec``, nor names it
imports), plus what it re-exports from the package: ``from .x import *`` (x's exported names) and,
in a package ``__init__``, ``from .x import Name``. With the side venv present the test checks the
committed list is what that rule gives today.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional

import pytest

from tests.upstream_venv import UPSTREAM_VERSION, run_upstream, upstream_python

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
LIST_FILE = HERE / f"upstream_modules_{UPSTREAM_VERSION.replace('.', '_')}.json"
GUIDE = ROOT / "docs/porting-from-agent-lightning.md"
UPSTREAM_NAMES = (HERE / "upstream_names_0_3_0.txt").read_text().split()
#: upstream names bound to a function upstream that are, on agl-stream, its submodule of the same name
#: (``agentlightning.reward`` at the top level is the module upstream too, so it is not listed)
SHADOWED_BY_SUBMODULE = {("agentlightning.cli", "main"), ("agentlightning.emitter", "reward")}
#: names agl-stream does not refuse yet because their module belongs to concurrent work (see the reason)
STATUSES = ("alias", "partial", "replaced")
REPLACEMENT = re.compile(r"`[^`]+`")  # a refusal names its replacement in backticks


# ------------------------------------------------------------------ the list, from upstream's files


def _module_name(package_dir: Path, path: Path) -> str:
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            if isinstance(value, ast.Call):
                func = value.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("TypeVar", "ParamSpec", "getLogger"):
                    continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def scan_upstream(package_dir: Path) -> dict[str, list[str]]:
    """Public module -> exported names of the package at ``package_dir`` (the rule in the module doc)."""
    files = {_module_name(package_dir, p): p for p in sorted(package_dir.rglob("*.py"))}
    files = {m: p for m, p in files.items() if not any(s.startswith("_") for s in m.split("."))}
    found: dict[str, list[str]] = {}

    def exported(module: str) -> list[str]:
        if module in found:
            return found[module]
        path = files[module]
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                found[module] = sorted(set(ast.literal_eval(node.value)))
                return found[module]
        names = _defined_names(tree)
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:  # within the package
                base = package[: len(package) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    if alias.name == "*":
                        names.update(exported(source))
                    elif path.name == "__init__.py":
                        names.add(alias.asname or alias.name)
        found[module] = sorted(n for n in names if not n.startswith("_"))
        return found[module]

    return {module: exported(module) for module in sorted(files)}


def upstream_package_dir() -> Path:
    """The side venv's ``agentlightning`` folder (found without importing it); skips when the venv is missing."""
    upstream_python()
    code = (
        "import importlib.metadata, importlib.util\n"
        "print(importlib.metadata.version('agentlightning'))\n"
        "print(importlib.util.find_spec('agentlightning').submodule_search_locations[0])\n"
    )
    out = run_upstream(["-c", code], timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    version, location = out.stdout.split()
    assert version == UPSTREAM_VERSION, f"the side venv has agentlightning {version}, not {UPSTREAM_VERSION}"
    return Path(location)


def committed_list() -> dict[str, list[str]]:
    return json.loads(LIST_FILE.read_text())["modules"]


def write_list(modules: dict[str, list[str]]) -> None:
    document = {
        "about": f"public modules of agentlightning {UPSTREAM_VERSION} -> exported names; regenerate with "
        "`.venv/bin/python -m tests.agl_stream.test_upstream_modules --regenerate` (rule: that module's docstring)",
        "modules": modules,
    }
    LIST_FILE.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")


MODULES = committed_list() if LIST_FILE.exists() else {}  # absent only before the first --regenerate


# ------------------------------------------------------------------ the guide's table


def guide_table() -> dict[str, tuple[str, str, list[str]]]:
    """Upstream module -> (status, agl-stream column, names-not-kept column as a list)."""
    text = GUIDE.read_text().partition("## Every upstream module")[2].split("\n## ", 1)[0]
    rows: dict[str, tuple[str, str, list[str]]] = {}
    for match in re.finditer(r"^\| `(agentlightning[\w.]*)` \| (\w+) \| (.*?) \| (.*?) \|$", text, re.M):
        module, status, target, names = match.groups()
        assert module not in rows, f"{module} is listed twice"
        rows[module] = (status, target, re.findall(r"`([\w.]+)`", names))
    return rows


TABLE = guide_table()


def agl_path(module: str) -> str:
    return "agl_stream" + module[len("agentlightning") :]


def import_agl(module: str) -> tuple[Optional[ModuleType], Optional[ImportError]]:
    try:
        return importlib.import_module(agl_path(module)), None
    except ImportError as exc:
        return None, exc


def name_outcome(module: str, name: str) -> tuple[str, str]:
    """("present" | "shadowed" | "refused" | "missing", detail) for ``from <agl module> import <name>``."""
    namespace: dict[str, object] = {}
    try:
        exec(f"from {agl_path(module)} import {name}", namespace)
    except ImportError as exc:
        refused = "is not kept" in str(exc) and REPLACEMENT.search(str(exc)) is not None
        return ("refused" if refused else "missing"), str(exc)
    value = namespace[name]
    if (module, name) in SHADOWED_BY_SUBMODULE:  # expected to be agl-stream's submodule, see the set
        is_submodule = isinstance(value, ModuleType) and value.__name__ == f"{agl_path(module)}.{name}"
        return ("shadowed" if is_submodule else "present"), type(value).__name__
    return "present", type(value).__name__


# ------------------------------------------------------------------ tests


def test_committed_list_is_what_the_side_venv_has() -> None:
    assert scan_upstream(upstream_package_dir()) == MODULES


def test_list_agrees_with_upstreams_top_level_names() -> None:
    """A cross-check of the scanning rule: the top-level names are ``dir(agentlightning)`` less submodules."""
    assert len(MODULES) == 92
    segments = {segment for module in MODULES for segment in module.split(".")[1:]}
    assert set(MODULES["agentlightning"]) <= set(UPSTREAM_NAMES)
    assert set(UPSTREAM_NAMES) - set(MODULES["agentlightning"]) <= segments


def test_guide_lists_every_upstream_module_once() -> None:
    assert sorted(TABLE) == sorted(MODULES)
    assert {status for status, _, _ in TABLE.values()} <= set(STATUSES)


def test_guide_counts_are_right() -> None:
    counts = {status: sum(1 for s, _, _ in TABLE.values() if s == status) for status in STATUSES}
    intro = GUIDE.read_text().partition("## Every upstream module")[2].split("|", 1)[0]
    expected = (f"{len(TABLE)} modules, {counts['alias']} are aliases, {counts['partial']} partial and "
                f"{counts['replaced']} replaced")  # fmt: skip
    assert expected in " ".join(intro.split()), expected


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_resolves_as_the_guide_says(module: str) -> None:
    assert module in TABLE, f"{module} is missing from the guide's module table"
    status, target, not_kept = TABLE[module]
    names = MODULES[module]
    imported, error = import_agl(module)
    if error is not None:
        assert status == "replaced", f"{agl_path(module)} does not import: {error}"
        assert isinstance(error, ModuleNotFoundError) and "is not kept" in str(error), error
        replacement = REPLACEMENT.findall(target)
        assert replacement and replacement[0] in str(error), (target, str(error))
        assert not_kept == [], "a module that does not import lists no names"
        return
    outcomes = {name: name_outcome(module, name) for name in names}
    shadowed = {n for n, (kind, _) in outcomes.items() if kind == "shadowed"}
    assert shadowed == {n for m, n in SHADOWED_BY_SUBMODULE if m == module}, shadowed
    missing = {n: detail for n, (kind, detail) in outcomes.items() if kind == "missing"}
    assert not missing, f"neither present nor refused with a replacement: {missing}"
    refused = sorted(n for n, (kind, _) in outcomes.items() if kind == "refused")
    if module == "agentlightning":  # the top-level names have their own table (test_upstream_surface.py)
        assert status == "partial" and refused
        return
    assert refused == sorted(not_kept), f"the guide's names-not-kept column should be {refused}"
    if status == "alias":
        assert not refused and not shadowed
    elif status == "partial":
        assert refused or shadowed
        assert any(kind == "present" for kind, _ in outcomes.values())
    else:  # an agl-stream module of other content under upstream's path: none of upstream's names
        assert all(kind != "present" for kind, _ in outcomes.values())
    for module_path in re.findall(r"`(agl_stream(?:\.\w+)*)`", target):
        try:
            importlib.import_module(module_path)
        except ModuleNotFoundError:  # a `agl_stream.Name` attribute rather than a module
            parent, _, attribute = module_path.rpartition(".")
            assert hasattr(importlib.import_module(parent), attribute), module_path


def test_refusals_name_the_replacement() -> None:
    with pytest.raises(ImportError, match=r"agentlightning\.types\.core\.Task is not kept.*`agl_stream\.client"):
        from agl_stream.types.core import Task  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match=r"agentlightning\.store is not kept.*agl-stream ingest store"):
        import agl_stream.store.memory  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match=r"agentlightning\.execution\.events is not kept.*Ctrl\+C"):
        importlib.import_module("agl_stream.execution.events")
    with pytest.raises(ImportError, match=r"LightningStore is not kept.*StoreClient"):
        from agl_stream import LightningStore  # noqa: F401
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'agl_stream\.no_such_module'$"):
        importlib.import_module("agl_stream.no_such_module")  # paths upstream never had keep the usual error
    import agl_stream.runner

    assert not hasattr(agl_stream.runner, "no_such_name")


def test_lazy_aliases_are_the_same_objects() -> None:
    import agl_stream as agl
    from agl_stream.emitter.annotation import OperationContext, operation
    from agl_stream.types.core import Dataset, Hook, Triplet
    from agl_stream.types.tracer import Span

    assert (operation, OperationContext) == (agl.operation, agl.emitter.OperationContext)
    assert (Dataset, Hook, Triplet, Span) == (agl.Dataset, agl.Hook, agl.Triplet, agl.Span)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regenerate", action="store_true", help=f"rewrite {LIST_FILE.name} from the side venv")
    args = parser.parse_args(argv)
    if not args.regenerate:
        parser.print_help()
        return 2
    try:
        package_dir = upstream_package_dir()
    except pytest.skip.Exception as exc:
        print(exc, file=sys.stderr)
        return 1
    modules = scan_upstream(package_dir)
    write_list(modules)
    print(f"{LIST_FILE.relative_to(ROOT)}: {len(modules)} modules")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
