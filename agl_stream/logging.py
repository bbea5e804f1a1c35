"""``setup_logging``: upstream's one-call logging setup (``agentlightning.logging``), for agl-stream's loggers.

It configures the ``agl_stream`` logger and the service packages' loggers (``agl_stream_trainer``,
``agl_stream_processors``, ...) plus any in ``apply_to``: a rich console handler (or a plain one with
``color=False``), optional files, per-submodule levels. Child services started by ``Trainer`` log
to their own files under the data directory's ``logs/``.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Optional, Union

DEFAULT_FORMAT = "%(asctime)s [%(levelname)s] (Process-%(process)d %(name)s)   %(message)s"
DATE_FORMAT = "%H:%M:%S"
AGL_LOGGERS = ("agl_stream", "agl_stream_trainer", "agl_stream_processors", "agl_stream_ingest", "agl_stream_topics")

Level = Union[int, str]


def _level(value: Level) -> int:
    if isinstance(value, int):
        return value
    resolved = logging.getLevelName(value.upper())
    if not isinstance(resolved, int):
        raise ValueError(f"unknown log level {value!r}")
    return resolved


def _console_handler(color: Union[bool, dict[str, Any]], formatter: Optional[logging.Formatter]) -> logging.Handler:
    handler: logging.Handler
    if color:
        from rich.logging import RichHandler

        handler = RichHandler(**(color if isinstance(color, dict) else {}))
        handler.setFormatter(formatter or logging.Formatter("(Process-%(process)d %(name)s)   %(message)s", DATE_FORMAT))
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(formatter or logging.Formatter(DEFAULT_FORMAT, DATE_FORMAT))
    return handler


def _tag(handler: logging.Handler, key: str) -> logging.Handler:
    handler._agl_key = key  # type: ignore[attr-defined]  # re-running setup replaces, never duplicates
    return handler


def setup_logging(
    level: Level = "INFO",
    *,
    console: bool = True,
    color: Union[bool, dict[str, Any]] = True,
    propagate: bool = False,
    disable_existing_loggers: bool = False,
    capture_warnings: bool = False,
    submodule_levels: Optional[dict[str, Level]] = None,
    extra_handlers: Optional[list[logging.Handler]] = None,
    formatter: Optional[logging.Formatter] = None,
    apply_to: Optional[list[str]] = None,
    files: Optional[Union[str, dict[str, str]]] = None,
) -> None:
    """Configure agl-stream's loggers (and ``apply_to``) at ``level``; safe to call more than once."""
    base = _level(level)
    names = list(dict.fromkeys([*AGL_LOGGERS, *(apply_to or [])]))
    if disable_existing_loggers:
        for name, existing in logging.root.manager.loggerDict.items():
            if isinstance(existing, logging.Logger) and not any(name == n or name.startswith(n + ".") for n in names):
                existing.disabled = True
    handlers: list[logging.Handler] = []
    if console:
        handlers.append(_tag(_console_handler(color, formatter), "console"))
    file_map = {name: files for name in names} if isinstance(files, str) else dict(files or {})
    for name in names:
        logger = logging.getLogger(name)
        logger.setLevel(base)
        logger.propagate = propagate
        logger.handlers = [h for h in logger.handlers if getattr(h, "_agl_key", None) is None]
        for handler in [*handlers, *(extra_handlers or [])]:
            logger.addHandler(handler)
        if name in file_map:
            file_handler = logging.FileHandler(file_map[name])
            file_handler.setFormatter(formatter or logging.Formatter(DEFAULT_FORMAT, DATE_FORMAT))
            logger.addHandler(_tag(file_handler, f"file:{file_map[name]}"))
    for name, sub_level in (submodule_levels or {}).items():
        value = _level(sub_level)
        if value < base:
            warnings.warn(f"logger {name} is set more verbose ({sub_level}) than the base level ({level})", stacklevel=2)
        logging.getLogger(name).setLevel(value)
    logging.captureWarnings(capture_warnings)


def setup_module_logging(level: Level = "INFO", *, name: str = "agl_stream", console: bool = True,
                         color: Union[bool, dict[str, Any]] = True, propagate: bool = False,
                         formatter: Optional[logging.Formatter] = None) -> logging.Logger:  # fmt: skip
    """Configure one logger (default ``agl_stream``) only; returns it."""
    logger = logging.getLogger(name)
    logger.setLevel(_level(level))
    logger.propagate = propagate
    logger.handlers = [h for h in logger.handlers if getattr(h, "_agl_key", None) is None]
    if console:
        logger.addHandler(_tag(_console_handler(color, formatter), "console"))
    return logger


def configure_logger(level: int = logging.INFO, name: str = "agl_stream") -> logging.Logger:
    """Deprecated upstream as well: use :func:`setup_logging`."""
    warnings.warn("configure_logger is deprecated; use setup_logging", DeprecationWarning, stacklevel=2)
    return setup_module_logging(level, name=name, color=False)


setup = setup_logging
setup_module = setup_module_logging
