"""Apache Kafka itself on loopback, for tests: KRaft nodes started from the jars that
``tools/setup.sh`` (``tools/kafka/fetch.sh``) puts in a cache outside the repository.

    from kproto.testing.apache import ApacheKafka

    with ApacheKafka("/tmp/kafka-data") as kafka:                 # one combined-mode node
        print(kafka.bootstrap)
    with ApacheKafka("/tmp/kafka-3", brokers=3, controllers=1) as kafka:
        kafka.create_topic("orders", partitions=1, replication_factor=3)
        kafka.stop(kafka.leader("orders", 0), abrupt=True)      # kill -9; the leader moves

``controllers=0`` (the default) makes every broker a controller too (KRaft combined mode);
``controllers=1`` or ``3`` adds dedicated controller nodes. Broker ids are 1..N, dedicated
controllers 3001.. (as :class:`kproto.broker.cluster.Cluster`). Each node is formatted with
Kafka's own ``StorageTool`` (``--standalone`` for a single controller, ``--initial-controllers``
for a quorum) and runs as a JVM of its own (``kafka.Kafka``) with its server log in
``<data_dir>/<node>/server.log``; the data directories stay for inspection.

``python -m kproto.testing.apache start --data DIR`` runs a cluster until Ctrl-C;
``python -m kproto.testing.apache classpath`` prints the jars' class path.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Literal, Mapping, Optional, Sequence, overload

from kproto.codecs import request as request_codec
from kproto.error_codes import error_name
from kproto.errors import DecodeError
from kproto.framing import RequestHeader, decode_response, encode_request
from kproto.testing.ports import free_ports

__all__ = ["ApacheKafka", "KafkaNotAvailable", "KafkaStartError", "DEFAULT_VERSION", "VERSIONS",
           "TEST_CONFIG", "cache_dir", "classpath", "client_jars", "java", "unavailable",
           "run_tool", "main"]

#: The Kafka release started unless another is asked for, and those tools/setup.sh fetches.
DEFAULT_VERSION = "4.4.0"
VERSIONS = ("4.4.0", "4.3.1")
#: The ``kafka-clients`` releases tools/setup.sh fetches for the Java interop tests.
CLIENT_VERSIONS = ("4.4.0", "3.9.1")
#: The id of the first dedicated controller (brokers are 1..N), as kproto's Cluster numbers them.
CONTROLLER_ID_BASE = 3000
#: The broker's main class, and the storage tool's in Kafka 4.x.
KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"

#: What the harness changes from Kafka's defaults (any is overridden by ``config``): consumer
#: groups form at once (no initial rebalance delay, as Kafka's own test harness), and a dead
#: broker is fenced after 3 s (Kafka: 9 s; heartbeats every 500 ms, Kafka: 2 s) so leaders
#: move within seconds; KIP-848 members heartbeat every 500 ms (Kafka: 5 s, also its minimum),
#: as kproto's test broker has them, and so do share-group members (KIP-932: a member that
#: joins before the first assignment would wait 5 s for its partitions). Share groups need no
#: setting of their own (a 4.4 node is formatted with share.version 2), but the floors of their
#: group configs are lowered so that a test can give its own group a short record lock, session
#: timeout and heartbeat interval (IncrementalAlterConfigs on the group) without a node of its
#: own. The internal topics' replication is set from the cluster's size.
TEST_CONFIG: dict[str, str] = {"group.initial.rebalance.delay.ms": "0",
                               "broker.session.timeout.ms": "3000",
                               "broker.heartbeat.interval.ms": "500",
                               "group.consumer.heartbeat.interval.ms": "500",
                               "group.consumer.min.heartbeat.interval.ms": "500",
                               "group.share.heartbeat.interval.ms": "500",
                               "group.share.min.record.lock.duration.ms": "1000",
                               "group.share.min.session.timeout.ms": "3000",
                               "group.share.min.heartbeat.interval.ms": "500"}

#: JVM options of every node: a heap small enough for several nodes on a shared 2-core machine,
#: the serial collector (no GC threads to compete for the cores) and the client compiler only
#: (C2's compilations cost more CPU than a test's broker ever wins back: a 3-broker cluster with
#: its controller was ready in 32 s instead of 39 s on a loaded 2-core machine).
JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:MaxMetaspaceSize=256m",
               "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
#: Short-lived tools run with the client compiler only: they are done before C2 would pay off.
TOOL_JVM_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

_LOG4J2 = Path(__file__).with_name("log4j2.properties")
#: the SASL mechanisms of the SASL_PLAINTEXT listener (``scram_users``)
_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: releases whose class archive a node of this process is writing (one writer per release)
_archiving: set[str] = set()


class KafkaNotAvailable(RuntimeError):
    """Java or Apache Kafka's jars are missing (run tools/setup.sh)."""


