"""A Kafka broker for tests: pytest fixtures over :class:`kproto.broker.Broker`.

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
"""
from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Iterator, Optional

import pytest

from kproto.broker import Broker, ControlHandle
from kproto.broker.core import HookAction

__all__ = ["BrokerThread", "kafka_broker", "TEST_DEFAULTS"]

#: What the fixture changes from Kafka's defaults.
#: Rebalances of both group protocols settle in well under a second instead of seconds:
#: no initial rebalance delay, and KIP-848 members heartbeat every 500 ms (Kafka: 5 s).
TEST_DEFAULTS: dict[str, Any] = {"group_initial_rebalance_delay_ms": 0,
                                 "group_consumer_heartbeat_interval_ms": 500}


class BrokerThread:
    """A :class:`~kproto.broker.Broker` served by an event loop in a daemon thread."""

    def __init__(self, data_dir: str | os.PathLike[str], port: int = 0, **config: Any) -> None:
        self.data_dir = os.fspath(data_dir)
        self._port, self._config = port, config
        self.broker: Optional[Broker] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None

    def start(self, timeout: float = 30.0) -> BrokerThread:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self.broker = loop.run_until_complete(
                    Broker(self.data_dir, self._port, **self._config).start())
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

        self._thread = threading.Thread(target=serve, name="kproto-broker", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("the broker did not start")
        if failure:
            raise failure[0]
        return self

    def _call(self, coro: Any, timeout: float = 30.0) -> Any:
        assert self._loop is not None, "the broker is not started"
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self, clean: bool = True) -> None:
        """Close the broker (``clean``: checkpoints and the clean-shutdown marker) and its loop."""
        if self.broker is not None and self._loop is not None:
            self._call(self.broker.close(clean))
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(30)
        self.broker, self._thread = None, None

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
