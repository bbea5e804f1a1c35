"""One shape for "OpenInference's instrumentor of a library, plus agl-stream's additions around it".

The Anthropic, litellm and AutoGen instrumentors each run OpenInference's own instrumentor and add what
training needs (token ids, tool spans, agent names, one LLM span per call). What they share lives here:
instrumenting once per process under a lock, a warning naming what to install when OpenInference's
package is missing, the tracer provider, and an optional span processor that is added to each provider
once (an SDK provider cannot remove one) and switched on and off instead.
"""

from __future__ import annotations

import importlib
import logging
import threading
from typing import Any, ClassVar, Optional, Protocol

from opentelemetry import trace as otel_trace

logger = logging.getLogger(__name__)


class Switchable(Protocol):
    """A span processor that does its work only while ``active``."""

    active: bool


class OpenInferenceExtension:
    """Subclasses set :attr:`library` and :attr:`openinference`, and add their parts in :meth:`_before`,
    :meth:`_after` and :meth:`_retract`; the class (not the instance) holds the state, because the registry
    may create several instances and the patches are process-wide."""

    library: ClassVar[str]  # the import name of the instrumented library
    openinference: ClassVar[str]  # "module:Class" of OpenInference's instrumentor
    processor: ClassVar[Optional[Switchable]] = None  # added to each provider once, active while instrumented

    _lock: ClassVar[threading.Lock]
    _instrumentor: ClassVar[Any]  # OpenInference's instrumentor, while instrumented
    _providers: ClassVar[list[Any]]  # providers the processor was added to (never removed)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._lock, cls._instrumentor, cls._providers = threading.Lock(), None, []

    @classmethod
    def instrumented(cls) -> bool:
        return cls._instrumentor is not None

    def instrument(self, tracer_provider: Any = None, **kwargs: Any) -> None:
        cls = type(self)
        with cls._lock:
            if cls._instrumentor is not None:
                return
            module_name, _, class_name = cls.openinference.partition(":")
            try:
                openinference_class = getattr(importlib.import_module(module_name), class_name)
            except ImportError:
                logger.warning("%s is installed but its tracing is not: %s", cls.library, _install_hint(cls.library))
                return
            provider = tracer_provider or otel_trace.get_tracer_provider()
            self._before(provider)
            cls._instrumentor = openinference_class()
            cls._instrumentor.instrument(tracer_provider=provider)
            if cls.processor is not None:
                if provider not in cls._providers and hasattr(provider, "add_span_processor"):
                    provider.add_span_processor(cls.processor)
                    cls._providers.append(provider)
                cls.processor.active = True
            self._after(provider)

    def uninstrument(self, **kwargs: Any) -> None:
        cls = type(self)
        with cls._lock:
            if cls._instrumentor is None:
                return
            cls._instrumentor.uninstrument()
            cls._instrumentor = None
            if cls.processor is not None:
                cls.processor.active = False
            self._retract()

    def _before(self, provider: Any) -> None:
        """Patches that must sit inside OpenInference's (applied before it instruments)."""

    def _after(self, provider: Any) -> None:
        """Patches that sit outside OpenInference's, or need its tracer provider."""

    def _retract(self) -> None:
        """Undo :meth:`_before` and :meth:`_after` (OpenInference has already uninstrumented)."""


def _install_hint(library: str) -> str:
    from agl_stream.instrumentation import INSTRUMENTATIONS

    hints = [item.install_hint for item in INSTRUMENTATIONS if item.library == library]
    return hints[0] if hints else "pip install 'agl-stream[frameworks]'"
