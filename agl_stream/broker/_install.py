"""Apache Kafka for the local broker: the pinned jars from Maven Central, and a Java to run them.

The jars are fetched once with Maven from the Maven build file shipped in this package
(``agl_stream/broker/kafka/pom.xml``) into the Kafka home, a cache shared by every checkout
(``AGL_KAFKA_HOME``, default ``$XDG_CACHE_HOME/agl-stream/kafka-<version>``). Running needs
Java 17 or newer; fetching needs Maven too. What is missing is said in one sentence
(:class:`KafkaUnavailable`), for the Tansu fallback's notice and for errors.

Standard library only, so that ``make`` can run this file as a script
(``python agl_stream/broker/_install.py --optional``) while pip installs the venv beside it.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

try:
    from agl_stream.broker._base import BrokerError, fallback_notice
except ImportError:  # run as a script (make's setup, before the venv has the package's dependencies)
    from _base import BrokerError, fallback_notice  # type: ignore[no-redef]

logger = logging.getLogger(__name__)

KAFKA_VERSION = "4.1.0"  # the version deploy/ runs (apache/kafka:4.1.0); also in kafka/pom.xml
MIN_JAVA = 17
_COMPLETE = ".complete"  # written last, so an interrupted fetch is fetched again


class KafkaUnavailable(BrokerError):
    """Apache Kafka cannot run here; the message says what is missing."""


def kafka_home(override: Optional[Path] = None) -> Path:
    """Where the jars live: ``override`` (the caller's ``AGL_KAFKA_HOME`` setting), or the per-user cache.

    This module also runs as a script before the venv exists (no settings to read then): the Makefile
    passes ``--home`` from ``AGL_KAFKA_HOME``."""
    if override is not None:
        return override
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "agl-stream" / f"kafka-{KAFKA_VERSION}"


def package_file(name: str) -> Path:
    """A file shipped beside this module in ``kafka/`` (the Maven build file, the logging config)."""
    return Path(__file__).resolve().parent / "kafka" / name


@dataclass(frozen=True)
class KafkaInstall:
    home: Path
    java: str

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")


def is_installed(home: Optional[Path] = None) -> bool:
    libs = kafka_home(home) / "libs"
    return (libs / _COMPLETE).exists() and (libs / f"kafka_2.13-{KAFKA_VERSION}.jar").exists()


@functools.lru_cache(maxsize=None)
def _java_version(java: str) -> Optional[int]:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def find_java() -> str:
    """The ``java`` to run Kafka with (``JAVA_HOME`` first, then ``PATH``); raises if none is 17+."""
    java_home = os.environ.get("JAVA_HOME")
    candidate = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        raise KafkaUnavailable("no java on PATH (nor JAVA_HOME)")
    version = _java_version(candidate)
    if version is None:
        raise KafkaUnavailable(f"{candidate} -version did not say its version")
    if version < MIN_JAVA:
        raise KafkaUnavailable(f"{candidate} is Java {version}; Apache Kafka {KAFKA_VERSION} needs Java {MIN_JAVA}+")
    return candidate


def install_kafka(home: Optional[Path] = None, *, timeout: float = 900.0) -> Path:
    """Fetch the pinned Kafka jars with Maven into ``home``/libs (nothing to do when already there)."""
    home = kafka_home(home)
    libs = home / "libs"
    if is_installed(home):
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaUnavailable(f"no mvn on PATH to fetch Apache Kafka {KAFKA_VERSION} from Maven Central")
    staging = home / "libs.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    cmd = [mvn, "-q", "-B", "-f", str(package_file("pom.xml")), "dependency:copy-dependencies",
           f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]  # fmt: skip
    logger.info("fetching Apache Kafka %s from Maven Central into %s", KAFKA_VERSION, libs)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise KafkaUnavailable(f"fetching Apache Kafka {KAFKA_VERSION} with Maven took over {timeout:.0f}s") from None
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise KafkaUnavailable(f"Maven could not fetch Apache Kafka {KAFKA_VERSION} (exit {done.returncode}):\n{tail}")
    (staging / _COMPLETE).write_text(KAFKA_VERSION + "\n")
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    return libs


def kafka_install(home: Optional[Path] = None, *, fetch: bool = True) -> KafkaInstall:
    """Java and the jars, ready to run; fetches the jars first when ``fetch`` and they are missing.

    Raises :class:`KafkaUnavailable` naming what is missing."""
    java = find_java()
    home = kafka_home(home)
    if not is_installed(home):
        if not fetch:
            raise KafkaUnavailable(f"Apache Kafka {KAFKA_VERSION} is not installed in {home} (agl-stream broker install)")
        install_kafka(home)
    return KafkaInstall(home=home, java=java)


def fetch_for_setup(home: Optional[Path] = None, *, optional: bool = False, echo: Callable[[str], None] = print) -> None:
    """``agl-stream broker install`` and make's setup: fetch the jars unless present.

    ``optional``: where Java or Maven is missing, say so in the Tansu notice (on stderr) instead of raising.
    """
    target = kafka_home(home)
    try:
        find_java()
        if is_installed(target):
            echo(f"Apache Kafka {KAFKA_VERSION} is installed in {target}")
            return
        echo(f"fetching Apache Kafka {KAFKA_VERSION} from Maven Central into {target} ...")
        began = time.monotonic()
        install_kafka(target)
    except KafkaUnavailable as exc:
        if not optional:
            raise
        print(fallback_notice(str(exc)), file=sys.stderr, flush=True)
        return
    echo(f"Apache Kafka {KAFKA_VERSION} installed in {target} ({time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Fetch Apache Kafka's pinned jars (what `agl-stream broker install` does).")
    parser.add_argument("--home", type=Path, default=None, help="where the jars go (default: the user cache)")
    parser.add_argument("--optional", action="store_true", help="exit 0 with the Tansu notice when Java or Maven is missing")
    cli = parser.parse_args()
    try:
        fetch_for_setup(cli.home, optional=cli.optional)
    except KafkaUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
