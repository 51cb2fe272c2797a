"""The Java client (Apache Kafka's kafka-clients 3.9.1, from the cache tools/setup.sh fills:
:func:`kproto.testing.apache.client_jars`) for the interop tests: ``tests/broker/java/KprotoInterop.java``
compiled once per test session and client version against its jars, run against a broker, its
JSON lines returned. The same class path holds ``KprotoChaosProducer``
(``java/KprotoChaosProducer.java``), the chaos run's producer, and ``KprotoTxn``
(``java/KprotoTxn.java``), the transactions of ``test_txn_v2_interop.py``, and ``KprotoTxnChaos``
(``java/KprotoTxnChaos.java``), the transactional producer of ``test_cluster_txn_chaos.py``.

Also imported by ``tests/spark/test_spark_broker_logdir.py`` (which puts this folder on
``sys.path``)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

from kproto.testing import apache

JAVA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java")
SOURCE = os.path.join(JAVA_DIR, "KprotoInterop.java")
#: every program compiled onto the class path
SOURCES = [SOURCE, os.path.join(JAVA_DIR, "KprotoChaosProducer.java"), os.path.join(JAVA_DIR, "KprotoTxn.java"),
           os.path.join(JAVA_DIR, "KprotoTxnChaos.java")]
#: kafka-clients and what it loads at run time (logging API, the codecs' libraries)
JARS = ["kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni"]

_compiled: dict[str, str] = {}


#: the client release the interop tests were written against (README's figures are its)
CLIENT_VERSION = "3.9.1"


def jars(version: str = CLIENT_VERSION) -> list[str]:
    """The jars of :data:`JARS` of kafka-clients ``version`` (KafkaNotAvailable: run tools/setup.sh)."""
    found = {os.path.basename(j)[:-len(".jar")]: j for j in apache.client_jars(version)}
    missing = [name for name in JARS if name not in found]
    if missing:
        raise apache.KafkaNotAvailable(f"kafka-clients {version}: {missing} not in the cache: run tools/setup.sh")
    return [found[name] for name in JARS]


def classpath(workdir: str, version: str = CLIENT_VERSION) -> str:
    """Compile the programs of :data:`SOURCES` into ``workdir`` against kafka-clients
    ``version`` (once per process and version) and return the class path."""
    if version not in _compiled:
        javac = shutil.which("javac")
        assert javac and shutil.which("java"), "Java 17 (java, javac) is needed for the Java interop tests"
        cp = jars(version)
        out = os.path.join(workdir, f"classes-{version}")
        os.makedirs(out, exist_ok=True)
        proc = subprocess.run([javac, "-nowarn", "-encoding", "UTF-8", "-cp", cp[0], "-d", out, *SOURCES],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        _compiled[version] = os.pathsep.join([out] + cp)
    return _compiled[version]


def command(cp: str, main_class: str, *args: str) -> list[str]:
    """The command line running ``main_class`` of the class path with ``args``."""
    java = shutil.which("java")
    assert java
    # a small, quickly started JVM: the tests' programs are short and share two cores
    return [java, "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", cp, main_class, *args]


def run(cp: str, bootstrap: str, *phases: str, limit_s: int = 60) -> list[dict[str, Any]]:
    """Run the phases in one JVM (``admin`` first: it creates the topics); the events it printed.
    The program's own watchdog stops it after ``limit_s``; the process is killed a little later."""
    proc = subprocess.run(command(cp, "KprotoInterop", bootstrap, str(limit_s), *phases),
                          capture_output=True, text=True, timeout=limit_s + 30)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-8000:]}\n{proc.stdout[-3000:]}"
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    done = [e["phase"] for e in events if e["event"] == "done"]
    assert done == list(phases), (done, proc.stderr[-3000:])
    return events


def of(events: list[dict[str, Any]], phase: str, event: str) -> list[dict[str, Any]]:
    return [e for e in events if e["phase"] == phase and e["event"] == event]
