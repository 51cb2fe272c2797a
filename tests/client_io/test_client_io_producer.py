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


class TxnProduceBroker(ProduceBroker):
    """ProduceBroker as its own transaction coordinator; AddPartitionsToTxn and EndTxn answer
    from scripts of error codes, and every transactional request is logged."""

    def __init__(self, script=(), add_script=(), end_script=()) -> None:
        super().__init__(list(script))
        self.add_script, self.end_script = list(add_script), list(end_script)
        self.log: list[tuple] = []

    def __call__(self, header, body):
        key = header.request_api_key
        if key == 10:
            self.log.append(("FindCoordinator", body.key_type))
            cls = kproto.response(10).cls
            return cls(coordinators=[cls.Coordinator(key=k, node_id=1, host="127.0.0.1", port=self.port)
                                     for k in body.coordinator_keys])
        if key == 22:
            self.log.append(("InitProducerId", body.transactional_id))
        if key == 24:
            parts = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
            self.log.append(("AddPartitionsToTxn", parts))
            code = self.add_script.pop(0) if self.add_script else 0
            cls = kproto.response(24).cls
            return cls(results_by_topic_v3_and_below=[cls.AddPartitionsToTxnTopicResult(
                name=t.name, results_by_partition=[cls.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=code) for p in t.partitions])
                for t in body.v3_and_below_topics])
        if key == 26:
            self.log.append(("EndTxn", body.committed))
            return kproto.response(26).cls(error_code=self.end_script.pop(0) if self.end_script else 0)
        if key == 0:
            batches = [b for td in body.topic_data for pd in td.partition_data
                       for b in iter_batches(pd.records)]
            self.log.append(("Produce", body.transactional_id, all(b.is_transactional for b in batches)))
        return super().__call__(header, body)


def run_txn(broker, steps):
    async def main():
        async with FakeBroker(broker) as fb:
            broker.port = fb.port
            async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
                producer = await Producer(cluster, transactional_id="tx", linger_ms=1000).start()
                return await steps(producer)

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_transaction_request_sequence_and_retried_add_partitions():
    broker = TxnProduceBroker(add_script=[51])  # CONCURRENT_TRANSACTIONS once

    async def steps(p):
        p.begin_transaction()
        futs = [await p.send("t", b"v", partition=part) for part in (1, 0, 1)]
        await p.commit_transaction()
        return [f.result().offset for f in futs]

    assert run_txn(broker, steps) == [0, 0, 1]
    assert broker.log == [("FindCoordinator", 1), ("InitProducerId", "tx"),
                          ("AddPartitionsToTxn", [("t", 0), ("t", 1)]),
                          ("AddPartitionsToTxn", [("t", 0), ("t", 1)]),
                          ("Produce", "tx", True), ("EndTxn", True)]


def test_a_failed_produce_forces_an_abort_and_abort_drops_what_is_queued():
    broker = TxnProduceBroker(script=[10])  # MESSAGE_TOO_LARGE

    async def steps(p):
        p.begin_transaction()
        bad = await p.send("t", b"v", partition=0)
        await p.flush()
        with pytest.raises(kproto.KprotoError, match="cannot commit: the transaction failed earlier"):
            await p.commit_transaction()
        await p.abort_transaction()
        p.begin_transaction()
        queued = await p.send("t", b"w", partition=1)  # lingering, never sent
        await p.abort_transaction()
        return bad.exception(), queued.exception()

    bad, queued = run_txn(broker, steps)
    assert isinstance(bad, BrokerError) and bad.code == 10
    assert "aborted before this record was sent" in str(queued)
    # the second transaction never reached the coordinator: no AddPartitionsToTxn, no EndTxn
    assert broker.log[2:] == [("AddPartitionsToTxn", [("t", 0)]), ("Produce", "tx", True),
                              ("EndTxn", False)]


def test_a_fenced_producer_stops():
    from kproto.client.transactions import TransactionFatalError

    broker = TxnProduceBroker(end_script=[90])  # PRODUCER_FENCED

    async def steps(p):
        p.begin_transaction()
        await p.send("t", b"v", partition=0)
        with pytest.raises(TransactionFatalError, match="PRODUCER_FENCED"):
            await p.commit_transaction()
        with pytest.raises(kproto.KprotoError, match="the producer failed earlier"):
            p.begin_transaction()
        with pytest.raises(kproto.KprotoError, match="not a transactional producer"):
            await Producer(p.cluster).commit_transaction()

    run_txn(broker, steps)


def test_an_explicit_partition_is_checked_against_the_metadata():
    broker = ProduceBroker([])

    async def main():
        async with FakeBroker(broker) as fb:
            broker.port = fb.port
            async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
                producer = await Producer(cluster).start()
                with pytest.raises(kproto.KprotoError, match=r"partition 2 is not in the range \[0...2\) of t"):
                    await producer.send("t", b"v", partition=2)
                fut = await producer.send("t", b"v", partition=1)
                await producer.flush()
                return fut.result()

    assert asyncio.run(asyncio.wait_for(main(), 30)).partition == 1
    assert broker.metadata_requests >= 1  # loaded before the first send, as Kafka's waitOnMetadata
