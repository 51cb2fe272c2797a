"""The warning of a broker whose event loop is blocked while a client waits for it (a blocking
client called on the loop's thread deadlocks with the broker)."""
from __future__ import annotations

import asyncio
import logging
import socket
import time
import warnings

from kproto.broker import Broker

LIMIT_S = 0.5


def stalls(tmp_path, caplog, *, connect_first: bool, block: bool, client: bool = True,
           limit: float | None = LIMIT_S) -> list[str]:
    """The stall warnings of a broker whose loop (blocked or not) a raw client waits for."""

    async def main() -> None:
        async with Broker(tmp_path / "data", stall_warning_s=limit) as broker:
            sock = None
            if client:
                sock = socket.create_connection((broker.host, broker.port))
                if connect_first:
                    await asyncio.sleep(0.2)  # accepted: the request waits on an open connection
                sock.sendall(b"\x00\x00\x00\x05hello")  # a frame for the broker to read
            if block:
                time.sleep(4 * limit if limit else 2.0)  # what producer.flush() would do
            else:
                await asyncio.sleep(4 * LIMIT_S)
            if sock is not None:
                sock.close()

    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        asyncio.run(asyncio.wait_for(main(), 30))
    found = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)
             and "has not run" in str(w.message)]
    logged = [r.getMessage() for r in caplog.records if "has not run" in r.getMessage()]
    assert found == logged
    return found


def test_a_blocked_loop_with_a_connection_waiting_to_be_accepted_warns_once(tmp_path, caplog):
    found = stalls(tmp_path, caplog, connect_first=False, block=True)
    assert len(found) == 1
    assert "BrokerThread" in found[0] and "asyncio.to_thread" in found[0]
    assert "kafka_broker" in found[0] and "Broker(127.0.0.1:" in found[0]


def test_a_blocked_loop_with_an_unread_request_warns(tmp_path, caplog):
    assert len(stalls(tmp_path, caplog, connect_first=True, block=True)) == 1


def test_a_loop_that_runs_does_not_warn(tmp_path, caplog):
    assert stalls(tmp_path, caplog, connect_first=True, block=False) == []


def test_a_blocked_loop_nobody_waits_for_does_not_warn(tmp_path, caplog):
    assert stalls(tmp_path, caplog, connect_first=False, block=True, client=False) == []


def test_the_watchdog_can_be_turned_off(tmp_path, caplog):
    assert stalls(tmp_path, caplog, connect_first=False, block=True, limit=None) == []


def test_confluent_kafka_flush_on_the_loop_thread_warns(tmp_path, caplog):
    confluent_kafka = __import__("pytest").importorskip("confluent_kafka")

    async def main() -> None:
        async with Broker(tmp_path / "data", stall_warning_s=LIMIT_S) as broker:
            producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
            producer.produce("t", b"v")
            producer.flush(4 * LIMIT_S)  # the mistake: blocks the loop the broker needs
            await asyncio.to_thread(producer.flush, 10)  # the fix: the record gets out
            assert len(producer) == 0

    with warnings.catch_warnings(record=True) as seen, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        asyncio.run(asyncio.wait_for(main(), 30))
    assert [w for w in seen if "has not run" in str(w.message)]
