"""The consumer's fetching through KIP-227 sessions, against kproto's own FetchSessionCache.

Neither interop peer grants sessions (see test_client_io_interop.py::
test_fetch_sessions_not_granted_by_peer), so the broker here is the fake broker serving Fetch
through :class:`kproto.fetch_session.FetchSessionCache` over in-memory logs of real batches.
"""
from __future__ import annotations

import asyncio
import time

import pytest

import kproto
from kproto.client.cluster import Cluster
from kproto.client.consumer import Consumer
from kproto.codecs.primitives import Uuid
from kproto.fetch_session import FetchSessionCache
from kproto.fetch_session.messages import (build_fetch_response, request_fetch_data, request_metadata,
                                           request_replica_id)
from kproto.records import RecordBatchBuilder

from client_io_fakebroker import FakeBroker, metadata_response

TOPIC = "sessions"
TOPIC_ID = Uuid(bytes(range(1, 17)))
PARTITIONS = 3


class SessionBroker:
    """Metadata, ListOffsets and Fetch for one topic; Fetch goes through a FetchSessionCache."""

    def __init__(self) -> None:
        self.cache = FetchSessionCache()
        self.logs: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        self.fetches: list[tuple[int, object, object]] = []  # (version, request, response)
        self.port = 0

    def append(self, partition: int, values: list[bytes]) -> None:
        log = self.logs[partition]
        base = self.hw(partition)
        b = RecordBatchBuilder(base_offset=base, compression="zstd")
        for v in values:
            b.append(int(time.time() * 1000), None, v)
        log.append((base, b.build()))

    def hw(self, partition: int) -> int:
        log = self.logs[partition]
        return log[-1][0] + len(self._count(log[-1][1])) if log else 0

    @staticmethod
    def _count(batch: bytes) -> range:
        return range(int.from_bytes(batch[57:61], "big"))

    def __call__(self, header, body):
        key, version = header.request_api_key, header.request_api_version
        if key == 3:
            return metadata_response(self.port, {TOPIC: (TOPIC_ID, PARTITIONS)})
        if key == 2:
            cls = kproto.response(2).cls
            return cls(topics=[cls.ListOffsetsTopicResponse(name=t.name, partitions=[
                cls.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                 offset=0 if p.timestamp == -2 else self.hw(p.partition_index))
                for p in t.partitions]) for t in body.topics])
        if key == 1:
            return self.fetch(body, version)
        return NotImplemented

    def fetch(self, request, version):
        names = {TOPIC_ID: TOPIC} if version >= 13 else {}
        fetch_data, to_forget = request_fetch_data(request, version, names)
        ctx = self.cache.new_context(version, request_metadata(request), request_replica_id(request, version) >= 0,
                                     fetch_data, to_forget, names, int(time.monotonic() * 1000))
        PD = kproto.response(1).cls.PartitionData
        updates = {}
        for tip, data in ctx.partitions():
            hw = self.hw(tip.partition)
            chunks = [batch for base, batch in self.logs[tip.partition]
                      if base + len(self._count(batch)) > data.fetch_offset]
            updates[tip] = PD(high_watermark=hw, last_stable_offset=hw, log_start_offset=0,
                              records=b"".join(chunks))
        resp = build_fetch_response(ctx.update_and_generate_response_data(updates), version)
        self.fetches.append((version, request, resp))
        return resp


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


@pytest.mark.parametrize("fetch_version", [12, 17, None])
def test_consumer_uses_incremental_fetch_sessions(fetch_version):
    """At v12 (names), v17 (ids) and uncapped: the client's top (Fetch 18 with 4.3.1's schemas)."""
    broker = SessionBroker()
    broker.append(0, [b"a0", b"a1", b"a2"])

    async def main():
        async with FakeBroker(broker) as fb:
            broker.port = fb.port
            caps = {1: fetch_version} if fetch_version is not None else None
            async with Cluster(f"127.0.0.1:{fb.port}", version_caps=caps) as cluster:
                consumer = await Consumer(cluster, [TOPIC], fetch_max_wait_ms=10).start()
                got = []
                got += await consumer.getmany(0.1)   # full request opens the session
                got += await consumer.getmany(0.1)   # incremental: offset of partition 0 moved
                got += await consumer.getmany(0.1)   # incremental: nothing changed
                broker.append(2, [b"c0", b"c1"])
                got += await consumer.getmany(0.1)   # incremental: partition 2 has data
                got += await consumer.getmany(0.1)
                # the broker forgets the session (eviction): the client falls back to a full request
                broker.cache.remove(consumer.sessions[1].session_id)
                broker.append(1, [b"b0"])
                for _ in range(3):
                    got += await consumer.getmany(0.1)
                return got

    got = run(main())
    assert sorted((r.partition, r.offset, r.value) for r in got) == [
        (0, 0, b"a0"), (0, 1, b"a1"), (0, 2, b"a2"), (1, 0, b"b0"), (2, 0, b"c0"), (2, 1, b"c1")]
    versions = {v for v, _, _ in broker.fetches}
    assert versions == {fetch_version or min(18, kproto.request(1).valid_versions[-1])}
    reqs = [(r.session_id, r.session_epoch, sorted(p.partition for t in r.topics for p in t.partitions))
            for _, r, _ in broker.fetches]
    resps = [(r.error_code, r.session_id, sorted(p.partition_index for t in r.responses for p in t.partitions))
             for _, _, r in broker.fetches]
    sid = resps[0][1]
    assert sid != 0
    # 1: full request with every partition; the full response carries them all
    assert reqs[0] == (0, 0, [0, 1, 2]) and resps[0] == (0, sid, [0, 1, 2])
    # 2: partition 0's fetch offset moved, so only it is sent; nothing new to answer
    assert reqs[1] == (sid, 1, [0]) and resps[1] == (0, sid, [])
    # 3: nothing changed: an empty incremental request
    assert reqs[2] == (sid, 2, []) and resps[2] == (0, sid, [])
    # 4: the broker answers only partition 2, which has new records
    assert reqs[3] == (sid, 3, []) and resps[3] == (0, sid, [2])
    assert reqs[4] == (sid, 4, [2])
    # 6: the session is gone: FETCH_SESSION_ID_NOT_FOUND, then a full request opens a new one
    assert reqs[5][:2] == (sid, 5) and resps[5][0] == 70
    assert reqs[6] == (0, 0, [0, 1, 2]) and resps[6][0] == 0 and resps[6][1] not in (0, sid)
    assert reqs[7][1] == 1  # and the consumer is incremental again
