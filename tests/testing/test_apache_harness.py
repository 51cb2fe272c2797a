"""The harness around the clusters: the command line (classpath; start prints ``listening on``
and stops on SIGTERM, writing the class archive), formatting arguments and settings, what the
fixtures do when Apache Kafka cannot run (skip locally, fail under CI) or a test fails (its
nodes' logs in the report), and tools/kafka/fetch.sh (quiet on a warm cache, one line when
Maven is missing)."""
from __future__ import annotations

import os
import signal
import shutil
import subprocess
import sys
import time

import pytest

from kproto.testing import apache

pytestmark = pytest.mark.skipif(apache.unavailable() is not None and not os.environ.get("CI"),
                                reason=str(apache.unavailable()))


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k != "CI"}
    out.update(extra)
    return out


def test_classpath_prints_the_jars_of_each_version():
    for version in apache.VERSIONS:
        out = subprocess.run([sys.executable, "-m", "kproto.testing.apache", "classpath", "--version", version],
                             capture_output=True, text=True, timeout=60, check=True).stdout.strip()
        jars = out.split(os.pathsep)
        names = {os.path.basename(j) for j in jars}
        assert f"kafka_2.13-{version}.jar" in names and f"kafka-clients-{version}.jar" in names
        assert f"kafka-tools-{version}.jar" in names and any(n.startswith("log4j-slf4j") for n in names)
        assert all(os.path.isfile(j) for j in jars)
        assert apache.classpath(version) == out


def test_client_jars_hold_kafka_clients_and_its_codecs():
    for version in apache.CLIENT_VERSIONS:
        names = sorted(os.path.basename(j)[:-4] for j in apache.client_jars(version))
        assert names == ["kafka-clients", "lz4-java", "slf4j-api", "snappy-java", "zstd-jni"], names


def test_a_missing_cache_says_to_run_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("KPROTO_KAFKA_CACHE", str(tmp_path))
    with pytest.raises(apache.KafkaNotAvailable, match="Apache Kafka 4.4.0 is not in .*run tools/setup.sh"):
        apache.classpath("4.4.0")
    assert "tools/setup.sh" in str(apache.unavailable("4.4.0"))
    out = subprocess.run([sys.executable, "-m", "kproto.testing.apache", "classpath"], capture_output=True,
                         text=True, timeout=60, env=env(KPROTO_KAFKA_CACHE=str(tmp_path)))
    assert out.returncode == 1 and out.stderr.startswith("error: Apache Kafka 4.4.0 is not in")


def test_format_arguments_follow_the_quorum(tmp_path):
    single = apache.ApacheKafka(tmp_path / "a")
    assert single._format_args(single.nodes[1])[-1] == "--standalone"
    three = apache.ApacheKafka(tmp_path / "b", brokers=2, controllers=3)
    assert three._format_args(three.nodes[1])[-1] == "--no-initial-controllers"
    args = three._format_args(three.nodes[3002])
    voters = args[args.index("--initial-controllers") + 1].split(",")
    assert [v.split("@")[0] for v in voters] == ["3001", "3002", "3003"]
    assert all(v.split(":")[-1] == three.nodes[int(v.split("@")[0])].directory_id for v in voters)
    props = three.properties(1)
    assert props["controller.quorum.bootstrap.servers"].count("127.0.0.1:") == 3
    assert props["offsets.topic.replication.factor"] == "2"


def test_config_overrides_the_defaults(tmp_path):
    kafka = apache.ApacheKafka(tmp_path, config={"num.partitions": 4, "auto.create.topics.enable": False,
                                                  "broker.session.timeout.ms": 9000},
                               node_config={1: {"num.partitions": 5}})
    props = kafka.properties(1)
    assert props["num.partitions"] == "5" and props["auto.create.topics.enable"] == "false"
    assert props["broker.session.timeout.ms"] == "9000"


