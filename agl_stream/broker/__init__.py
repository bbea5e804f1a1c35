"""The local broker: Apache Kafka (KRaft, run with the machine's Java) or, where Java is missing, Tansu.

``local_broker(settings)`` gives the broker this machine can run, not yet started (see
``choose_local_broker`` for the rule and ``AGL_LOCAL_BROKER``); ``broker_for(settings)`` is what
services call: when ``AGL_KAFKA_BOOTSTRAP`` points at a cluster nothing is started.
``KafkaBroker(brokers=3)`` is a three-node cluster for failover tests.
"""

from agl_stream.broker._base import BrokerError, BrokerKind, LocalBroker, free_port, wait_for_port
from agl_stream.broker._choice import broker_for, choose_local_broker, describe, fallback_notice, local_broker
from agl_stream.broker._install import (
    KAFKA_VERSION,
    KafkaInstall,
    KafkaUnavailable,
    find_java,
    install_kafka,
    is_installed,
    kafka_home,
    kafka_install,
)
from agl_stream.broker._kafka import C1_ONLY, KafkaBroker, KafkaNode
from agl_stream.broker._tansu import DEFAULT_STORAGE, TansuBroker, tansu_binary

__all__ = [
    "BrokerError",
    "BrokerKind",
    "DEFAULT_STORAGE",
    "KAFKA_VERSION",
    "C1_ONLY",
    "KafkaBroker",
    "KafkaInstall",
    "KafkaNode",
    "KafkaUnavailable",
    "LocalBroker",
    "TansuBroker",
    "broker_for",
    "choose_local_broker",
    "describe",
    "fallback_notice",
    "find_java",
    "free_port",
    "install_kafka",
    "is_installed",
    "kafka_home",
    "kafka_install",
    "local_broker",
    "tansu_binary",
    "wait_for_port",
]