class KafkaStartError(RuntimeError):
    """A node did not start or did not become ready in time; the message ends with its log."""


def cache_dir() -> Path:
    """Where tools/setup.sh puts Kafka's jars: ``$KPROTO_KAFKA_CACHE`` or ~/.cache/kproto/kafka."""
    env = os.environ.get("KPROTO_KAFKA_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kproto" / "kafka"


def _jars(folder: Path, what: str) -> list[str]:
    jars = sorted(str(p) for p in (folder / "libs").glob("*.jar")) if (folder / ".complete").is_file() else []
    if not jars:
        raise KafkaNotAvailable(f"{what} is not in {folder}: run tools/setup.sh "
                                "(Java 17 and Maven fetch it from Maven Central)")
    return jars


def classpath(version: str = DEFAULT_VERSION) -> str:
    """The class path of Apache Kafka ``version``'s server, tools and clients."""
    return os.pathsep.join(_jars(cache_dir() / version, f"Apache Kafka {version}"))


def client_jars(version: str = DEFAULT_VERSION) -> list[str]:
    """The jars of the Java client ``kafka-clients`` ``version`` and what it loads at run time
    (slf4j-api, lz4-java, snappy-java, zstd-jni)."""
    return _jars(cache_dir() / f"clients-{version}", f"kafka-clients {version}")


def java() -> str:
    """The ``java`` launcher ($JAVA_HOME/bin/java, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    candidates = [os.path.join(home, "bin", "java")] if home else []
    from shutil import which
    found = which("java")
    candidates += [found] if found else []
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    raise KafkaNotAvailable("Java 17+ is needed to run Apache Kafka (no java on PATH or in JAVA_HOME)")


def unavailable(version: str = DEFAULT_VERSION) -> Optional[str]:
    """Why Apache Kafka ``version`` cannot run here (Java or its jars missing), or None."""
    try:
        java()
        classpath(version)
    except KafkaNotAvailable as exc:
        return str(exc)
    return None


def _command(version: str, main_class: str, args: Sequence[str], jvm_options: Sequence[str],
             log_level: str = "WARN", log_target: str = "SYSTEM_ERR") -> list[str]:
    return [java(), *jvm_options, f"-Dlog4j2.configurationFile={_LOG4J2}",
            f"-Dkproto.log.level={log_level}", f"-Dkproto.log.target={log_target}",
            "-cp", classpath(version), main_class, *args]


@overload
def run_tool(version: str, main_class: str, *args: str, timeout: float = ..., check: bool = ...,
             binary: Literal[False] = ...) -> subprocess.CompletedProcess[str]: ...
@overload
def run_tool(version: str, main_class: str, *args: str, timeout: float = ..., check: bool = ...,
             binary: Literal[True]) -> subprocess.CompletedProcess[bytes]: ...
def run_tool(version: str, main_class: str, *args: str, timeout: float = 120.0,
             check: bool = True, binary: bool = False) -> subprocess.CompletedProcess[Any]:
    """Run one of Kafka's tools (``org.apache.kafka.tools.DumpLogSegments``,
    ``kafka.tools.StorageTool``, ...) from ``version``'s class path; its output as text, or as
    the bytes it wrote with ``binary`` (no newline translation). ``check``: a non-zero exit
    raises RuntimeError with the tool's output."""
    cmd = _command(version, main_class, args, [*TOOL_JVM_OPTIONS, *_class_archive(version, write=False)[0]])
    proc = subprocess.run(cmd, capture_output=True, text=not binary, timeout=timeout)
    if check and proc.returncode != 0:
        out, err = ((proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))
                    if binary else (proc.stdout, proc.stderr))
        raise RuntimeError(f"{main_class} {' '.join(args)} exited {proc.returncode}:\n"
                           f"{err[-4000:]}{out[-2000:]}")
    return proc


