"""Which local broker runs: Apache Kafka where Java 17+ and the jars (or Maven to fetch them) are here,
else Tansu with a one-line notice. ``AGL_LOCAL_BROKER=kafka|tansu`` chooses explicitly; asking for
``kafka`` where it cannot run is an error that says why.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

from agl_stream.broker._base import BrokerError, BrokerKind, LocalBroker, fallback_notice
from agl_stream.broker._install import KAFKA_VERSION, KafkaUnavailable, kafka_install
from agl_stream.broker._kafka import KafkaBroker
from agl_stream.broker._tansu import TansuBroker
from agl_stream.config import Settings

_notice_lock = threading.Lock()
_noticed = False


def _notice_once(reason: str) -> None:
    global _noticed
    with _notice_lock:
        if _noticed:
            return
        _noticed = True
    print(fallback_notice(reason), file=sys.stderr, flush=True)


def choose_local_broker(settings: Optional[Settings] = None) -> BrokerKind:
    """``settings.local_broker`` (``AGL_LOCAL_BROKER``) when set, else Kafka if it can run here, else Tansu.

    Kafka's jars are fetched on first use when Maven is here. An explicit ``kafka`` that cannot run
    raises :class:`~agl_stream.broker.KafkaUnavailable`; the automatic choice prints the notice once."""
    settings = settings or Settings.from_env()
    if settings.local_broker == "tansu":
        return "tansu"
    try:
        kafka_install(settings.kafka_home)
    except KafkaUnavailable as exc:
        if settings.local_broker == "kafka":
            raise KafkaUnavailable(f"AGL_LOCAL_BROKER=kafka, but Apache Kafka {KAFKA_VERSION} cannot run here: {exc}") from None
        _notice_once(str(exc))
        return "tansu"
    return "kafka"


def local_broker(
    settings: Optional[Settings] = None,
    *,
    kind: Optional[BrokerKind] = None,
    port: Optional[int] = None,
    log_file: Optional[Path] = None,
    advertised: Optional[str] = None,
    data_dir: Optional[Path] = None,
    brokers: int = 1,
    **kafka_options: Any,
) -> LocalBroker:
    """A local broker, not yet started: ``kind`` or :func:`choose_local_broker`'s choice.

    ``data_dir`` is where Kafka keeps its logs across restarts (default: a temporary folder);
    Tansu keeps nothing. ``brokers`` > 1 is a Kafka cluster; Tansu has no cluster mode."""
    settings = settings or Settings.from_env()
    kind = kind or choose_local_broker(settings)
    if kind == "tansu":
        if brokers != 1:
            raise BrokerError("a local cluster of several brokers needs Apache Kafka; Tansu runs one node")
        return TansuBroker(port=port, log_file=log_file, advertised=advertised)
    return KafkaBroker(port=port, log_file=log_file, advertised=advertised, data_dir=data_dir, brokers=brokers,
                       home=settings.kafka_home, **{"full_jit": settings.local_kafka_full_jit, **kafka_options})  # fmt: skip


@contextlib.contextmanager
def broker_for(settings: Settings, **kwargs: Any) -> Iterator[str]:
    """Yield a bootstrap address: the configured cluster's, or a local broker started for the block."""
    if settings.kafka_bootstrap:
        yield settings.kafka_bootstrap
        return
    with local_broker(settings, **kwargs) as broker:
        yield broker.bootstrap


def describe(broker: LocalBroker) -> str:
    """One line for logs and the README's promise: which broker, where."""
    if isinstance(broker, KafkaBroker):
        return f"Apache Kafka {KAFKA_VERSION} (KRaft, {len(broker.nodes)} node(s)) at {broker.bootstrap}"
    return f"Tansu (memory only) at {broker.bootstrap}"


__all__ = ["choose_local_broker", "local_broker", "broker_for", "describe", "fallback_notice"]
