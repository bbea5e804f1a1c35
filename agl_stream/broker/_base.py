"""What every local broker is: a process tree on loopback with a bootstrap address, started and stopped."""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Literal, Optional, Protocol, runtime_checkable

BrokerKind = Literal["kafka", "tansu"]


class BrokerError(RuntimeError):
    """The local broker could not be found, installed, started or reached."""


@runtime_checkable
class LocalBroker(Protocol):
    """A broker this process started on this machine and stops again (Apache Kafka or Tansu)."""

    kind: BrokerKind

    @property
    def bootstrap(self) -> str: ...

    @property
    def running(self) -> bool: ...

    @property
    def pid(self) -> Optional[int]: ...

    def start(self, timeout: float = ...) -> "LocalBroker": ...

    def stop(self, timeout: float = ...) -> None: ...

    def kill(self) -> None: ...

    def __enter__(self) -> "LocalBroker": ...

    def __exit__(self, *exc: object) -> None: ...


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a connection within ``timeout`` seconds (tried at least once)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def fallback_notice(reason: str) -> str:
    """The one line a machine without Apache Kafka gets: what is missing, what Tansu loses, how to get Kafka."""
    return (
        f"agl-stream: the local broker is Tansu, not Apache Kafka ({reason}): it keeps every record in memory, "
        "with no retention, compaction or transactions; for Apache Kafka install Java 17+ and Maven, then run "
        "`agl-stream broker install` (or set AGL_KAFKA_BOOTSTRAP to a cluster)"
    )
