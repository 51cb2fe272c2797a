"""Producer error handling against the fake broker: retries keep their sequence numbers."""
from __future__ import annotations

import asyncio
import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kproto
from kproto.client.cluster import Cluster
from kproto.client.protocol import BrokerError
from kproto.client.producer import Producer
from kproto.error_codes import ErrorCode
from kproto.records import iter_batches

from client_io_fakebroker import FakeBroker, metadata_response


@contextlib.asynccontextmanager
async def fake_cluster(broker, **fake):
    """A :class:`Cluster` on a FakeBroker answering through ``broker`` (which learns its port)."""
    async with FakeBroker(broker, **fake) as fb:
        broker.port = fb.port
        async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
            yield cluster


def cluster_answer(key: int, port: int):
    """Metadata (topic ``t``, 2 partitions, node 1 leads) or InitProducerId (id 77, epoch 2)."""
    if key == 3:
        return metadata_response(port, {"t": (kproto.Uuid.ZERO, 2)})
    return kproto.response(22).cls(producer_id=77, producer_epoch=2)


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
        self.metadata_requests += key == 3
        if key in (3, 22):
            return cluster_answer(key, self.port)
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
        async with fake_cluster(broker) as cluster:
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


@pytest.mark.parametrize("code", [ErrorCode.CORRUPT_MESSAGE, ErrorCode.NOT_CONTROLLER,
                                  ErrorCode.THROTTLING_QUOTA_EXCEEDED, ErrorCode.OFFSET_NOT_AVAILABLE])
def test_every_error_kafka_retries_is_retried(code):
    # the error table's retriable flag decides, as Kafka's Sender asks of the exception
    broker, [records] = produce([code, 0], [2])
    assert broker.produced == [(0, 0, 2), (0, 0, 2)]
    assert [m.offset for m in records] == [0, 1]


@pytest.mark.parametrize("code", [ErrorCode.INVALID_RECORD, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                  ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT])
def test_errors_kafka_does_not_retry_fail_the_records(code):
    broker, [[a, b]] = produce([code], [2])
    assert isinstance(a, BrokerError) and a.code == code and b is a
    assert broker.produced == [(0, 0, 2)]


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
        async with fake_cluster(broker) as cluster:
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
        async with fake_cluster(broker) as cluster:
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


def test_commit_waits_for_batches_still_waiting_for_add_partitions():
    # the sender took the batch and waits for AddPartitionsToTxn (retried twice) when the
    # commit starts: EndTxn may only go once the Produce was answered, or the coordinator
    # could write the COMMIT marker before the records
    import time as _time

    class Timed(TxnProduceBroker):
        def __call__(self, header, body):
            if header.request_api_key in (0, 26):
                self.log.append(("at", header.request_api_key, _time.monotonic()))
            return super().__call__(header, body)

    broker = Timed(add_script=[51, 51])
    delay = 0.05

    async def main():
        async with fake_cluster(broker, delay=delay) as cluster:
            p = await Producer(cluster, transactional_id="tx", linger_ms=0).start()
            p.begin_transaction()
            fut = await p.send("t", b"v", partition=0)
            await asyncio.sleep(0.01)  # the sender has drained the batch
            assert len(p.accumulator) == 0
            await p.commit_transaction()
            return fut.result().offset

    assert asyncio.run(asyncio.wait_for(main(), 30)) == 0
    times = {key: t for tag, key, t in (e for e in broker.log if e[0] == "at")}
    assert times[26] - times[0] >= delay * 0.9  # EndTxn came after the Produce's answer


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
        async with fake_cluster(broker) as cluster:
            producer = await Producer(cluster).start()
            with pytest.raises(kproto.KprotoError, match=r"partition 2 is not in the range \[0...2\) of t"):
                await producer.send("t", b"v", partition=2)
            fut = await producer.send("t", b"v", partition=1)
            await producer.flush()
            return fut.result()

    assert asyncio.run(asyncio.wait_for(main(), 30)).partition == 1
    assert broker.metadata_requests >= 1  # loaded before the first send, as Kafka's waitOnMetadata


