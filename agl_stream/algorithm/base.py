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
    """Base class. Subclasses implement :meth:`run` (async or sync); the trainer calls :meth:`bind` first.

    Upstream's accessors work: ``get_store()`` (the :class:`StoreClient`), ``get_adapter()``,
    ``get_initial_resources()``, ``get_trainer()``, and their ``set_*`` counterparts.
    """

    settings: Settings
    client: StoreClient
    initial_resources: Optional[NamedResources] = None
    adapter: Any = None
    trainer: Any = None

    def bind(self, settings: Settings, client: StoreClient, *, initial_resources: Optional[NamedResources] = None,
             adapter: Any = None) -> None:  # fmt: skip
        self.settings = settings
        self.client = client
        if initial_resources is not None:
            self.initial_resources = initial_resources
        if adapter is not None:
            self.adapter = adapter

    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.run)

    def get_client(self) -> StoreClient:
        return self.client

    # upstream names
    get_store = get_client

    def set_store(self, store: StoreClient) -> None:
        self.client = store

    def get_initial_resources(self) -> Optional[NamedResources]:
        return self.initial_resources

    def set_initial_resources(self, resources: NamedResources) -> None:
        self.initial_resources = resources

    def get_adapter(self) -> Any:
        if self.adapter is None:
            raise ValueError(f"no adapter is set on {type(self).__name__}")
        return self.adapter

    def set_adapter(self, adapter: Any) -> None:
        self.adapter = adapter

    def get_trainer(self) -> Any:
        if self.trainer is None:
            raise ValueError(f"{type(self).__name__} is not attached to a trainer")
        return self.trainer

    def set_trainer(self, trainer: Any) -> None:
        self.trainer = trainer

    def get_llm_proxy(self) -> None:
        """Upstream's in-process LLM proxy has no counterpart here (see ``agl-stream ingest proxy``)."""
        return None

    async def run(self, train_dataset: Optional[Sequence[Any]] = None, val_dataset: Optional[Sequence[Any]] = None) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    def required_services(self) -> Mapping[str, Any]:
        """Extra settings the local stack should honour for this algorithm (e.g. processor options)."""
        return {}


class FunctionalAlgorithm(Algorithm):
    """An algorithm from one (async or sync) function; parameters are injected by name.

    Accepted names: ``client`` / ``store``, ``settings``, ``train_dataset``, ``val_dataset``,
    ``initial_resources``, ``adapter``, ``llm_proxy`` (always None here). Passing a dataset the function does not accept is a ``TypeError``.
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
        if "adapter" in self.params:
            available["adapter"] = self.adapter
        if "llm_proxy" in self.params:
            available["llm_proxy"] = None
        kwargs = {name: available[name] for name in self.params if name in available}
        result = self.func(**kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result


def algo(func: Callable[..., Any]) -> FunctionalAlgorithm:
    """Decorator: ``@algo async def my_algorithm(*, client, train_dataset): ...``."""
    return FunctionalAlgorithm(func)


def build_component(spec: Union[None, str, Mapping[str, Any], T], default: Union[str, Callable[..., Any], None],
                    kind: str = "component") -> Any:  # fmt: skip
    """Upstream's component convention: an instance, a class or zero-argument factory, a dotted class
    path, or a dict of init overrides for the default class (``{"type": "pkg.mod.Class", ...}`` picks
    another class). ``None`` gives the default (or None when there is no default)."""
    if spec is None:
        if default is None:
            return None
        return (_load(default) if isinstance(default, str) else default)()
    if isinstance(spec, str):
        return _load(spec)()
    if isinstance(spec, Mapping):
        options = dict(spec)
        target = options.pop("type", default)
        if target is None:
            raise ValueError(f"a {kind} dict needs a 'type' key")
        cls = _load(target) if isinstance(target, str) else target
        return cls(**options)
    if inspect.isclass(spec):
        return spec()
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
