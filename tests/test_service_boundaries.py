"""Services talk through topics, never through imports: a static check of the import graph.

The rule (docs/architecture.md): each top-level folder is one service - ``agl_stream/`` (the SDK
agents import), ``topics/`` (the topic catalog), ``processors/``, ``trainer/``, ``ingest/``, ``controller/``.

* any service may import ``agl_stream`` (the data model, settings, Kafka clients) and
  ``agl_stream_topics`` (the catalog every service creates and reads topics by);
* ``agl_stream`` imports no service package at all (not even ``agl_stream_topics``): agents install
  it alone;
* no other service imports another service's package: ``processors`` never imports ``trainer``,
  ``trainer`` never imports ``processors`` (learner metrics travel over ``agl.training_steps``), and
  so on.

And no module imports itself through others: no import circle anywhere in the five packages, not even
through an import under ``TYPE_CHECKING`` or inside a function (upstream's names that would close one are
answered through the tables in ``agl_stream/_porting.py``, resolved on first use).

Every ``import``/``from ... import`` statement is checked wherever it sits (module level or inside
a function), plus ``importlib.import_module("...")`` / ``__import__("...")`` calls with a literal
name. Packages are recognized by their installed names (``agl_stream_processors``...) and by their
folder names (``processors``...), so a checkout-relative import is caught too. The CLI's
sub-command table (``agl_stream/cli/main.py``) names service modules as strings that only the
command being run resolves; that dispatch is by design and is not an import.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, Iterator, Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: service -> (its folder, the top-level import names that mean it)
SERVICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "agl_stream": ("agl_stream", ("agl_stream",)),
    "topics": ("topics", ("agl_stream_topics", "topics")),
    "processors": ("processors", ("agl_stream_processors", "processors")),
    "trainer": ("trainer", ("agl_stream_trainer", "trainer")),
    "ingest": ("ingest", ("agl_stream_ingest", "ingest")),
    "controller": ("controller", ("agl_stream_controller", "controller")),
}
SHARED = {"agl_stream", "topics"}  # what every other service may import


def service_of(module: str) -> Optional[str]:
    top = module.split(".")[0]
    for service, (_folder, names) in SERVICES.items():
        if top in names:
            return service
    return None


def allowed(importer: str, imported: str) -> bool:
    if importer == imported:
        return True
    if importer == "agl_stream":
        return False
    return imported in SHARED


def imported_modules(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``tree`` (relative imports stay in their package)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                yield node.lineno, node.module
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def violations_in(service: str, path: Path, source: str) -> list[str]:
    found = []
    for line, module in imported_modules(ast.parse(source, filename=str(path))):
        target = service_of(module)
        if target is not None and not allowed(service, target):
            found.append(f"{path.relative_to(ROOT) if path.is_absolute() else path}:{line}: {service} imports {module} ({target})")
    return found


def service_files() -> Iterator[tuple[str, Path]]:
    for service, (folder, _names) in SERVICES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield service, path


def test_no_service_imports_another_service() -> None:
    files = list(service_files())
    assert {s for s, _ in files} == set(SERVICES) and len(files) > 100
    problems = [v for service, path in files for v in violations_in(service, path, path.read_text())]
    assert not problems, "imports across service boundaries (talk through a topic instead):\n" + "\n".join(problems)


def test_the_trainer_no_longer_reaches_into_the_processors() -> None:
    metrics = ROOT / "trainer" / "metrics.py"
    assert not [m for _, m in imported_modules(ast.parse(metrics.read_text())) if service_of(m) == "processors"]


@pytest.mark.parametrize(
    ("service", "source", "bad"),
    [
        ("trainer", "def f():\n    from agl_stream_processors.clickhouse import connect\n", True),
        ("processors", "import agl_stream_trainer.metrics as m\n", True),
        ("ingest", "import importlib\nimportlib.import_module('agl_stream_trainer.rl')\n", True),
        ("agl_stream", "from agl_stream_topics.catalog import CATALOG\n", True),
        ("processors", "from trainer.metrics import StepMetrics\n", True),
        ("trainer", "from agl_stream.types import TrainingStep\nfrom agl_stream_topics.catalog import spec\n", False),
        ("processors", "from . import rows\nfrom .sinks import specs\n", False),
        ("agl_stream", "SUBCOMMANDS = {'sql': ('agl_stream_processors.cli:sql', '', '')}\n", False),
    ],
)
def test_the_checker_catches_what_the_rule_forbids(service: str, source: str, bad: bool) -> None:
    assert bool(violations_in(service, Path("snippet.py"), source)) is bad


def module_names() -> dict[str, Path]:
    """Every module of the five packages by its installed name (``agl_stream_trainer.learner``...)."""
    out = {}
    for service, (folder, names) in SERVICES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [names[0], *path.relative_to(ROOT / folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(sources: dict[str, str], packages: Iterable[str] = ()) -> dict[str, set[str]]:
    """Module -> the modules it imports (``from pkg import sub`` means ``pkg.sub`` when that is a module;
    anything else counts as its nearest enclosing module). ``packages``: modules that are ``__init__``."""
    known, packages = set(sources), set(packages)

    def nearest(name: str) -> Optional[str]:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in sources}
    for module, source in sources.items():
        package = module if module in packages else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(source)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for target in targets:
                found = nearest(service_of_name(target))
                if found is not None and found != module:
                    graph[module].add(found)
    return graph


def service_of_name(module: str) -> str:
    """Folder-relative spellings (``processors.x``) under their installed names (``agl_stream_processors.x``)."""
    top, _, rest = module.partition(".")
    for _service, (_folder, names) in SERVICES.items():
        if top in names[1:]:
            return f"{names[0]}.{rest}" if rest else names[0]
    return module


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_circles_in_any_package() -> None:
    modules = module_names()
    assert len(modules) > 100
    graph = import_graph({m: p.read_text() for m, p in modules.items()}, [m for m, p in modules.items() if p.name == "__init__.py"])
    found = circles(graph)
    assert not found, "import circles (move the shared piece down, or answer an upstream name through _porting's tables):\n" + "\n".join(
        " -> ".join(group) for group in found)


@pytest.mark.parametrize(
    ("sources", "circular"),
    [
        ({"p.a": "from p.b import x\n", "p.b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import y\n"}, True),
        ({"p.a": "def f():\n    import p.b\n", "p.b": "from p import a\n", "p": ""}, True),
        ({"p.a": "from .b import x\n", "p.b": "from . import a\n", "p": ""}, True),
        ({"p.a": "from p.b import x\n", "p.b": "import json\n", "p": "from p.a import z\n"}, False),
    ],
)
def test_the_circle_check_sees_type_only_and_function_level_imports(sources: dict[str, str], circular: bool) -> None:
    assert bool(circles(import_graph(sources, ["p"]))) is circular
