"""A Kafka broker and a Kafka cluster for tests: pytest fixtures over
:class:`kproto.broker.Broker` and :class:`kproto.broker.Cluster`.

    # conftest.py
    pytest_plugins = ["kproto.testing"]        # or: from kproto.testing import kafka_broker

    def test_roundtrip(kafka_broker):
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka_broker.bootstrap})

The broker runs on 127.0.0.1 (a free port) in a thread of its own with its own event loop, so
synchronous clients (confluent-kafka, kafka-python) and asyncio ones (aiokafka, kproto's) both
talk to it; its data directory is the test's ``tmp_path / "kafka"``. Settings are Kafka's
defaults except ``group_initial_rebalance_delay_ms=0`` (consumer groups form at once, as in
Kafka's own test harness); ``@pytest.mark.kafka_broker(num_partitions=3, ...)`` passes
:class:`~kproto.broker.Broker` settings to the fixture of one test.

``kafka_cluster`` is a :class:`ClusterThread`: three brokers and one controller (settings and
sizes through ``@pytest.mark.kafka_cluster(brokers=3, controllers=3, ...)``), with the fault
injection of :class:`~kproto.broker.Cluster` callable from the test's thread:

    def test_failover(kafka_cluster):
        kafka_cluster.create_topic("orders", partitions=3, replication_factor=3)
        kafka_cluster.stop(kafka_cluster.leader("orders", 0), abrupt=True)

``apache_kafka`` is Apache Kafka itself (:class:`kproto.testing.apache.ApacheKafka`, JVMs
started from the jars tools/setup.sh caches): one combined-mode node unless
``@pytest.mark.apache_kafka(nodes=3, controllers=1, config={...}, version="4.3.1")`` says
otherwise (``scram_users={"alice": "secret"}`` adds a SASL_PLAINTEXT listener with SCRAM,
``.sasl_bootstrap``); ``apache_kafka_cluster`` defaults to 3 brokers and 1 controller, with the
SCRAM user of :data:`APACHE_CLUSTER_SCRAM_USERS` (clients of its PLAINTEXT listener, ``.bootstrap``,
see no difference; SASL tests share the cluster instead of starting one of their own). Clusters are shared
by the tests of a session that ask for the same shape (after each test every node is running
again; use topic names of your own), ``fresh=True`` gives a test one of its own. Without Java
or the jars the tests are skipped, or fail when the environment variable ``CI`` is set.
``any_broker`` runs a test against both kproto's broker and Apache Kafka's single node.
On a failure the end of every Apache Kafka node's server log is added to the report.
"""
from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Generator, Iterator, Optional

import pytest

from kproto.broker import Broker, ControlHandle
from kproto.broker.cluster import Cluster
from kproto.broker.core import HookAction
from kproto.broker.cluster.replica import ReplicaConfig

if TYPE_CHECKING:  # imported on first use: ``python -m kproto.testing.apache`` runs it as __main__
    from kproto.testing.apache import ApacheKafka

__all__ = ["BrokerThread", "ClusterThread", "kafka_broker", "kafka_cluster", "apache_kafka",
           "apache_kafka_cluster", "apache_kafka_pool", "any_broker", "require_apache_kafka", "TEST_DEFAULTS", "CLUSTER_TEST_DEFAULTS",
           "APACHE_CLUSTER_SCRAM_USERS"]

#: What the fixture changes from Kafka's defaults.
#: Rebalances of both group protocols settle in about a second instead of seconds: no initial
#: rebalance delay, and KIP-848 and share-group members heartbeat every 500 ms (Kafka: 5 s);
#: their target assignment is still batched as Kafka 4.4 batches it
#: (``group.consumer.assignment.interval.ms``, 1 s, as in the Apache Kafka harness).
TEST_DEFAULTS: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0,
                                 "group_consumer_heartbeat_interval_ms": 500,
                                 "group_share_heartbeat_interval_ms": 500}


#: What the cluster fixture changes from Kafka's defaults, besides :data:`TEST_DEFAULTS`: a
#: silent broker is fenced after 2 s (Kafka: 9 s), heartbeats every 250 ms (Kafka: 2 s), a
#: follower is dropped from the ISR after 3 s behind (replica.lag.time.max.ms, Kafka: 30 s),
#: a request between brokers lost in a network cut is given up after 3 s (Kafka: 30 s).
CLUSTER_TEST_DEFAULTS: dict[str, Any] = {"broker_session_timeout_ms": 2000,
                                         "broker_heartbeat_interval_ms": 250,
                                         "replica_config": ReplicaConfig(replica_lag_time_max_ms=3000,
                                                                        request_timeout_ms=3000)}


