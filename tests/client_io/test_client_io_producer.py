"""Producer error handling against the fake broker: retries keep their sequence numbers."""
from __future__ import annotations

import asyncio

import pytest

import kproto
from kproto.client.cluster import Cluster
from kproto.client.connection import BrokerError
from kproto.client.producer import Producer
from kproto.records import iter_batches

from client_io_fakebroker import FakeBroker


class ProduceBroker:
    """One broker, topic ``t`` with 2 partitions; Produce answers follow a script of error codes."""

    def __init__(self, script: list[int]) -> None:
        self.script = list(script)
        self.produced: list[tuple[int, int, int]] = []   # (partition, base_sequence, count)
        self.metadata_requests = 0
        self.offsets = {0: 0, 1: 0}
        self.port = 0

    def __call__(self, header, body):
        key = header.request_api_key
        if key == 3:
            self.metadata_requests += 1
            cls = kproto.response(3).cls
            return cls(brokers=[cls.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=self.port)],
                       controller_id=1, topics=[cls.MetadataResponseTopic(name="t", partitions=[
                           cls.MetadataResponsePartition(partition_index=p, leader_id=1) for p in (0, 1)])])
        if key == 22:
            return kproto.response(22).cls(producer_id=77, producer_epoch=2)
        if key == 0:
            cls = kproto.response(0).cls
            code = self.script.pop(0) if self.script else 0
            parts = []
            for td in body.topic_data:
                for pd in td.partition_data:
                    [batch] = iter_batches(pd.records)
                    assert (batch.producer_id, batch.producer_epoch) == (77, 2)
                    self.produced.append((pd.index, batch.base_sequence, batch.count))
                    base = self.offsets[pd.index]
                    if code == 0:
                        self.offsets[pd.index] += batch.count
                    parts.append(cls.PartitionProduceResponse(index=pd.index, error_code=code, base_offset=base))
            return cls(responses=[cls.TopicProduceResponse(name="t", partition_responses=parts)])
        return NotImplemented


def produce(script: list[int], rounds: list[int]):
    broker = ProduceBroker(script)

    async def main():
        async with FakeBroker(broker) as fb:
            broker.port = fb.port
            async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
                producer = await Producer(cluster, linger_ms=1000).start()
                results = []
                for count in rounds:
                    futs = [await producer.send("t", b"v", partition=0) for _ in range(count)]
                    await producer.flush()
                    results.append([f.result() if f.exception() is None else f.exception() for f in futs])
                return results

    return broker, asyncio.run(asyncio.wait_for(main(), 30))


def test_retriable_error_resends_same_sequence():
    broker, (first, second) = produce([6, 0, 0], [3, 2])  # NOT_LEADER_OR_FOLLOWER, then success
    assert broker.produced == [(0, 0, 3), (0, 0, 3), (0, 3, 2)]
    assert broker.metadata_requests >= 2  # the error made the producer refresh leadership
    assert [m.offset for m in first] == [0, 1, 2] and [m.offset for m in second] == [3, 4]


def test_duplicate_sequence_counts_as_written():
    broker, (first, second) = produce([46, 0], [2, 1])  # DUPLICATE_SEQUENCE_NUMBER
    assert broker.produced == [(0, 0, 2), (0, 2, 1)]
    assert all(m.partition == 0 for m in first + second)


def test_fatal_error_fails_the_records():
    broker, [[a, b]] = produce([10], [2])  # MESSAGE_TOO_LARGE
    assert isinstance(a, BrokerError) and a.code == 10 and b is a
    assert broker.produced == [(0, 0, 2)]


def test_retries_are_bounded():
    broker = ProduceBroker([6] * 50)

    async def main():
        async with FakeBroker(broker) as fb:
            broker.port = fb.port
            async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
                producer = await Producer(cluster, retries=2).start()
                fut = await producer.send("t", b"v", partition=1)
                await producer.flush()
                with pytest.raises(BrokerError) as e:
                    fut.result()
                assert e.value.code == 6  # the last error seen, NOT_LEADER_OR_FOLLOWER

    asyncio.run(asyncio.wait_for(main(), 30))
    assert broker.produced == [(1, 0, 1)] * 3  # the first attempt and two retries