class SequencingBroker:
    """A broker that checks sequences as Kafka's log does: a batch is written only if it starts
    at the partition's next sequence; a repeat of a written batch gets its first answer again;
    anything else is OUT_OF_ORDER_SEQUENCE_NUMBER. ``inject`` maps (partition, first value) to
    the error code of that batch's first attempt."""

    def __init__(self, inject: dict | None = None) -> None:
        self.inject = dict(inject or {})
        self.log: dict[int, list[bytes]] = {0: [], 1: []}
        self.next_seq = {0: 0, 1: 0}
        self.written: dict[tuple[int, int], int] = {}   # (partition, base sequence) -> base offset
        self.answers: list[tuple[int, int, int]] = []   # (partition, base sequence, error code)
        self.port = 0

    def __call__(self, header, body):
        key = header.request_api_key
        if key in (3, 22):
            return cluster_answer(key, self.port)
        if key != 0:
            return NotImplemented
        cls = kproto.response(0).cls
        parts = []
        for td in body.topic_data:
            for pd in td.partition_data:
                [batch] = iter_batches(pd.records)
                values = [r.value for r in batch.records()]
                p, seq, base = pd.index, batch.base_sequence, -1
                code = self.inject.pop((p, values[0]), 0)
                if code == 0:
                    if seq == self.next_seq[p]:
                        base = self.written[(p, seq)] = len(self.log[p])
                        self.log[p] += values
                        self.next_seq[p] += len(values)
                    elif (p, seq) in self.written:
                        base = self.written[(p, seq)]
                    else:
                        code = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
                self.answers.append((p, seq, code))
                parts.append(cls.PartitionProduceResponse(index=p, error_code=code, base_offset=base))
        return cls(responses=[cls.TopicProduceResponse(name="t", partition_responses=parts)])


def pipelined(broker: SequencingBroker, n: int = 120, max_in_flight: int = 5, delay: float = 0.01):
    """Send ``n`` records to partition 0 in small batches without waiting; return the results
    and the most Produce requests seen in flight at once."""
    async def main():
        async with fake_cluster(broker, delay=delay) as cluster:
            producer = await Producer(cluster, batch_size=100, linger_ms=0,
                                      max_in_flight=max_in_flight).start()
            most = 0

            async def watch():
                nonlocal most
                while True:
                    most = max(most, producer._requests.get(1, 0))
                    await asyncio.sleep(0.001)

            watcher = asyncio.get_running_loop().create_task(watch())
            futs = [await producer.send("t", b"%05d" % i, partition=0) for i in range(n)]
            await producer.close()
            watcher.cancel()
            return [f.result() if f.exception() is None else f.exception() for f in futs], most

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_up_to_five_requests_in_flight_keep_the_order():
    broker = SequencingBroker()
    results, most = pipelined(broker)
    assert most == 5
    assert broker.log[0] == [b"%05d" % i for i in range(120)]
    assert [m.offset for m in results] == list(range(120))
    assert all(code == 0 for _, _, code in broker.answers)
    broker = SequencingBroker()
    results, most = pipelined(broker, max_in_flight=1)
    assert most == 1 and broker.log[0] == [b"%05d" % i for i in range(120)]


def test_a_retried_batch_goes_again_before_the_ones_behind_it():
    # NOT_LEADER_OR_FOLLOWER for the batch starting at record 20: the batches already in flight
    # behind it are refused as out of order and sent again after it
    broker = SequencingBroker({(0, b"00020"): 6})
    results, _ = pipelined(broker)
    assert broker.log[0] == [b"%05d" % i for i in range(120)]
    assert [m.offset for m in results] == list(range(120))
    assert any(code == 45 for _, _, code in broker.answers)  # the pipeline was really refused


