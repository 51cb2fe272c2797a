"""Limits of the socket layer: socket.request.max.bytes refuses a larger frame and closes only
its connection; a request the core cannot serve does not stop the broker."""
from __future__ import annotations

import asyncio

import kproto
from kproto.broker import Broker
from kproto.broker.configs import BrokerConfig
from kproto.framing import RequestHeader, decode_response, encode_request


def api_versions_frame(cid: int) -> bytes:
    header = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=cid, client_id="t")
    return encode_request(header, kproto.request(18).cls(client_software_name="t",
                                                         client_software_version="1"))


async def ask(reader, writer, cid):
    writer.write(api_versions_frame(cid))
    size = int.from_bytes(await reader.readexactly(4), "big")
    header, body = decode_response(await reader.readexactly(size), 18, 3, size_prefix=False)
    return header.correlation_id, body.error_code


def test_a_frame_over_socket_request_max_bytes_closes_only_its_connection(tmp_path):
    async def main():
        async with Broker(tmp_path / "d", socket_request_max_bytes=1000) as broker:
            good = await asyncio.open_connection(broker.host, broker.port)
            bad = await asyncio.open_connection(broker.host, broker.port)
            assert await ask(*good, 1) == (1, 0)
            # 1001 bytes announced: refused from the size prefix alone, nothing more is read
            bad[1].write((1001).to_bytes(4, "big") + b"\x00" * 16)
            assert await asyncio.wait_for(bad[0].read(), 5) == b""
            # exactly the limit is fine; the other connection keeps being served
            frame = api_versions_frame(2)
            padded = frame[4:] + b"\x00" * (1000 - len(frame) + 4)  # trailing bytes are tolerated
            good[1].write(len(padded).to_bytes(4, "big") + padded)
            size = int.from_bytes(await good[0].readexactly(4), "big")
            assert decode_response(await good[0].readexactly(size), 18, 3, size_prefix=False)[0].correlation_id == 2
            assert await ask(*good, 3) == (3, 0)
            good[1].close()
            bad[1].close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_an_error_inside_the_core_closes_the_connection_and_the_broker_serves_on(tmp_path):
    async def main():
        async with Broker(tmp_path / "d") as broker:
            def boom(header, body):
                raise RuntimeError("a bug")
            broker.control(18, boom)
            first = await asyncio.open_connection(broker.host, broker.port)
            first[1].write(api_versions_frame(1))
            assert await asyncio.wait_for(first[0].read(), 5) == b""
            second = await asyncio.open_connection(broker.host, broker.port)
            broker.core.hooks.clear()
            assert await ask(*second, 2) == (2, 0)
            second[1].close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_test_hook_that_raises_closes_its_connection_the_broker_keeps_serving(tmp_path):
    from kproto.broker.core import BrokerCore
    closed = []

    class Channel:
        def respond(self, frame):
            raise AssertionError("answered")

        def close(self, reason):
            closed.append(reason)

    core = BrokerCore(str(tmp_path / "sansio"), BrokerConfig(port=9092))
    core.control(18, lambda h, b: 1 / 0)
    core.handle(Channel(), api_versions_frame(1)[4:])  # sans-I/O: the core closes it itself
    assert closed == ["a test hook on API key 18 raised"]
    core.close()

    async def main():
        async with Broker(tmp_path / "d") as broker:
            def boom(header, body):
                raise RuntimeError("a bug in the test's hook")
            handle = broker.control(18, boom)
            victim = await asyncio.open_connection(broker.host, broker.port)
            victim[1].write(api_versions_frame(1))
            # closed at once, not left unanswered until the client's timeout
            assert await asyncio.wait_for(victim[0].read(), 5) == b""
            handle.remove()
            other = await asyncio.open_connection(broker.host, broker.port)
            assert await ask(*other, 2) == (2, 0)
            # a hook that lets some requests through and raises on another
            broker.control(18, lambda h, b: (_ for _ in ()).throw(RuntimeError("late")) if h.correlation_id == 4 else None,
                           times=None)
            assert await ask(*other, 3) == (3, 0)
            other[1].write(api_versions_frame(4))
            assert await asyncio.wait_for(other[0].read(), 5) == b""
    asyncio.run(main())


def test_queue_caps_bound_the_bytes_held_and_every_connection_is_answered(tmp_path):
    """queued.max.request.bytes and queued.max.requests across connections: twenty
    connections each send three 300 KB requests at once; at most 1 MB (three frames) and two
    requests are held at any time, the others wait unread, and every request is answered."""
    frame = api_versions_frame(0)
    pad = 300_000

    def big(cid):
        body = api_versions_frame(cid)[4:] + b"\x00" * pad  # trailing bytes are tolerated
        return len(body).to_bytes(4, "big") + body

    async def client(broker, n):
        reader, writer = await asyncio.open_connection(broker.host, broker.port)
        for k in range(3):  # pipelined: all three written before any answer is read
            writer.write(big(n * 10 + k))
        got = []
        for _ in range(3):
            size = int.from_bytes(await reader.readexactly(4), "big")
            got.append(decode_response(await reader.readexactly(size), 18, 3, size_prefix=False)[0].correlation_id)
        writer.close()
        return got

    async def main():
        async with Broker(tmp_path / "d", queued_max_request_bytes=1_000_000,
                          queued_max_requests=2) as broker:
            got = await asyncio.wait_for(asyncio.gather(*(client(broker, n) for n in range(20))), 60)
            assert got == [[n * 10, n * 10 + 1, n * 10 + 2] for n in range(20)]
            q = broker._queue
            assert q.peak_requests == 2 and q.peak_bytes <= 1_000_000
            assert q.requests == 0 and q.bytes == 0
        async with Broker(tmp_path / "e", queued_max_request_bytes=100_000) as broker:
            # a frame larger than the whole budget still gets through, alone
            assert await asyncio.wait_for(client(broker, 7), 20) == [70, 71, 72]
            assert broker._queue.peak_bytes == len(frame) - 4 + pad

    asyncio.run(main())