def test_scram_users_add_a_sasl_listener_and_credentials_at_format_time(tmp_path):
    kafka = apache.ApacheKafka(tmp_path, brokers=2, controllers=1, scram_users={"alice": "s3cret"})
    ports = [kafka.nodes[b].sasl_port for b in (1, 2)]
    assert kafka.sasl_bootstrap == ",".join(f"127.0.0.1:{p}" for p in ports)
    assert len({*ports, *(n.port for n in kafka.nodes.values() if n.port)}) == 4   # all distinct
    props = kafka.properties(1)
    assert f"SASL_PLAINTEXT://127.0.0.1:{ports[0]}" in props["listeners"].split(",")
    assert props["advertised.listeners"] == props["listeners"]
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in props["listener.security.protocol.map"]
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512"
    assert "ScramLoginModule" in props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"]
    assert "sasl.enabled.mechanisms" not in kafka.properties(3001)   # the controller: no SASL listener
    args = kafka._format_args(kafka.nodes[3001])
    scram = [args[i + 1] for i, a in enumerate(args) if a == "--add-scram"]
    assert scram == ["SCRAM-SHA-256=[name=alice,password=s3cret]", "SCRAM-SHA-512=[name=alice,password=s3cret]"]
    plain = apache.ApacheKafka(tmp_path / "plain")
    assert "--add-scram" not in plain._format_args(plain.nodes[1])
    assert "SASL" not in plain.properties(1)["listeners"]
    with pytest.raises(RuntimeError, match="scram_users"):
        plain.sasl_bootstrap


def test_extra_listeners_get_ports_and_protocols(tmp_path):
    kafka = apache.ApacheKafka(tmp_path, brokers=2, controllers=1,
                               listeners={"mtls": "SSL", "OAUTH": "SASL_PLAINTEXT"})
    ports = [kafka.nodes[b].extra_ports[name] for b in (1, 2) for name in ("MTLS", "OAUTH")]
    assert len({*ports, *(n.port for n in kafka.nodes.values() if n.port)}) == 6   # all distinct
    assert kafka.listener_bootstrap("mtls") == ",".join(
        f"127.0.0.1:{kafka.nodes[b].extra_ports['MTLS']}" for b in (1, 2))
    props = kafka.properties(1)
    assert f"MTLS://127.0.0.1:{ports[0]}" in props["listeners"].split(",")
    assert f"OAUTH://127.0.0.1:{ports[1]}" in props["advertised.listeners"].split(",")
    assert props["listener.security.protocol.map"].endswith(",MTLS:SSL,OAUTH:SASL_PLAINTEXT")
    assert "MTLS" not in kafka.properties(3001)["listeners"]   # brokers only


def test_existing_log_dirs_and_a_static_quorum(tmp_path):
    (tmp_path / "b1").mkdir()
    (tmp_path / "b1" / "meta.properties").write_text("node.id=1\n")
    kafka = apache.ApacheKafka(tmp_path / "k", brokers=1, controllers=1,
                               log_dirs={1: tmp_path / "b1", 3001: tmp_path / "c"}, static_voters=True)
    assert kafka.log_dir(1) == tmp_path / "b1"
    props = kafka.properties(1)
    assert props["log.dirs"] == str(tmp_path / "b1")
    assert props["controller.quorum.voters"] == f"3001@127.0.0.1:{kafka.nodes[3001].controller_port}"
    assert "controller.quorum.bootstrap.servers" not in props
    default = apache.ApacheKafka(tmp_path / "d")
    assert default.log_dir(1) == tmp_path / "d" / "broker-1" / "data"
    assert "controller.quorum.voters" not in default.properties(1)


INNER_TESTS = """
import pytest

from kproto.testing.apache import ApacheKafka


@pytest.mark.apache_kafka(version="4.3.1")
def test_needs_kafka(apache_kafka):
    pass


@pytest.fixture
def kafka(tmp_path):
    kafka = ApacheKafka(tmp_path)
    kafka.nodes[1].dir.mkdir(parents=True)
    kafka.log_path(1).write_text("first line\\nthe line the broker wrote last\\n")
    return kafka


def test_fails(kafka):
    assert False
"""


def run_inner(tmp_path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["kproto.testing"]\n')
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env(**extra_env))