def test_a_batch_failed_for_good_leaves_no_gap_in_the_sequence():
    broker = SequencingBroker({(0, b"00020"): 10})  # MESSAGE_TOO_LARGE: not retried
    results, _ = pipelined(broker)
    failed = [i for i, r in enumerate(results) if isinstance(r, BrokerError)]
    assert failed and failed == list(range(20, 20 + len(failed))) and all(results[i].code == 10 for i in failed)
    kept = [i for i in range(120) if i not in failed]
    assert broker.log[0] == [b"%05d" % i for i in kept]
    assert [results[i].offset for i in kept] == list(range(len(kept)))
    assert broker.next_seq[0] == len(kept)  # the later batches were numbered again


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 1), min_size=1, max_size=80), st.dictionaries(
    st.tuples(st.integers(0, 1), st.integers(0, 79)), st.sampled_from([6, 7, 10, 19]), max_size=4),
    st.integers(1, 5))
def test_pipelined_sends_under_injected_failures_keep_kafkas_guarantees(partitions, inject, max_in_flight):
    """Whatever fails: every record is either acknowledged at its place in the log or failed;
    the log holds each acknowledged record once, in send order per partition, and its
    sequences have no gap (the broker accepted them)."""
    broker = SequencingBroker({(p, b"%05d" % i): code for (p, i), code in inject.items()})

    async def main():
        async with fake_cluster(broker) as cluster:
            producer = await Producer(cluster, batch_size=60, linger_ms=0, max_in_flight=max_in_flight).start()
            futs = [await producer.send("t", b"%05d" % i, partition=p) for i, p in enumerate(partitions)]
            await producer.close()
            return [f.result() if f.exception() is None else f.exception() for f in futs]

    results = asyncio.run(asyncio.wait_for(main(), 30))
    for p in (0, 1):
        sent = [i for i, q in enumerate(partitions) if q == p]
        ok = [i for i in sent if not isinstance(results[i], BaseException)]
        assert broker.log[p] == [b"%05d" % i for i in ok]
        assert [results[i].offset for i in ok] == list(range(len(ok)))
        assert broker.next_seq[p] == len(ok)
        for i in sent:
            if isinstance(results[i], BaseException):
                assert isinstance(results[i], BrokerError) and results[i].code == 10


def test_a_batch_that_cannot_be_encoded_fails_alone(monkeypatch):
    import kproto.client.producer as producer_module

    real = producer_module.encode_batch

    def encode(batch, *args):
        if batch.partition == 1:
            raise RuntimeError("codec exploded")
        return real(batch, *args)

    monkeypatch.setattr(producer_module, "encode_batch", encode)
    broker = ProduceBroker([])

    async def main():
        async with fake_cluster(broker) as cluster:
            producer = await Producer(cluster).start()
            with pytest.raises(kproto.EncodeError, match="header keys cannot be null"):
                await producer.send("t", b"v", partition=0, headers=[(None, b"x")])
            ok = await producer.send("t", b"v", partition=0)
            bad = await producer.send("t", b"v", partition=1)
            await asyncio.wait_for(producer.flush(), 5)  # no hang on the batch that failed
            return ok.result(), bad.exception()

    ok, bad = asyncio.run(asyncio.wait_for(main(), 30))
    assert (ok.partition, ok.offset) == (0, 0)
    assert isinstance(bad, kproto.KprotoError) and "codec exploded" in str(bad)
    assert broker.produced == [(0, 0, 1)]


def test_an_answer_that_cannot_be_read_fails_its_batches(monkeypatch):
    from kproto.client.connection import Connection

    real = Connection.response

    async def response(self, fut, what="request", **kw):
        if what == "ProduceRequest":
            await fut
            raise kproto.DecodeError("truncated", what="ProduceResponse v9", path="responses", offset=12)
        return await real(self, fut, what, **kw)

    monkeypatch.setattr(Connection, "response", response)
    broker = ProduceBroker([])

    async def main():
        async with fake_cluster(broker) as cluster:
            producer = await Producer(cluster).start()
            fut = await producer.send("t", b"v", partition=0)
            await asyncio.wait_for(producer.flush(), 5)  # the batch is settled, not left in flight
            return fut.exception()

    error = asyncio.run(asyncio.wait_for(main(), 30))
    assert isinstance(error, kproto.KprotoError) and "could not be read" in str(error)