#: The SCRAM user (name: password) of ``apache_kafka_cluster`` unless the marker names others:
#: its brokers have a SASL_PLAINTEXT listener beside PLAINTEXT (a port each, credentials
#: written at format time), so tests of SASL traffic share the session's cluster (three JVMs
#: and a controller cost tens of seconds to start) with the tests of PLAINTEXT clients.
APACHE_CLUSTER_SCRAM_USERS: dict[str, str] = {"alice": "alice-secret"}


class _LoopThread:
    """An event loop in a daemon thread, serving what ``make()`` starts on it."""

    _name = "kproto-loop"

    def __init__(self) -> None:
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None

    async def _make(self) -> Any:
        raise NotImplementedError

    def _start_loop(self, timeout: float) -> None:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._make())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name=self._name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError(f"{self._name} did not start")
        if failure:
            raise failure[0]

    def _call(self, coro: Any, timeout: float = 30.0) -> Any:
        assert self._loop is not None, "not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _stop_loop(self) -> None:
        """Stop the loop and its thread (again: nothing)."""
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self._thread = None


class BrokerThread(_LoopThread):
    """A :class:`~kproto.broker.Broker` served by an event loop in a daemon thread."""

    _name = "kproto-broker"

    def __init__(self, data_dir: str | os.PathLike[str], port: int = 0, **config: Any) -> None:
        super().__init__()
        self.data_dir = os.fspath(data_dir)
        self._port, self._config = port, config
        self.broker: Optional[Broker] = None

    async def _make(self) -> None:
        self.broker = await Broker(self.data_dir, self._port, **self._config).start()

    def start(self, timeout: float = 30.0) -> BrokerThread:
        self._start_loop(timeout)
        return self

    def stop(self, clean: bool = True) -> None:
        """Close the broker (``clean``: checkpoints and the clean-shutdown marker) and its loop."""
        if self.broker is not None and self._loop is not None:
            self._call(self.broker.close(clean))
        self._stop_loop()
        self.broker = None

    def restart(self) -> BrokerThread:
        """Stop cleanly and start again on the same directory (a new port)."""
        self.stop()
        return self.start()

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None, "the broker is not started"
        return self.broker.bootstrap

    def control(self, api_key: int, action: HookAction, *, times: Optional[int] = 1) -> ControlHandle:
        """A request hook (see :meth:`kproto.broker.Broker.control`), set from the test's thread."""
        broker = self.broker
        assert broker is not None, "the broker is not started"

        async def add() -> ControlHandle:
            return broker.control(api_key, action, times=times)

        handle: ControlHandle = self._call(add())
        return handle

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@pytest.fixture
def kafka_broker(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[BrokerThread]:
    """A started broker on 127.0.0.1 with ``.bootstrap``, its data in ``tmp_path / "kafka"``."""
    marker = request.node.get_closest_marker("kafka_broker")
    config = {**TEST_DEFAULTS, **(marker.kwargs if marker is not None else {})}
    with BrokerThread(tmp_path / "kafka", **config) as broker:
        yield broker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kafka_broker(**settings): settings of the kafka_broker fixture")
    config.addinivalue_line("markers", "kafka_cluster(**settings): sizes and settings of the "
                                       "kafka_cluster fixture")
    config.addinivalue_line("markers", "apache_kafka(nodes=1, controllers=0, config={}, version=, "
                                       "scram_users={}, listeners={}, system_properties={}, "
                                       "fresh=False): the Apache Kafka of the apache_kafka fixtures")


class ClusterThread(_LoopThread):
    """A :class:`~kproto.broker.Cluster` served by an event loop in a daemon thread; its
    methods are called from the test's thread."""

    _name = "kproto-cluster"

    def __init__(self, data_dir: str | os.PathLike[str], brokers: int = 3, controllers: int = 1,
                 **config: Any) -> None:
        super().__init__()
        self.data_dir = os.fspath(data_dir)
        self._args = (brokers, controllers)
        self._config = config
        self.cluster: Optional[Cluster] = None

    async def _make(self) -> None:
        cluster = Cluster(*self._args, data_dir=self.data_dir, **self._config)
        try:
            await cluster.start_all()
        except BaseException:
            await cluster.close()
            raise
        self.cluster = cluster

    def start_all(self, timeout: float = 60.0) -> ClusterThread:
        self._start_loop(timeout)
        return self

    def close(self) -> None:
        """Stop every node and the loop."""
        if self.cluster is not None and self._loop is not None:
            self._call(self.cluster.close(), 60)
        self._stop_loop()
        self.cluster = None

    def _c(self) -> Cluster:
        assert self.cluster is not None, "the cluster is not started"
        return self.cluster

    def _run(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` on the cluster's loop (the cluster is not thread-safe)."""
        async def call() -> Any:
            return fn(*args)
        return self._call(call())

    # the Cluster API, from the test's thread
    @property
    def bootstrap(self) -> str:
        return str(self._run(lambda: self._c().bootstrap))

    def leader(self, topic: str, partition: int) -> Optional[int]:
        return self._run(self._c().leader, topic, partition)

    def isr(self, topic: str, partition: int) -> list[int]:
        return list(self._run(self._c().isr, topic, partition))

    def active_controller(self) -> Optional[int]:
        return self._run(self._c().active_controller)

    def stop(self, node: int, abrupt: bool = False) -> None:
        self._call(self._c().stop(node, abrupt), 60)

    def start(self, node: int) -> None:
        self._call(self._c().start(node), 60)

    def partition_network(self, a: int, b: int) -> None:
        self._run(self._c().partition_network, a, b)

    def isolate(self, node: int) -> None:
        self._run(self._c().isolate, node)

    def slow(self, a: int, b: int, delay_ms: int) -> None:
        self._run(self._c().slow, a, b, delay_ms)

    def slow_disk(self, node: int, delay_ms: int) -> None:
        self._run(self._c().slow_disk, node, delay_ms)

    def cut_clients(self, node: int) -> None:
        self._run(self._c().cut_clients, node)

    def heal(self, node: Optional[int] = None) -> None:
        """Mend every cut and delay, or only those of ``node``."""
        self._run(self._c().heal, node)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = -1,
                     configs: Optional[dict[str, str]] = None, timeout: float = 30.0) -> None:
        self._call(self._c().create_topic(name, partitions, replication_factor, configs, timeout),
                   timeout + 5)

    def wait_for(self, condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
        """Wait until ``condition(cluster)`` (run on the cluster's loop) is true."""
        c = self._c()
        self._call(c.wait_for(lambda: condition(c), timeout, what), timeout + 5)

    def inspect(self, fn: Any) -> Any:
        """``fn(cluster)`` on the cluster's loop: read its state safely from the test."""
        return self._run(fn, self._c())

    def __enter__(self) -> ClusterThread:
        return self.start_all()

    def __exit__(self, *exc: Any) -> None:
        self.close()


@pytest.fixture
def kafka_cluster(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[ClusterThread]:
    """A started cluster (3 brokers, 1 controller unless the marker says otherwise), its data
    in ``tmp_path / "cluster"``."""
    marker = request.node.get_closest_marker("kafka_cluster")
    config = {**TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS, **(marker.kwargs if marker is not None else {})}
    with ClusterThread(tmp_path / "cluster", **config) as cluster:
        yield cluster


# -- Apache Kafka ---------------------------------------------------------------------------------
def require_apache_kafka(version: Optional[str] = None) -> None:
    """In a test: skip it when Apache Kafka ``version`` cannot run here (no Java, or its jars
    not fetched by ``tools/setup.sh``), with the reason; fail it instead under CI
    (``CI=true``), where it must run. ``version``: by default the newest this package runs."""
    from kproto.testing import apache
    version = version or apache.DEFAULT_VERSION
    reason = apache.unavailable(version)
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"Apache Kafka {version} is needed under CI: {reason}", pytrace=False)
    pytest.skip(reason)


class _ApachePool:
    """The session's shared Apache Kafka clusters, one per shape and settings. At most
    :attr:`keep` run at once (each is one JVM per node on what may be a small machine); the
    one used longest ago is stopped to make room."""

    keep = 2

    def __init__(self, base: Any) -> None:
        self._base = base
        self._running: dict[Any, ApacheKafka] = {}   # least recently used first

    def get(self, key: Any, make: Any) -> ApacheKafka:
        kafka = self._running.pop(key, None)
        if kafka is None:
            while len(self._running) >= self.keep:
                self._running.pop(next(iter(self._running))).close()
            kafka = make(self._base.mktemp("apache-kafka")).start_all()
        self._running[key] = kafka
        return kafka

    def restore(self, kafka: ApacheKafka) -> None:
        """Every node running again after a test stopped or paused some (or drop the cluster)."""
        try:
            for node in list(kafka.nodes):
                if kafka.nodes[node].paused:
                    kafka.resume(node)
            for node in list(kafka.nodes):
                if not kafka.running(node):
                    kafka.start(node)
            kafka.wait_ready()
        except Exception:
            for key, running in list(self._running.items()):
                if running is kafka:
                    del self._running[key]
            kafka.close()

    def close(self) -> None:
        while self._running:
            self._running.popitem()[1].close()


@pytest.fixture(scope="session")
def apache_kafka_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_ApachePool]:
    """The session's shared Apache Kafka clusters (what ``apache_kafka`` and
    ``apache_kafka_cluster`` take theirs from); stopped at the end of the session."""
    pool = _ApachePool(tmp_path_factory)
    yield pool
    pool.close()


def _apache(request: pytest.FixtureRequest, pool: _ApachePool, tmp_path_factory: pytest.TempPathFactory,
            nodes: int, controllers: int, scram_users: dict[str, str]) -> Generator[ApacheKafka, None, None]:
    marker = request.node.get_closest_marker("apache_kafka")
    kw = dict(marker.kwargs) if marker is not None else {}
    from kproto.testing import apache
    nodes, controllers = kw.pop("nodes", nodes), kw.pop("controllers", controllers)
    version, config = kw.pop("version", apache.DEFAULT_VERSION), dict(kw.pop("config", {}))
    fresh = kw.pop("fresh", False)
    scram_users = dict(kw.pop("scram_users", scram_users))
    listeners = dict(kw.pop("listeners", {}))
    system_properties = dict(kw.pop("system_properties", {}))
    if kw:
        raise TypeError(f"unknown apache_kafka marker arguments: {sorted(kw)}")
    require_apache_kafka(version)

    def make(path: Any) -> ApacheKafka:
        return apache.ApacheKafka(path, nodes, controllers, version=version, config=config,
                                  scram_users=scram_users, listeners=listeners,
                                  jvm_options=(*apache.JVM_OPTIONS, *(
                                      f"-D{k}={v}" for k, v in sorted(system_properties.items()))))

    if fresh:
        with make(tmp_path_factory.mktemp("apache-kafka")) as kafka:
            yield kafka
        return
    kafka = pool.get((nodes, controllers, version, tuple(sorted(config.items())),
                      tuple(sorted(scram_users.items())), tuple(sorted(listeners.items())),
                      tuple(sorted(system_properties.items()))), make)
    yield kafka
    pool.restore(kafka)


@pytest.fixture
def apache_kafka(request: pytest.FixtureRequest, apache_kafka_pool: _ApachePool,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """Apache Kafka on 127.0.0.1, shared by the session's tests of the same shape: one
    combined-mode node unless ``@pytest.mark.apache_kafka(nodes=, controllers=, ...)`` says."""
    yield from _apache(request, apache_kafka_pool, tmp_path_factory, 1, 0, {})


@pytest.fixture
def apache_kafka_cluster(request: pytest.FixtureRequest, apache_kafka_pool: _ApachePool,
                         tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """Apache Kafka with 3 brokers and 1 dedicated controller and a SASL_PLAINTEXT listener
    for :data:`APACHE_CLUSTER_SCRAM_USERS` (the ``apache_kafka`` marker changes them), shared
    as :func:`apache_kafka`."""
    yield from _apache(request, apache_kafka_pool, tmp_path_factory, 3, 1, APACHE_CLUSTER_SCRAM_USERS)


@pytest.fixture(params=["kproto", "apache"])
def any_broker(request: pytest.FixtureRequest) -> Any:
    """The test runs twice: against kproto's broker (the ``kafka_broker`` fixture) and against
    Apache Kafka's single node (``apache_kafka``). Both have ``.bootstrap``; tell them apart with
    ``request.node.callspec.params["any_broker"]`` or ``isinstance``."""
    return request.getfixturevalue("kafka_broker" if request.param == "kproto" else "apache_kafka")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failed test that used Apache Kafka gets the end of each node's server log in its report."""
    outcome = yield
    report = outcome.get_result()
    apache = sys.modules.get("kproto.testing.apache")
    if apache is None or not report.failed:
        return
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, apache.ApacheKafka):
            for node in value.nodes:
                report.sections.append((f"Apache Kafka node {node}: {value.log_path(node)} (end)",
                                        value.log_tail(node, 40)))