def test_without_kafka_the_fixture_skips_locally_and_fails_under_ci_and_failures_show_logs(tmp_path):
    empty = tmp_path / "empty-cache"
    empty.mkdir()
    local = run_inner(tmp_path, KPROTO_KAFKA_CACHE=str(empty))
    assert "1 failed, 1 skipped" in local.stdout, local.stdout
    assert "SKIPPED" in local.stdout and "Apache Kafka 4.3.1 is not in" in local.stdout
    # the failed test used an ApacheKafka: the end of its node's log is in the report
    assert "Apache Kafka node 1:" in local.stdout and "the line the broker wrote last" in local.stdout
    ci = run_inner(tmp_path, KPROTO_KAFKA_CACHE=str(empty), CI="true")
    assert "1 failed, 1 error" in ci.stdout, ci.stdout  # the fixture fails the test's set-up
    assert "Apache Kafka 4.3.1 is needed under CI" in ci.stdout


def test_cli_start_prints_listening_on_and_stops_on_sigterm(tmp_path):
    # a cache of its own (the jars linked from the real one) and no class archive in it yet:
    # the node writes one when it exits, which the next nodes start with
    cache = tmp_path / "cache"
    (cache / "4.3.1").mkdir(parents=True)
    real = apache.cache_dir() / "4.3.1"
    (cache / "4.3.1" / "libs").symlink_to(real / "libs")
    (cache / "4.3.1" / ".complete").write_bytes((real / ".complete").read_bytes())
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "kproto.testing.apache", "start", "--version", "4.3.1",
                             "--data", str(data)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env(KPROTO_KAFKA_CACHE=str(cache)))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
        port = int(line.rsplit(":", 1)[1])
        assert "Kafka version: 4.3.1" in (data / "broker-1" / "server.log").read_text()
        assert f"127.0.0.1:{port}" in (data / "broker-1" / "server.properties").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    log = (data / "broker-1" / "server.log").read_text()
    assert "Kafka Server started" in log and "shut down completed" in log.lower()
    archives = list((cache / "4.3.1").glob("classes-*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 1_000_000
    assert not list((cache / "4.3.1").glob("*.tmp"))


FETCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "tools", "kafka", "fetch.sh")


def test_fetch_is_quiet_and_quick_when_the_cache_is_warm():
    start = time.monotonic()
    out = subprocess.run(["bash", FETCH], capture_output=True, text=True, timeout=120,
                         env=env(KPROTO_KAFKA_CACHE=str(apache.cache_dir())))
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out
    assert time.monotonic() - start < 10


def test_fetch_says_in_one_line_that_maven_is_missing(tmp_path):
    # a PATH with the shell tools fetch.sh uses and java, but no mvn (and no apt-get)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "cat", "cut", "id", "ls", "mkdir", "mv", "rm", "sha256sum", "tail", "wc", "dirname", "java"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    out = subprocess.run([str(bin_dir / "bash"), FETCH], capture_output=True, text=True, timeout=60,
                         env=env(PATH=str(bin_dir), KPROTO_KAFKA_CACHE=str(tmp_path / "cache")))
    assert out.returncode == 1
    assert out.stderr == "fetch.sh: Maven (mvn) is needed to fetch Apache Kafka's jars: install maven\n"


def test_the_pool_keeps_two_clusters_and_stops_the_one_used_longest_ago(tmp_path):
    from kproto.testing import _ApachePool

    class Fake:
        def __init__(self, path):
            self.closed = False

        def start_all(self):
            return self

        def close(self):
            self.closed = True

    class Base:
        def mktemp(self, name):
            return tmp_path

    pool = _ApachePool(Base())
    a, b = pool.get("a", Fake), pool.get("b", Fake)
    assert pool.get("a", Fake) is a and not b.closed   # shared; "b" is now the one used longest ago
    c = pool.get("c", Fake)
    assert b.closed and not a.closed and not c.closed
    assert pool.get("b", Fake) is not b and a.closed   # started again; "a" made room
    pool.close()
    assert c.closed