@pytest.mark.parametrize("tv", [1, 2])
def test_transactional_producer_follows_the_finalized_transaction_version(tmp_path, tv):
    """As the Java 4.x client: transaction version 2 where the broker finalizes
    transaction.version 2 (Produce v12+ adds the partitions, TxnOffsetCommit v5+ the offsets,
    EndTxn v5 bumps the epoch), version 1 otherwise (AddPartitionsToTxn, AddOffsetsToTxn,
    Produce 11, EndTxn 4 at most, the epoch kept)."""
    from kproto.broker import Broker
    from kproto.schemas.api_keys import ApiKey as K

    seen: list[tuple[int, int]] = []

    def watch(header, body):
        seen.append((header.request_api_key, header.request_api_version))
        return None

    async def main():
        async with Broker(tmp_path / "data", transaction_version=tv) as broker:
            for key in (K.PRODUCE, K.ADD_PARTITIONS_TO_TXN, K.ADD_OFFSETS_TO_TXN, K.TXN_OFFSET_COMMIT, K.END_TXN):
                broker.control(key, watch, times=None)
            async with Cluster(broker.bootstrap) as cluster:
                p = await Producer(cluster, linger_ms=0, transactional_id="tx").start()
                epochs = [p.producer_epoch]
                for commit in (True, False):
                    p.begin_transaction()
                    await (await p.send("t", b"x", partition=0))
                    await p.send_offsets_to_transaction({("t", 0): 1}, "g")
                    await (p.commit_transaction() if commit else p.abort_transaction())
                    epochs.append(p.producer_epoch)
                tv2 = p.transactions.tv2
                await p.close()
                return tv2, epochs

    tv2, epochs = asyncio.run(asyncio.wait_for(main(), 30))
    versions: dict[int, set[int]] = {}
    for key, v in seen:
        versions.setdefault(key, set()).add(v)
    if tv == 2:
        assert tv2 and epochs == [0, 1, 2]
        # Produce v13 and TxnOffsetCommit v6 name topics by id (the producer knows "t"'s)
        assert versions == {K.PRODUCE: {13}, K.TXN_OFFSET_COMMIT: {6}, K.END_TXN: {5}}
    else:
        assert not tv2 and epochs == [0, 0, 0]
        assert versions == {K.PRODUCE: {11}, K.ADD_PARTITIONS_TO_TXN: {3}, K.ADD_OFFSETS_TO_TXN: {4},
                            K.TXN_OFFSET_COMMIT: {4}, K.END_TXN: {4}}


def test_a_send_that_fills_its_batch_lets_the_sender_write_it():
    # a caller that never waits still has full batches sent while it goes on appending
    broker = ProduceBroker([])

    async def main():
        async with fake_cluster(broker) as cluster:
            producer = await Producer(cluster, linger_ms=60_000, batch_size=100).start()
            await producer.send("t", b"v", partition=0)  # metadata first (that send waits)
            await producer.flush()
            yielded = []
            for i in range(9):  # 21 + 16 bytes a record: every 3rd fills a 100-byte batch
                ran: list[int] = []
                asyncio.get_running_loop().call_soon(ran.append, i)
                await producer.send("t", b"v" * 16, partition=0)
                if ran:
                    yielded.append(i)
            await asyncio.sleep(0.2)  # the answers (the linger alone would hold them a minute)
            sent_early = list(broker.produced)
            await producer.close()
            return yielded, sent_early

    yielded, sent_early = asyncio.run(asyncio.wait_for(main(), 30))
    assert yielded == [2, 5, 8]  # only the sends that filled a batch
    assert [count for _, _, count in sent_early] == [1, 3, 3, 3]
