"""Fetch answers whose records go out from their segment files (sendfile) on a plaintext
connection: the bytes on the wire are the copying path's, answers keep their order, a slow
reader blocks nobody, and no descriptor is left open."""
from __future__ import annotations

import asyncio
import os
import socket
import struct
import time

import pytest

import kproto
from kproto.broker import Broker
from kproto.broker.core import MIN_FILE_REGION
from kproto.broker.log import FileRegion
from kproto.broker.timer import FakeClock
from kproto.framing import RequestHeader, encode_request
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client, Recorder, batch, fake_core
from test_broker_core import create, produce

VALUE = bytes(range(256)) * 4  # 1 KiB


class FileChannel(Recorder):
    """A channel that takes answers with file regions, as a plaintext socket does."""

    sends_files = True

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[list] = []

    def respond_parts(self, parts: list) -> None:
        self.parts.append(parts)
        self.frames.append(b"".join(bytes(p) for p in parts))
        for p in parts:
            if isinstance(p, FileRegion):
                p.close()


def fill(client: Client, topic: str, partitions: int, batches: int, per_batch: int) -> None:
    create(client, topic, partitions)
    for p in range(partitions):
        for _ in range(batches):
            r = produce(client, topic, p, batch([VALUE] * per_batch))
            assert r.responses[0].partition_responses[0].error_code == 0


def fetch_all(topic: str, partitions: int, max_bytes: int, version: int):
    req = kproto.request(1).cls
    return req(max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, session_id=0, session_epoch=-1,
               isolation_level=0, topics=[req.FetchTopic(topic=topic, topic_id=kproto.Uuid(), partitions=[
                   req.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=max_bytes)
                   for p in range(partitions)])])


@pytest.mark.parametrize("version", [4, 12])
def test_a_fetch_answer_with_file_regions_has_the_copying_answers_bytes(tmp_path, version):
    core = fake_core(tmp_path, FakeClock())
    client = Client(core)
    # partition 0: 200 KiB (sent from its file), partition 1: one small batch (copied)
    fill(client, "t", 2, 1, 1)
    for _ in range(3):
        produce(client, "t", 0, batch([VALUE] * 70))
    body = fetch_all("t", 2, 1 << 20, version)
    copied = client.answer(client.send(K.FETCH, version, body))
    plain = client.channel.frames[-1]
    client.channel = FileChannel()
    client.send(K.FETCH, version, body)
    got = client.channel.frames[-1]
    assert got[:4] + got[8:] == plain[:4] + plain[8:]  # byte for byte, but the correlation id
    (parts,) = client.channel.parts
    regions = [p for p in parts if isinstance(p, FileRegion)]
    assert [len(r) for r in regions] == [len(copied.responses[0].partitions[0].records)]
    assert len(regions[0]) >= MIN_FILE_REGION > len(copied.responses[0].partitions[1].records)


def test_a_client_with_quotas_keeps_the_copying_path(tmp_path):
    core = fake_core(tmp_path, FakeClock())
    client = Client(core)
    fill(client, "q", 1, 3, 70)
    core.apply_client_quotas([((("client-id", "test"),), "consumer_byte_rate", 1e9)])
    client.channel = FileChannel()
    client.send(K.FETCH, 12, fetch_all("q", 1, 1 << 20, 12))
    assert client.channel.parts == [] and len(client.channel.frames[-1]) > MIN_FILE_REGION  # copied


def test_read_region_is_reads_bytes_and_outlives_its_segment(tmp_path):
    core = fake_core(tmp_path, FakeClock())
    client = Client(core)
    fill(client, "r", 1, 3, 70)
    lg = core.leader_log("r", 0)
    region = lg.read_region(0, 1 << 20, True, None, MIN_FILE_REGION)
    assert isinstance(region, FileRegion) and bytes(region) == lg.read(0, 1 << 20, True, None)
    small = lg.read_region(0, 1 << 20, True, None, 1 << 30)
    assert type(small) is bytes and small == bytes(region)
    expect = bytes(region)
    core.close()  # the segment's own descriptor is closed: the region's duplicate is not
    assert bytes(region) == expect
    fd = region.fd
    region.close()
    with pytest.raises(OSError):
        os.fstat(fd)


# ---------------------------------------------------------------- over a socket


def frame_of(api_key: int, version: int, body, cid: int) -> bytes:
    return encode_request(RequestHeader(request_api_key=api_key, request_api_version=version,
                                        correlation_id=cid, client_id="test"), body)


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = await reader.readexactly(4)
    return size + await reader.readexactly(struct.unpack(">i", size)[0])


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fill_broker(broker: Broker, topic: str, partitions: int, batches: int) -> Client:
    client = Client(broker.core)
    fill(client, topic, partitions, batches, 900)  # ~0.9 MB batches
    return client


