"""The algorithm interface: what the trainer facade runs on the algorithm side.

An algorithm talks to the pipeline only through the producer API (:class:`StoreClient`: enqueue
rollouts, wait for them, publish resources) and the topics (read trajectories). That is the same
surface upstream's algorithms use through the store, so porting one is mostly renaming.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from typing import Any, Callable, Mapping, Optional, Sequence, TypeVar, Union

from agl_stream.client import StoreClient
from agl_stream.config import Settings
from agl_stream.types import NamedResources

T = TypeVar("T")


class Algorithm:
    """Base class. Subclasses implement :meth:`run`; the trainer calls :meth:`bind` first."""

    settings: Settings
    client: StoreClient
    initial_resources: Optional[NamedResources] = None
    adapter: Optional[str] = None

    def bind(self, settings: Settings, client: StoreClient, *, initial_resources: Optional[NamedResources] = None,
             adapter: Optional[str] = None) -> None:  # fmt: skip
        self.settings = settings
        self.client = client
        self.initial_resources = initial_resources
        self.adapter = adapter

    def get_client(self) -> StoreClient:
        return self.client

    # upstream name
    get_store = get_client

    def get_initial_resources(self) -> Optional[NamedResources]:
        return self.initial_resources

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def required_services(self) -> Mapping[str, Any]:
        """Extra settings the local stack should honour for this algorithm (e.g. processor options)."""
        return {}


class FunctionalAlgorithm(Algorithm):
    """An algorithm from one (async or sync) function; parameters are injected by name.

    Accepted names: ``client`` / ``store``, ``settings``, ``train_dataset``, ``val_dataset``,
    ``initial_resources``. Passing a dataset the function does not accept is a ``TypeError``.
    """

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func
        self.params = inspect.signature(func).parameters

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> Any:
        available = {
            "client": self.client, "store": self.client, "settings": self.settings,
            "train_dataset": train_dataset, "val_dataset": val_dataset, "initial_resources": self.initial_resources,
        }  # fmt: skip
        for name, value in (("train_dataset", train_dataset), ("val_dataset", val_dataset)):
            if value is not None and name not in self.params:
                raise TypeError(f"{self.func.__name__} does not accept {name}, but one was given")
        kwargs = {name: available[name] for name in self.params if name in available}
        result = self.func(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


def algo(func: Callable[..., Any]) -> FunctionalAlgorithm:
    """Decorator: ``@algo async def my_algorithm(*, client, train_dataset): ...``."""
    return FunctionalAlgorithm(func)


def build_component(spec: Union[None, str, Mapping[str, Any], T], default: str, kind: str = "component") -> Any:
    """Upstream's component convention: an instance, a dotted class path, or a dict of init overrides
    for the default class (``{"type": "pkg.mod.Class", ...}`` picks another class)."""
    if spec is None:
        return _load(default)()
    if isinstance(spec, str):
        return _load(spec)()
    if isinstance(spec, Mapping):
        options = dict(spec)
        cls = _load(options.pop("type", default))
        return cls(**options)
    return spec


def _load(path: str) -> Any:
    module_name, _, attr = path.replace(":", ".").rpartition(".")
    if not module_name:
        raise ValueError(f"{path!r} is not a dotted path 'package.module.Class'")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ModuleNotFoundError, AttributeError) as exc:
        raise ValueError(f"cannot load {path!r}: {exc}") from None


def run_sync(coro: Any) -> Any:
    """Run a coroutine from sync code (the facade's ``fit``/``dev``)."""
    return asyncio.run(coro)
