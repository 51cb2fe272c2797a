"""The consumer's read_committed filter (Kafka's ``CompletedFetch`` rules over the fetch
response's aborted transactions), on built batches and on the fixtures' Kafka-written logs."""
from __future__ import annotations

import os
import sys

import pytest

from kproto.client.consumer import Consumer, parse_records
from kproto.records import RecordBatchBuilder
from kproto.storage.partition import Partition

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "storage"))
from storage_fixtures import (LOGDIRS, committed_rows, expected_aborted, expected_lso,  # noqa: E402
                              expected_records, partition_dirs, want_row)


def _txn(base, pid, n, *, marker=None, transactional=True):
    b = RecordBatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0,
                           base_sequence=0 if pid >= 0 else -1, transactional=transactional,
                           control=marker is not None)
    if marker is None:
        for i in range(n):
            b.append(100 + base + i, None, b"v%d" % (base + i))
    else:
        b.append_end_txn_marker(marker == "commit", 3, 200 + base)
    return b.build()


# producer 9 aborts twice, producer 10 commits in between, plain records around them
LOG = (_txn(0, 9, 3) + _txn(3, 10, 2) + _txn(5, 9, 1, marker="abort")
       + _txn(6, 10, 1, marker="commit") + _txn(7, -1, 1, transactional=False) + _txn(8, 9, 2)
       + _txn(10, 9, 1, marker="abort") + _txn(11, 9, 1, transactional=False))


def test_read_committed_leaves_out_aborted_transactions_and_markers():
    recs, pos = parse_records("t", 0, LOG, 0, [(9, 8), (9, 0)])  # any order, as brokers send
    assert [r.offset for r in recs] == [3, 4, 7, 11] and pos == 12
    # read_uncommitted: everything but the markers
    recs, _ = parse_records("t", 0, LOG, 0)
    assert [r.offset for r in recs] == [0, 1, 2, 3, 4, 7, 8, 9, 11]
    # no aborted transaction listed: nothing to leave out
    assert [r.offset for r in parse_records("t", 0, LOG, 0, [])[0]] == [0, 1, 2, 3, 4, 7, 8, 9, 11]
    # fetched from the middle: the earlier batches still count for the producer state
    recs, _ = parse_records("t", 0, LOG, 4, [(9, 0), (9, 8)])
    assert [r.offset for r in recs] == [4, 7, 11]


def test_non_transactional_batches_of_an_aborted_producer_are_kept():
    # CompletedFetch.isBatchAborted needs the transactional bit
    log = _txn(0, 9, 1) + _txn(1, 9, 1, transactional=False) + _txn(2, 9, 1, marker="abort")
    assert [r.offset for r in parse_records("t", 0, log, 0, [(9, 0)])[0]] == [1]


@pytest.mark.parametrize("part", [p for p in partition_dirs() if expected_aborted(p)])
def test_agrees_with_the_transaction_index_of_kafka_written_logs(part):
    # a fetch from offset 0 returning the whole log up to the last stable offset, with the
    # aborted transactions a broker collects from the .txnindex
    p = Partition.open(os.path.join(LOGDIRS, part))
    lso = expected_lso(part)
    data = b"".join(bytes(b.buffer) for _seg, b in p.batches()
                    if lso is None or b.last_offset < lso)
    aborted = [(a["producer_id"], a["first_offset"]) for a in expected_aborted(part)]
    recs, _ = parse_records(p.topic, p.partition, data, 0, aborted)
    rows = [want_row(r, p.topic, p.partition) for r in expected_records(part)]
    want = [r["offset"] for r in committed_rows(rows, part, include_control=False)]
    assert [r.offset for r in recs] == want and len(want) > 0


def test_isolation_level_is_checked():
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer(None, ["t"], isolation_level="committed")  # type: ignore[arg-type]
    assert Consumer(None, ["t"], isolation_level="read_committed").isolation_level == 1  # type: ignore[arg-type]


class TxnBroker:
    """One partition holding LOG; answers Fetch as a broker does for each isolation level
    (read_committed: records up to the last stable offset, plus the aborted transactions)."""

    TOPIC = "txn"
    LSO = 12

    def __init__(self) -> None:
        self.port = 0
        self.seen: list[tuple[int, int, int]] = []  # (api key, version, isolation level)

    def __call__(self, header, body):
        import kproto
        from kproto.codecs.primitives import Uuid

        from client_io_fakebroker import metadata_response

        key, version = header.request_api_key, header.request_api_version
        if key == 3:
            return metadata_response(self.port, {self.TOPIC: (Uuid(bytes(range(16))), 1)})
        if key == 2:
            self.seen.append((key, version, body.isolation_level))
            cls = kproto.response(2).cls
            return cls(topics=[cls.ListOffsetsTopicResponse(name=self.TOPIC, partitions=[
                cls.ListOffsetsPartitionResponse(partition_index=0, offset=0)])])
        if key == 1:
            self.seen.append((key, version, body.isolation_level))
            cls = kproto.response(1).cls
            committed = body.isolation_level == 1
            offset = body.topics[0].partitions[0].fetch_offset if body.topics else self.LSO
            pd = cls.PartitionData(
                partition_index=0, high_watermark=self.LSO, last_stable_offset=self.LSO,
                aborted_transactions=[cls.AbortedTransaction(producer_id=9, first_offset=f)
                                      for f in (0, 8)] if committed else None,
                records=LOG if offset < self.LSO else b"")
            topic = cls.FetchableTopicResponse(topic=self.TOPIC, topic_id=Uuid(bytes(range(16))),
                                               partitions=[pd])
            return cls(responses=[topic])
        return NotImplemented


@pytest.mark.parametrize("isolation, offsets", [("read_committed", [3, 4, 7, 11]),
                                                ("read_uncommitted", [0, 1, 2, 3, 4, 7, 8, 9, 11])])
def test_consumer_sends_its_isolation_level_and_filters_what_comes_back(isolation, offsets):
    import asyncio

    from kproto.client.cluster import Cluster

    from client_io_fakebroker import FakeBroker

    broker = TxnBroker()

    async def main():
        async with FakeBroker(broker) as fb:
            broker.port = fb.port
            async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
                consumer = await Consumer(cluster, [TxnBroker.TOPIC], fetch_max_wait_ms=10,
                                          isolation_level=isolation).start()
                got = await consumer.getmany(0.1)
                return got, consumer.positions

    got, positions = asyncio.run(asyncio.wait_for(main(), 30))
    assert [r.offset for r in got] == offsets and positions == {(TxnBroker.TOPIC, 0): 12}
    level = 1 if isolation == "read_committed" else 0
    assert {(k, lvl) for k, _v, lvl in broker.seen} == {(2, level), (1, level)}
    assert all(v >= 2 for k, v, _ in broker.seen if k == 2)