def copied_answer(broker: Broker, frame: bytes) -> bytes:
    """The same request's answer through the copying path (a channel without sendfile)."""
    rec = Recorder()
    broker.core.handle(rec, frame[4:])
    return rec.frames[0]


def test_fetch_over_a_plaintext_socket_sends_records_with_sendfile_byte_for_byte(tmp_path, monkeypatch):
    calls = []
    real = os.sendfile

    def spy(*args):
        calls.append(args[3])
        return real(*args)

    monkeypatch.setattr(os, "sendfile", spy)

    async def main():
        async with Broker(tmp_path / "data") as broker:
            fill_broker(broker, "s", 3, 2)
            fetch = frame_of(K.FETCH, 12, fetch_all("s", 3, 16 << 20, 12), 7)
            expect = copied_answer(broker, fetch)
            fds = open_fds()  # the segments' own descriptors are open now
            reader, writer = await asyncio.open_connection(broker.host, broker.port)
            api = frame_of(K.API_VERSIONS, 3, kproto.request(18).cls(
                client_software_name="t", client_software_version="1"), 8)
            writer.write(fetch + api + fetch[:8] + b"\x00\x00\x00\x09" + fetch[12:])  # pipelined
            got = [await asyncio.wait_for(read_frame(reader), 10) for _ in range(3)]
            assert got[0] == expect and len(got[0]) > 5_000_000
            assert got[1][4:8] == b"\x00\x00\x00\x08"  # in order, after the whole fetch answer
            assert got[2][4:8] == b"\x00\x00\x00\x09" and got[2][8:] == got[0][8:]
            assert len(calls) >= 6  # two regions of ~1.8 MB per partition and answer
            writer.close()
            await writer.wait_closed()
            await asyncio.sleep(0.1)
            assert open_fds() <= fds  # the regions' descriptors are closed

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_slow_reader_blocks_no_one_and_gets_its_answer_whole(tmp_path):
    async def main():
        async with Broker(tmp_path / "data") as broker:
            fill_broker(broker, "slow", 2, 10)  # ~18 MB, past any socket buffer
            fetch = frame_of(K.FETCH, 12, fetch_all("slow", 2, 32 << 20, 12), 1)
            expect = copied_answer(broker, fetch)
            fds = open_fds()
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((broker.host, broker.port))
            sock.setblocking(False)
            reader, writer = await asyncio.open_connection(sock=sock)
            writer.write(fetch)
            await writer.drain()
            await asyncio.sleep(0.3)  # the broker is stuck on this reader's window
            conn = next(c for c in broker._connections if c.sending is not None)
            assert not conn.sending.done()
            # another client is served meanwhile
            r2, w2 = await asyncio.open_connection(broker.host, broker.port)
            t0 = time.monotonic()
            w2.write(frame_of(K.API_VERSIONS, 3, kproto.request(18).cls(
                client_software_name="t", client_software_version="1"), 5))
            assert (await asyncio.wait_for(read_frame(r2), 5))[4:8] == b"\x00\x00\x00\x05"
            assert time.monotonic() - t0 < 1.0
            assert await asyncio.wait_for(read_frame(reader), 30) == expect
            # a reader that goes away mid-answer: its connection ends, its regions are closed
            writer.write(fetch)
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.transport.abort()
            w2.close()
            for _ in range(50):
                await asyncio.sleep(0.05)
                if not broker._connections:
                    break
            assert not broker._connections
            assert open_fds() <= fds

    asyncio.run(asyncio.wait_for(main(), 90))


def test_a_tls_connection_copies_records_and_answers_the_same_bytes(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    from kproto.testing.tls import TestCA

    ca = TestCA(tmp_path / "ca")
    server = ca.issue("CN=broker")
    calls = []
    real = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda *a: calls.append(a) or real(*a))

    async def main():
        async with Broker(tmp_path / "data", ssl_context=ca.server_context(server)) as broker:
            fill_broker(broker, "tls", 2, 1)
            fetch = frame_of(K.FETCH, 12, fetch_all("tls", 2, 16 << 20, 12), 3)
            expect = copied_answer(broker, fetch)
            reader, writer = await asyncio.open_connection(broker.host, broker.port, ssl=ca.client_context())
            writer.write(fetch)
            assert await asyncio.wait_for(read_frame(reader), 20) == expect and len(expect) > 1_000_000
            assert not calls and not any(c.sends_files for c in broker._connections)
            writer.close()

    asyncio.run(asyncio.wait_for(main(), 60))