def _class_archive(version: str, write: bool = True) -> tuple[list[str], Optional[tuple[Path, Path]]]:
    """JVM options that share the classes Kafka loads between runs: a dynamic class-data
    archive (AppCDS) in the release's cache folder, per Java installation. Nodes start with it
    (a single node was ready in 6.2-6.8 s instead of 7.7-10.4 s on a loaded 2-core machine);
    while there is none, the first node started writes one when it exits: the options, and
    (the file it writes, the archive's name) to rename it to. ``KPROTO_KAFKA_CDS=0`` turns
    this off. The JVM ignores an archive made by another Java or for other jars. Tools
    (``write=False``) use the archive when there is one."""
    folder = cache_dir() / version
    if os.environ.get("KPROTO_KAFKA_CDS") == "0":
        return [], None
    key = hashlib.sha256(os.path.realpath(java()).encode()).hexdigest()[:12]
    archive = folder / f"classes-{key}.jsa"
    if archive.is_file():
        return [f"-XX:SharedArchiveFile={archive}"], None
    if not write or version in _archiving or not os.access(folder, os.W_OK):
        return [], None
    _archiving.add(version)
    tmp = folder / f"classes-{key}.jsa.{os.getpid()}.tmp"
    return [f"-XX:ArchiveClassesAtExit={tmp}"], (tmp, archive)


