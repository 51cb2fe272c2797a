"""The broker's receive path: each frame read by the kernel straight into its own buffer, frames
split across reads or sharing one, and reading paused only while a request is in flight."""
from __future__ import annotations

import asyncio
import socket
from asyncio import selector_events

import pytest

import kproto
from kproto.broker import Broker
from kproto.framing import RequestHeader, decode_response, encode_request


def api_versions(cid: int, pad: int = 0) -> bytes:
    """An ApiVersions v3 frame, ``pad`` zero bytes after its body (a broker reads past them)."""
    header = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=cid, client_id="t")
    body = encode_request(header, kproto.request(18).cls(client_software_name="t",
                                                         client_software_version="1"))[4:] + bytes(pad)
    return len(body).to_bytes(4, "big") + body


async def answers(reader: asyncio.StreamReader, n: int) -> list[int]:
    got = []
    for _ in range(n):
        size = int.from_bytes(await reader.readexactly(4), "big")
        header, body = decode_response(await reader.readexactly(size), 18, 3, size_prefix=False)
        assert body.error_code == 0
        got.append(header.correlation_id)
    return got


def test_a_large_frame_is_read_without_pausing_the_transport(tmp_path, monkeypatch):
    """A 300 KB frame and the small one after it, in one write: both read with the transport
    never paused (a stream reader's 64 KiB limit paused it every 128 KiB)."""
    pauses = []
    pause = selector_events._SelectorSocketTransport.pause_reading

    def counted(self):
        pauses.append(self)
        pause(self)
    monkeypatch.setattr(selector_events._SelectorSocketTransport, "pause_reading", counted)

    async def main():
        async with Broker(tmp_path / "d") as broker:
            reader, writer = await asyncio.open_connection(broker.host, broker.port)
            writer.write(api_versions(1))
            assert await answers(reader, 1) == [1]  # connected, admitted, reading
            pauses.clear()
            writer.write(api_versions(2, pad=300_000) + api_versions(3))
            assert await answers(reader, 2) == [2, 3]
            assert pauses == []
            writer.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_frames_split_byte_by_byte_or_sharing_a_write_are_answered_in_order(tmp_path):
    async def main():
        async with Broker(tmp_path / "d") as broker:
            sock = socket.create_connection((broker.host, broker.port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=sock)
            frame = api_versions(1, pad=3)
            for i in range(len(frame)):  # a byte per segment: the size prefix split too
                writer.write(frame[i:i + 1])
                await writer.drain()
                await asyncio.sleep(0.002)
            assert await answers(reader, 1) == [1]
            # five frames in three writes, three of them longer than what is read at once
            # between frames: the fourth's split in its size prefix and its body
            frames = [api_versions(cid, pad=cid * 5000) for cid in range(2, 7)]
            burst, at = b"".join(frames), sum(map(len, frames[:3]))
            for part in (burst[:at + 2], burst[at + 2:at + 100], burst[at + 100:]):
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(0.01)
            assert await answers(reader, 5) == [2, 3, 4, 5, 6]
            # an empty frame: no header, the connection is closed (not left waiting)
            writer.write(bytes(4))
            assert await asyncio.wait_for(reader.read(), 5) == b""
            writer.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_frames_read_together_wait_for_the_request_budget(tmp_path):
    """queued.max.requests=1: while one connection's large frame is being read, another's two
    small frames, written at once, wait for the budget; then both are answered, in order."""
    async def main():
        async with Broker(tmp_path / "d", queued_max_requests=1) as broker:
            a = await asyncio.open_connection(broker.host, broker.port)
            b = await asyncio.open_connection(broker.host, broker.port)
            big = api_versions(1, pad=300_000)
            a[1].write(big[:1000])  # the budget is held until the frame is read whole
            await asyncio.sleep(0.2)
            b[1].write(api_versions(2) + api_versions(3))
            with pytest.raises(asyncio.TimeoutError):  # not answered meanwhile
                await asyncio.wait_for(b[0].readexactly(1), 0.3)
            assert broker._queue.requests == 1
            a[1].write(big[1000:])
            assert await answers(a[0], 1) == [1]
            assert await answers(b[0], 2) == [2, 3]
            assert broker._queue.peak_requests == 1 and broker._queue.requests == 0
            a[1].close()
            b[1].close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_tls_listener_reads_large_small_and_split_frames(tmp_path):
    """The same reads through TLS (its transport fills the receiver's buffers too)."""
    pytest.importorskip("cryptography")
    from kproto.testing.tls import TestCA

    ca = TestCA(tmp_path / "ca")

    async def main():
        async with Broker(tmp_path / "d", ssl_context=ca.server_context(ca.issue("CN=broker"))) as broker:
            reader, writer = await asyncio.open_connection(broker.host, broker.port, ssl=ca.client_context())
            frames = [api_versions(1), api_versions(2, pad=300_000), api_versions(3), api_versions(4, pad=20_000)]
            burst = b"".join(frames)
            for at in range(0, len(burst), 7001):  # TLS records cut across frames and prefixes
                writer.write(burst[at:at + 7001])
                await writer.drain()
            assert await answers(reader, 4) == [1, 2, 3, 4]
            writer.close()

    asyncio.run(asyncio.wait_for(main(), 30))
