"""Hand user objects (agent, tracer, hooks, adapter) to the child service processes of a job.

``Trainer.fit`` runs the agent in runner processes and the adapter in the processors process,
both started as ``agl-stream`` commands. Objects cannot travel in argv, so the trainer writes them
to a *components file* in the data directory and passes its path (``--components PATH``); the
child loads it before anything else. Constructor state travels with the object
(``LitSQLAgent(max_turns=3)`` arrives with ``max_turns == 3``).

How objects are written:

* With the standard pickle protocol first: classes and functions travel *by reference*
  (``module.QualName``) and instances carry their state. Objects defined in the user's script
  (``__main__``) are found in the child because it imports that script first under the name
  ``__mp_main__`` and makes it ``__main__`` - what ``multiprocessing``'s spawn start method does,
  so the same rule holds: keep the training call under ``if __name__ == "__main__":``.
* When that is impossible (a lambda, a class defined inside a function, an interactive session
  with no script file), with ``cloudpickle``, which writes such objects *by value*.

The parent's ``sys.path`` travels too, so modules next to the user's script import in the child.
A components file holds code: it is written with owner-only permissions and removed when the job
ends; never load one you did not write.
"""

from __future__ import annotations

import importlib
import os
import pickle
import runpy
import sys
import types
import uuid
from pathlib import Path
from typing import Any, Mapping, Optional

FORMAT_VERSION = 1
MAIN_ALIAS = "__mp_main__"


class ComponentError(RuntimeError):
    """A component could not be written for, or read in, a child process."""


def _main_reference() -> dict[str, Optional[str]]:
    """How a child can import the parent's ``__main__``: a module name (``python -m``) or a file."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None)
    if name and name != "__main__" and not name.endswith(".__main__"):
        return {"name": name, "path": None}
    path = getattr(main, "__file__", None)
    if path and Path(path).suffix == ".py" and Path(path).exists():
        return {"name": None, "path": str(Path(path).resolve())}
    return {"name": None, "path": None}


def _dumps(name: str, obj: Any, main_importable: bool) -> tuple[str, bytes]:
    """``("pickle" | "cloudpickle", bytes)``; by reference where the child can resolve it."""
    if main_importable:
        try:
            return "pickle", pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, AttributeError, TypeError):
            pass  # a lambda, a local class...: try by value
    import cloudpickle

    try:
        return "cloudpickle", cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise ComponentError(
            f"cannot send the {name} ({type(obj).__name__}) to the child processes: {exc!r}. Keep its "
            "constructor state picklable (plain values; open clients or connections lazily inside the rollout)"
        ) from exc


def write_components(directory: Path, components: Mapping[str, Any]) -> Path:
    """Write ``components`` (name -> object) to a new file in ``directory``; returns its path."""
    main = _main_reference()
    main_importable = bool(main["name"] or main["path"])
    payload = {
        "format": FORMAT_VERSION,
        "main": main,
        "sys_path": [p for p in sys.path if p],
        "cwd": os.getcwd(),
        "components": {name: _dumps(name, obj, main_importable) for name, obj in components.items()},
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"components-{uuid.uuid4().hex[:12]}.pkl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(payload, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _extend_sys_path(parent_path: list[str], cwd: str) -> None:
    """Make the parent's import locations (its script folder first) importable here too."""
    missing = [p for p in parent_path if p not in sys.path]
    sys.path[:0] = missing
    if cwd not in sys.path:
        sys.path.append(cwd)


def _import_main(main: Mapping[str, Optional[str]]) -> None:
    """Import the parent's ``__main__`` without running its ``if __name__ == "__main__":`` block."""
    if sys.modules.get(MAIN_ALIAS) is not None:
        return
    if main.get("name"):
        module = importlib.import_module(str(main["name"]))
    elif main.get("path"):
        path = str(main["path"])
        module = types.ModuleType(MAIN_ALIAS)
        module.__file__ = path
        sys.modules[MAIN_ALIAS] = module
        try:
            module.__dict__.update(runpy.run_path(path, run_name=MAIN_ALIAS))
        except BaseException:
            sys.modules.pop(MAIN_ALIAS, None)
            raise
    else:
        return
    sys.modules[MAIN_ALIAS] = module
    sys.modules["__main__"] = module


def read_components(path: Path) -> dict[str, Any]:
    """Load a components file written by :func:`write_components` (in a child process)."""
    try:
        with open(path, "rb") as fh:
            payload = pickle.load(fh)
    except FileNotFoundError:
        raise ComponentError(f"components file {path} does not exist (was the job stopped?)") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        raise ComponentError(f"{path} is not an agl-stream components file of format {FORMAT_VERSION}")
    _extend_sys_path(list(payload["sys_path"]), str(payload["cwd"]))
    # Import the script only when a by-reference pickle names it (importing runs its top level).
    needs_main = any(kind == "pickle" and b"__main__" in data for kind, data in payload["components"].values())
    if needs_main:
        try:
            _import_main(payload["main"])
        except Exception as exc:
            raise ComponentError(f"importing the job's script {payload['main']} failed: {exc!r}") from exc
    out: dict[str, Any] = {}
    for name, (kind, data) in payload["components"].items():
        try:
            out[name] = pickle.loads(data)  # cloudpickle output loads with pickle (cloudpickle installed)
        except Exception as exc:
            raise ComponentError(f"cannot load the {name} from {path} ({kind}): {exc!r}") from exc
    return out