def _random_uuid() -> str:
    """A Kafka Uuid as its tools print it (URL-safe base64, no padding); like Kafka's
    ``Uuid.randomUuid`` it never starts with '-' (a command line would take it for an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _die_with_parent() -> list[str]:
    """A prefix that makes the JVM die with the process that started it (Linux's parent-death
    signal, set by util-linux's setpriv, kept across exec), so no node outlives a test run that
    crashed; empty where setpriv is missing. (A preexec_fn would do it too, but is not safe
    in a process with threads, as pytest runs kproto's brokers in.)"""
    from shutil import which
    setpriv = which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "KILL"] if setpriv else []


def _wait_threads(pid: int, stopped: bool, timeout: float = 10.0) -> None:
    """Wait until every thread of ``pid`` is stopped (state T) or none is: a signal takes
    effect on each thread when it is next scheduled, which on a loaded machine is not at once.
    Where /proc is missing, nothing to wait on."""
    tasks = f"/proc/{pid}/task"
    deadline = time.monotonic() + timeout
    while os.path.isdir(tasks) and time.monotonic() < deadline:
        states = []
        for tid in os.listdir(tasks):
            try:
                with open(f"{tasks}/{tid}/stat", "rb") as f:
                    states.append(f.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t"))
            except (OSError, IndexError):
                continue  # a thread that just ended
        if states and all(states) == stopped and any(states) == stopped:
            return
        time.sleep(0.01)


def _request(host: str, port: int, obj: Any, version: int, timeout: float = 5.0) -> Any:
    """Send one request with kproto's codecs and return the decoded response body."""
    api_key = type(obj).API_KEY
    header = RequestHeader(request_api_key=api_key, request_api_version=version,
                                  correlation_id=1, client_id="kproto-apache-harness")
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(encode_request(header, obj))
        size = int.from_bytes(_recv_exactly(sock, 4), "big")
        frame = _recv_exactly(sock, size)
    _, body = decode_response(frame, api_key, version, size_prefix=False)
    return body


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@dataclass
class Node:
    """One Kafka process: its id, roles, ports and folder."""

    id: int
    roles: tuple[str, ...]
    dir: Path
    port: int = 0               #: the PLAINTEXT listener's port (brokers)
    sasl_port: int = 0          #: the SASL_PLAINTEXT listener's port (brokers, with SCRAM users)
    controller_port: int = 0    #: the CONTROLLER listener's port (controllers)
    #: the ports of the extra listeners (brokers), by listener name
    extra_ports: dict[str, int] = field(default_factory=dict)
    directory_id: str = field(default_factory=_random_uuid)
    proc: Optional[subprocess.Popen[bytes]] = None
    archive: Optional[tuple[Path, Path]] = None   #: the class archive this run writes at exit
    paused: bool = False
    wanted: bool = False        #: started and not stopped on purpose: exiting is a failure

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class ApacheKafka:
    """Apache Kafka ``version`` on ``host``: ``brokers`` brokers and ``controllers`` dedicated
    controllers (0: the brokers are controllers too, KRaft combined mode), formatted into
    ``data_dir`` on :meth:`start_all`. ``config``: server.properties overrides for every node
    (values written with ``str``, booleans as ``true``/``false``); ``node_config``: per node id.
    ``scram_users`` (name: password) adds a SASL_PLAINTEXT listener to every broker
    (:attr:`sasl_bootstrap`) with SCRAM-SHA-256 and SCRAM-SHA-512, the users' credentials of
    both mechanisms written at format time (the storage tool's ``--add-scram``).
    ``listeners`` (name: security protocol, e.g. ``{"MTLS": "SSL"}``) adds a listener of each
    to every broker (:meth:`listener_bootstrap`); their settings go in ``config``
    (``listener.name.<name>.*``).

    ``log_dirs`` (node id: directory) starts nodes on existing data instead of ``<node>/data``,
    e.g. another cluster's: a directory that has a ``meta.properties`` is not formatted again.
    ``static_voters``: the quorum in ``controller.quorum.voters`` (a static quorum, KRaft
    version 0, whose metadata has no voter records to be found from
    ``controller.quorum.bootstrap.servers``)."""

    def __init__(self, data_dir: str | os.PathLike[str], brokers: int = 1, controllers: int = 0, *,
                 version: str = DEFAULT_VERSION, config: Optional[Mapping[str, Any]] = None,
                 node_config: Optional[Mapping[int, Mapping[str, Any]]] = None,
                 scram_users: Optional[Mapping[str, str]] = None,
                 listeners: Optional[Mapping[str, str]] = None,
                 log_dirs: Optional[Mapping[int, str | os.PathLike[str]]] = None,
                 static_voters: bool = False,
                 host: str = "127.0.0.1", jvm_options: Sequence[str] = JVM_OPTIONS) -> None:
        if brokers < 1 or controllers < 0:
            raise ValueError("a cluster needs at least one broker (and controllers >= 0)")
        self.data_dir = Path(data_dir)
        self.version, self.host = version, host
        self.config = {k: _prop(v) for k, v in (config or {}).items()}
        self.node_config = {n: {k: _prop(v) for k, v in c.items()} for n, c in (node_config or {}).items()}
        self.jvm_options = tuple(jvm_options)
        self.scram_users = dict(scram_users or {})
        self.extra_listeners = {k.upper(): v for k, v in (listeners or {}).items()}
        self.log_dirs = {n: Path(d) for n, d in (log_dirs or {}).items()}
        self.static_voters = static_voters
        self.cluster_id = _random_uuid()
        broker_roles = ("broker",) if controllers else ("broker", "controller")
        per_broker = ((1 if controllers else 2) + (1 if self.scram_users else 0)
                      + len(self.extra_listeners))
        ports = iter(free_ports(brokers * per_broker + controllers, host))
        self.nodes: dict[int, Node] = {}
        for i in range(1, brokers + 1):
            self.nodes[i] = Node(i, broker_roles, self.data_dir / f"broker-{i}", port=next(ports),
                                 controller_port=0 if controllers else next(ports),
                                 sasl_port=next(ports) if self.scram_users else 0,
                                 extra_ports={name: next(ports) for name in self.extra_listeners})
        for i in range(1, controllers + 1):
            n = CONTROLLER_ID_BASE + i
            self.nodes[n] = Node(n, ("controller",), self.data_dir / f"controller-{n}",
                                 controller_port=next(ports))
        self._lock = threading.Lock()

    # -- the cluster's shape ------------------------------------------------------------------
    @property
    def broker_ids(self) -> list[int]:
        return [n.id for n in self.nodes.values() if n.is_broker]

    @property
    def controller_ids(self) -> list[int]:
        return [n.id for n in self.nodes.values() if n.is_controller]

    @property
    def bootstrap(self) -> str:
        """``host:port`` of every broker, comma-separated (Kafka's bootstrap.servers)."""
        return ",".join(f"{self.host}:{self.nodes[b].port}" for b in self.broker_ids)

    @property
    def sasl_bootstrap(self) -> str:
        """``host:port`` of every broker's SASL_PLAINTEXT listener (needs ``scram_users``)."""
        if not self.scram_users:
            raise RuntimeError("no SASL listener: start the cluster with scram_users")
        return ",".join(f"{self.host}:{self.nodes[b].sasl_port}" for b in self.broker_ids)

    def listener_bootstrap(self, name: str) -> str:
        """``host:port`` of every broker's extra listener ``name`` (see ``listeners``)."""
        return ",".join(f"{self.host}:{self.nodes[b].extra_ports[name.upper()]}" for b in self.broker_ids)

    def address(self, node: int) -> tuple[str, int]:
        """The (host, port) a client connects to on broker ``node``."""
        return self.host, self.nodes[node].port

    def running(self, node: int) -> bool:
        """Whether ``node``'s process is alive (paused counts as alive)."""
        return self.nodes[node].running

    # -- files --------------------------------------------------------------------------------
    def log_path(self, node: int) -> Path:
        """The node's server log (stdout and stderr of its JVM, appended across restarts)."""
        return self.nodes[node].log_path

    def log_dir(self, node: int) -> Path:
        """The node's ``log.dirs``: its topic partitions and its metadata log."""
        return self.log_dirs.get(node, self.nodes[node].dir / "data")

    def log_tail(self, node: int, lines: int = 60) -> str:
        """The last ``lines`` of ``node``'s server log."""
        try:
            with open(self.log_path(node), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 200 * lines))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- configuration and formatting ---------------------------------------------------------
    def _voters(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_controller]

    def properties(self, node: int) -> dict[str, str]:
        """The server.properties of ``node``: listeners and quorum, the harness's test settings,
        then ``config`` and ``node_config[node]``."""
        n = self.nodes[node]
        h = self.host
        listeners, advertised = [], []
        if n.is_broker:
            listeners.append(f"PLAINTEXT://{h}:{n.port}")
            advertised.append(f"PLAINTEXT://{h}:{n.port}")
            if n.sasl_port:
                listeners.append(f"SASL_PLAINTEXT://{h}:{n.sasl_port}")
                advertised.append(f"SASL_PLAINTEXT://{h}:{n.sasl_port}")
            for name, port in n.extra_ports.items():
                listeners.append(f"{name}://{h}:{port}")
                advertised.append(f"{name}://{h}:{port}")
        if n.is_controller:
            listeners.append(f"CONTROLLER://{h}:{n.controller_port}")
            advertised.append(f"CONTROLLER://{h}:{n.controller_port}")
        rf = str(min(3, len(self.broker_ids)))
        min_isr = str(min(2, len(self.broker_ids)))
        props = {
            "process.roles": ",".join(n.roles),
            "node.id": str(n.id),
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
                                              + (",SASL_PLAINTEXT:SASL_PLAINTEXT" if n.sasl_port else "")
                                              + "".join(f",{k}:{v}" for k, v in self.extra_listeners.items()),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            **({"controller.quorum.voters": ",".join(f"{v.id}@{h}:{v.controller_port}" for v in self._voters())}
               if self.static_voters else
               {"controller.quorum.bootstrap.servers": ",".join(f"{h}:{v.controller_port}" for v in self._voters())}),
            "log.dirs": str(self.log_dir(node)),
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            **TEST_CONFIG, **(self._sasl_properties() if n.sasl_port else {}),
            **self.config, **self.node_config.get(node, {}),
        }
        if not n.is_broker:
            del props["inter.broker.listener.name"]
        return props

    @staticmethod
    def _sasl_properties() -> dict[str, str]:
        # SCRAM's server side needs the login module only: credentials come from the metadata
        module = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {"sasl.enabled.mechanisms": ",".join(_SCRAM),
                **{f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config": module for m in _SCRAM}}

    def _write_properties(self, n: Node) -> Path:
        n.dir.mkdir(parents=True, exist_ok=True)
        path = n.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(n.id).items()))
        return path

    def _format_args(self, n: Node) -> list[str]:
        args = ["format", "--config", str(n.dir / "server.properties"), "--cluster-id", self.cluster_id]
        for user, password in self.scram_users.items():
            for m in _SCRAM:
                args += ["--add-scram", f"{m}=[name={user},password={password}]"]
        voters = self._voters()
        if not n.is_controller:
            return args + ["--no-initial-controllers"]
        if len(voters) == 1:
            return args + ["--standalone"]
        return args + ["--initial-controllers", ",".join(
            f"{v.id}@{self.host}:{v.controller_port}:{v.directory_id}" for v in voters)]

    def format(self) -> None:
        """Write each node's server.properties and format its storage with Kafka's StorageTool
        (all nodes at once); a node already formatted is left as it is."""
        procs = []
        for n in self.nodes.values():
            self._write_properties(n)
            if (self.log_dir(n.id) / "meta.properties").is_file():
                continue
            cmd = _command(self.version, STORAGE_TOOL, self._format_args(n),
                           [*TOOL_JVM_OPTIONS, *_class_archive(self.version, write=False)[0]])
            procs.append((n, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
        for n, proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise KafkaStartError(f"formatting node {n.id} failed (exit {proc.returncode}):\n"
                                      f"{out.decode('utf-8', 'replace')[-4000:]}")

    # -- processes ----------------------------------------------------------------------------
    def _spawn(self, n: Node) -> None:
        self._write_properties(n)
        archive_options, n.archive = _class_archive(self.version)
        cmd = _command(self.version, KAFKA_MAIN, [str(n.dir / "server.properties")],
                       [*self.jvm_options, *archive_options], log_level="INFO", log_target="SYSTEM_OUT")
        log: IO[bytes] = open(n.log_path, "ab")
        try:
            log.write(f"==== kproto.testing.apache: starting node {n.id} at {time.strftime('%H:%M:%S')}\n".encode())
            log.flush()
            n.proc = subprocess.Popen(_die_with_parent() + cmd, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, cwd=n.dir)
        finally:
            log.close()
        n.paused, n.wanted = False, True

    def start_all(self, timeout: float = 120.0) -> ApacheKafka:
        """Format the nodes (first time), start them all and wait until every one is ready."""
        self.format()
        try:
            for n in self.nodes.values():
                if not n.running:
                    self._spawn(n)
            self.wait_ready(timeout=timeout)
        except BaseException:
            self.close()
            raise
        return self

    def start(self, node: int, timeout: float = 90.0) -> None:
        """Start a stopped node again (same ports and data) and wait until it is ready."""
        n = self.nodes[node]
        if n.running:
            raise RuntimeError(f"node {node} is running")
        self._spawn(n)
        self.wait_ready([node], timeout=timeout)

    def stop(self, node: int, abrupt: bool = False, timeout: float = 60.0) -> None:
        """Stop ``node``: SIGTERM (Kafka's controlled shutdown), or with ``abrupt`` SIGKILL
        (kill -9: no shutdown at all). A node that has not stopped after ``timeout`` is killed."""
        n = self.nodes[node]
        n.wanted = False
        proc = n.proc
        if proc is None or proc.poll() is not None:
            return
        if abrupt:
            proc.kill()
        else:
            if n.paused:
                proc.send_signal(signal.SIGCONT)
            proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        n.paused = False
        self._exited(n)

    def _exited(self, n: Node) -> None:
        """After a node's JVM ended: keep the class archive it wrote (none when it was killed)."""
        if n.archive is None:
            return
        (tmp, archive), n.archive = n.archive, None
        _archiving.discard(self.version)
        try:
            if tmp.is_file() and tmp.stat().st_size > 0:
                os.replace(tmp, archive)
            else:
                tmp.unlink(missing_ok=True)
        except OSError:  # another process's archive won the race, or the cache is read-only
            pass

    def pause(self, node: int) -> None:
        """Freeze ``node`` (SIGSTOP): its sockets stay open, it answers nothing. Returns once
        every thread of the JVM is stopped (Linux: as /proc shows it)."""
        n = self.nodes[node]
        if not n.running:
            raise RuntimeError(f"node {node} is not running")
        assert n.proc is not None
        n.proc.send_signal(signal.SIGSTOP)
        n.paused = True
        _wait_threads(n.proc.pid, stopped=True)

    def resume(self, node: int) -> None:
        """Let a paused node run again (SIGCONT)."""
        n = self.nodes[node]
        if n.proc is not None and n.running:
            n.proc.send_signal(signal.SIGCONT)
            _wait_threads(n.proc.pid, stopped=False)
        n.paused = False

    def close(self) -> None:
        """Stop every node with SIGTERM: the brokers first (their controlled shutdown needs the
        controllers), then the dedicated controllers; a node still running after 30 s is killed.
        The data directories stay."""
        brokers = self.broker_ids
        for group in (brokers, [c for c in self.controller_ids if c not in brokers]):
            for node in group:
                n = self.nodes[node]
                n.wanted = False
                if n.running:
                    if n.paused:
                        self.resume(node)
                    assert n.proc is not None
                    n.proc.terminate()
            deadline = time.monotonic() + 30
            for node in group:
                proc = self.nodes[node].proc
                if proc is None:
                    continue
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(30)
                self._exited(self.nodes[node])

    def __enter__(self) -> ApacheKafka:
        return self.start_all()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- readiness and metadata ---------------------------------------------------------------
    def _check_alive(self, n: Node) -> None:
        if n.wanted and n.proc is not None and n.proc.poll() is not None:
            raise KafkaStartError(f"Apache Kafka node {n.id} exited with {n.proc.returncode}; "
                                  f"the end of {n.log_path}:\n{self.log_tail(n.id)}")

    def _ready(self, n: Node, brokers: set[int]) -> bool:
        self._check_alive(n)
        if n.paused:
            return True
        port = n.port if n.is_broker else n.controller_port
        try:
            versions = _request(self.host, port, request_codec(18).cls(), 0, timeout=2.0)
            if versions.error_code != 0:
                return False
            if not n.is_broker:
                return True
            md = _request(self.host, port, request_codec(3).cls(topics=[]), 12, timeout=2.0)
        except (OSError, DecodeError):
            return False
        return brokers <= {b.node_id for b in md.brokers}

    def wait_ready(self, nodes: Optional[Sequence[int]] = None, timeout: float = 90.0) -> None:
        """Wait until each of ``nodes`` (default: all running) answers ApiVersions and, for a
        broker, its Metadata lists every running broker."""
        todo = [self.nodes[i] for i in (nodes if nodes is not None else self.nodes)]
        deadline = time.monotonic() + timeout
        while True:
            brokers = {b for b in self.broker_ids if self.nodes[b].running and not self.nodes[b].paused}
            todo = [n for n in todo if not self._ready(n, brokers)]
            if not todo:
                return
            if time.monotonic() > deadline:
                n = todo[0]
                raise KafkaStartError(f"Apache Kafka node {n.id} not ready after {timeout:.0f} s; "
                                      f"the end of {n.log_path}:\n{self.log_tail(n.id)}")
            time.sleep(0.2)

    def _any_broker(self, exclude: Sequence[int] = ()) -> int:
        for b in self.broker_ids:
            n = self.nodes[b]
            if n.running and not n.paused and b not in exclude:
                return b
        raise RuntimeError("no broker is running")

    def metadata(self, topics: Optional[Sequence[str]] = None, via: Optional[int] = None) -> Any:
        """A MetadataResponse (v12) from broker ``via`` (default: a running one); ``topics``
        None: all topics."""
        req = request_codec(3).cls(topics=None if topics is None else [
            request_codec(3).cls.MetadataRequestTopic(name=t) for t in topics])
        return _request(*self.address(via if via is not None else self._any_broker()), req, 12)

    def leader(self, topic: str, partition: int, via: Optional[int] = None) -> Optional[int]:
        """The partition's leader as broker ``via`` sees it (None: no leader or unknown)."""
        for t in self.metadata([topic], via).topics:
            for p in t.partitions:
                if p.partition_index == partition and p.error_code == 0 and p.leader_id >= 0:
                    return int(p.leader_id)
        return None

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = -1,
                     configs: Optional[Mapping[str, Any]] = None, timeout: float = 30.0) -> None:
        """Create a topic (CreateTopics v7 through a broker) and wait until every partition
        has a leader that every running broker knows."""
        codec = request_codec(19).cls
        topic = codec.CreatableTopic(name=name, num_partitions=partitions,
                                     replication_factor=replication_factor,
                                     configs=[codec.CreatableTopicConfig(name=k, value=_prop(v))
                                              for k, v in (configs or {}).items()])
        resp = _request(*self.address(self._any_broker()), codec(topics=[topic], timeout_ms=int(timeout * 1000)),
                        7, timeout=timeout + 5)
        for t in resp.topics:
            if t.error_code != 0:
                raise RuntimeError(f"CreateTopics {name}: {error_name(t.error_code)} {t.error_message or ''}")
        self.wait_for(lambda: all(self._all_leaders(name, partitions, b) for b in self.broker_ids
                                  if self.nodes[b].running and not self.nodes[b].paused),
                      timeout, f"leaders of {name}")

    def _all_leaders(self, topic: str, partitions: int, via: int) -> bool:
        try:
            return all(self.leader(topic, p, via) is not None for p in range(partitions))
        except (OSError, DecodeError):
            return False

    def wait_for(self, condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
                 interval: float = 0.2) -> None:
        """Poll ``condition()`` until it is true; TimeoutError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not condition():
            for n in self.nodes.values():
                self._check_alive(n)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not reached after {timeout} s")
            time.sleep(interval)

    def __repr__(self) -> str:
        return (f"ApacheKafka({self.version}, brokers={self.broker_ids}, "
                f"controllers={self.controller_ids}, data_dir={str(self.data_dir)!r})")


def _prop(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# -- command line -----------------------------------------------------------------------------
def _parse_config(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--config {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``start``: run Apache Kafka until Ctrl-C or SIGTERM; ``classpath``: print the jars."""
    parser = argparse.ArgumentParser(prog="python -m kproto.testing.apache",
                                     description="Run Apache Kafka on loopback for tests.")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a cluster and run until Ctrl-C / SIGTERM")
    start.add_argument("--version", default=DEFAULT_VERSION, choices=VERSIONS)
    start.add_argument("--data", required=True, help="data directory (kept)")
    start.add_argument("--nodes", type=int, default=1, help="brokers (default 1)")
    start.add_argument("--controllers", type=int, default=0, choices=(0, 1, 3),
                       help="dedicated controllers (0: brokers are controllers too)")
    start.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="a server.properties override (repeatable)")
    cp = sub.add_parser("classpath", help="print the class path of a Kafka release")
    cp.add_argument("--version", default=DEFAULT_VERSION, choices=VERSIONS)
    args = parser.parse_args(argv)
    try:
        if args.command == "classpath":
            print(classpath(args.version))
            return 0
        kafka = ApacheKafka(args.data, args.nodes, args.controllers, version=args.version,
                            config=_parse_config(args.config))
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with kafka:
            for b in kafka.broker_ids:
                print(f"listening on {kafka.host}:{kafka.nodes[b].port}", flush=True)
            try:
                while not stop.wait(0.5):
                    for n in kafka.nodes.values():
                        kafka._check_alive(n)
            except KeyboardInterrupt:
                pass
    except (KafkaNotAvailable, KafkaStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
