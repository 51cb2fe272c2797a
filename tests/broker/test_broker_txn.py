"""The transaction coordinator through the sans-I/O core, time from a fake clock: epochs and
fencing, markers, the last stable offset, read_committed fetches, timeouts, restarts."""
from __future__ import annotations

import os

import pytest

import kproto
from kproto.error_codes import ErrorCode as E
from kproto.records import RecordBatchBuilder, iter_batches
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage import read_internal

from broker_support import Client, fake_core


def make_core(path, clock, **config):
    return fake_core(path, clock, offsets_topic_num_partitions=3, transaction_state_num_partitions=3, **config)


def with_topic(path, clock, **config):
    c = make_core(path, clock, **config)
    Client(c).call(K.CREATE_TOPICS, 7, timeout_ms=1000, topics=[kproto.request(19).cls.CreatableTopic(
        name="t", num_partitions=2, replication_factor=1)])
    return c


@pytest.fixture
def core(tmp_path, clock):
    c = with_topic(tmp_path / "d", clock)
    yield c
    c.close()


def init(client, tid="tx", timeout=60_000, version=4, pid=-1, epoch=-1):
    r = client.call(K.INIT_PRODUCER_ID, version, transactional_id=tid, transaction_timeout_ms=timeout,
                    producer_id=pid, producer_epoch=epoch)
    return r.error_code, r.producer_id, r.producer_epoch


def add(client, pid, epoch, parts, tid="tx", version=3):
    req = kproto.request(K.ADD_PARTITIONS_TO_TXN).cls
    topics: dict = {}
    for t, p in parts:
        topics.setdefault(t, []).append(p)
    r = client.call(K.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=tid,
                    v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=[req.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                         for t, ps in topics.items()])
    return {(t.name, p.partition_index): p.partition_error_code
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def end(client, pid, epoch, commit, tid="tx", version=3):
    return client.call(K.END_TXN, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                       committed=commit).error_code


def produce(client, pid, epoch, seq, values, partition=0, tid="tx"):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=tid is not None)
    for i, v in enumerate(values):
        b.append(1_700_000_000_000 + i, None, v)
    req = kproto.request(0).cls
    r = client.call(K.PRODUCE, 9, transactional_id=tid, acks=-1, timeout_ms=1000, topic_data=[
        req.TopicProduceData(name="t", partition_data=[req.PartitionProduceData(index=partition, records=b.build())])])
    return r.responses[0].partition_responses[0]


def fetch_body(offset, committed, max_wait=0, partition=0):
    req = kproto.request(1).cls
    return req(max_wait_ms=max_wait, min_bytes=1, max_bytes=1 << 20, isolation_level=1 if committed else 0,
               session_id=0, session_epoch=-1, topics=[req.FetchTopic(topic="t", partitions=[
                   req.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])])


def fetch(client, offset, committed):
    i = client.send(K.FETCH, 11, fetch_body(offset, committed))
    return client.answer(i).responses[0].partitions[0]


def values(records):
    return [r.value for b in iter_batches(records or b"") if not b.is_control for r in b.records()]


def test_init_producer_id_bumps_the_epoch_and_fences_the_older_producer(core):
    c = Client(core)
    assert init(c, "") [0] == E.INVALID_REQUEST
    assert init(c, timeout=0)[0] == E.INVALID_TRANSACTION_TIMEOUT
    err, pid, epoch = init(c)
    assert (err, epoch) == (0, 0)
    assert init(c) == (0, pid, 1)
    assert add(c, pid, 0, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}
    assert add(c, pid, 0, [("t", 0)], version=1) == {("t", 0): E.INVALID_PRODUCER_EPOCH}
    assert add(c, pid + 7, 1, [("t", 0)]) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert add(c, pid, 1, [("t", 0), ("nope", 0)]) == {
        ("t", 0): E.OPERATION_NOT_ATTEMPTED, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert end(c, pid, 1, True) == E.INVALID_TXN_STATE            # nothing begun
    # KIP-360: the caller says which producer it was
    assert init(c, version=4, pid=pid, epoch=0)[0] == E.PRODUCER_FENCED
    assert init(c, version=4, pid=pid, epoch=1) == (0, pid, 2)
    # an idempotent producer id never collides with a transactional one
    r = c.call(K.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=1, producer_id=-1,
               producer_epoch=-1)
    assert r.producer_id != pid


def test_an_aborted_transaction_is_hidden_from_read_committed_and_listed_as_aborted(core):
    c = Client(core)
    _, pid, ep = init(c)
    assert produce(c, pid, ep, 0, [b"x"]).error_code == E.INVALID_TXN_STATE   # not added yet
    assert add(c, pid, ep, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): 0}
    assert produce(c, pid, ep, 0, [b"a1", b"a2"]).base_offset == 0
    lg = core.logs.get("t", 0)
    assert (lg.high_watermark, lg.last_stable_offset) == (2, 0)
    pd = fetch(c, 0, committed=True)
    assert (pd.last_stable_offset, pd.high_watermark, values(pd.records)) == (0, 2, [])
    assert values(fetch(c, 0, committed=False).records) == [b"a1", b"a2"]
    # a read_committed long poll waits through the open transaction and answers at its end
    f = Client(core)
    waiting = f.send(K.FETCH, 11, fetch_body(0, committed=True, max_wait=5000))
    assert len(f.channel.frames) == waiting
    assert end(c, pid, ep, False) == 0
    answer = f.answer(waiting).responses[0].partitions[0]
    assert answer.last_stable_offset == 3 and values(answer.records) == [b"a1", b"a2"]
    assert [(a.producer_id, a.first_offset) for a in answer.aborted_transactions] == [(pid, 0)]
    # markers went to both partitions of the transaction, also the one with no data
    assert core.logs.get("t", 1).log_end_offset == 1
    # the next transaction commits; a fetch past the abort lists no aborted transaction
    assert add(c, pid, ep, [("t", 0)]) == {("t", 0): 0}
    assert produce(c, pid, ep, 2, [b"c1"]).base_offset == 3
    assert end(c, pid, ep, True) == 0
    assert end(c, pid, ep, True) == 0                              # a retry is answered alike
    assert end(c, pid, ep, False) == E.INVALID_TXN_STATE
    pd = fetch(c, 3, committed=True)
    assert values(pd.records) == [b"c1"] and pd.aborted_transactions == [] and pd.last_stable_offset == 5
    lo = c.call(K.LIST_OFFSETS, 5, replica_id=-1, isolation_level=1, topics=[
        kproto.request(2).cls.ListOffsetsTopic(name="t", partitions=[
            kproto.request(2).cls.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    assert lo.topics[0].partitions[0].offset == 5


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(core, clock):
    c = Client(core)
    _, pid, ep = init(c, timeout=2000)
    add(c, pid, ep, [("t", 0)])
    produce(c, pid, ep, 0, [b"late"])
    clock.advance(1999)
    core.advance_clock()
    assert core.logs.get("t", 0).last_stable_offset == 0
    clock.advance(1)
    core.advance_clock()
    lg = core.logs.get("t", 0)
    assert lg.last_stable_offset == lg.high_watermark == 2 and lg.aborted == [(pid, 0, 1)]
    assert end(c, pid, ep, True) == E.PRODUCER_FENCED
    assert produce(c, pid, ep, 1, [b"more"], tid=None).error_code == E.INVALID_PRODUCER_EPOCH
    assert init(c, timeout=2000) == (0, pid, ep + 2)


def test_init_during_an_open_transaction_aborts_it_first(core):
    c = Client(core)
    _, pid, ep = init(c)
    add(c, pid, ep, [("t", 0)])
    produce(c, pid, ep, 0, [b"zombie"])
    assert init(c)[0] == E.CONCURRENT_TRANSACTIONS      # the open one is aborted meanwhile
    assert init(c) == (0, pid, ep + 2)
    pd = fetch(c, 0, committed=True)
    assert values(pd.records) == [b"zombie"] and [a.first_offset for a in pd.aborted_transactions] == [0]


def test_transactional_offsets_count_once_the_transaction_commits(core):
    c = Client(core)
    _, pid, ep = init(c)
    r = c.call(K.ADD_OFFSETS_TO_TXN, 3, transactional_id="tx", producer_id=pid, producer_epoch=ep, group_id="g")
    assert r.error_code == 0
    req = kproto.request(K.TXN_OFFSET_COMMIT).cls
    r = c.call(K.TXN_OFFSET_COMMIT, 3, transactional_id="tx", group_id="g", producer_id=pid, producer_epoch=ep,
               generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, topics=[req.TxnOffsetCommitRequestTopic(
                   name="t", partitions=[req.TxnOffsetCommitRequestPartition(
                       partition_index=0, committed_offset=42, committed_metadata="m")])])
    assert r.topics[0].partitions[0].error_code == 0
    freq = kproto.request(K.OFFSET_FETCH).cls

    def committed(stable):
        g = c.call(K.OFFSET_FETCH, 8, require_stable=stable, groups=[
            freq.OffsetFetchRequestGroup(group_id="g", topics=[
                freq.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])]).groups[0]
        p = g.topics[0].partitions[0]
        return p.committed_offset, p.error_code

    assert committed(False) == (-1, 0)
    assert committed(True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    assert end(c, pid, ep, True) == 0
    assert committed(True) == (42, 0)


# Kafka 4.x writes TransactionLogValue v1 (with its tagged fields) from transaction.version 1
# on (TransactionVersion.transactionLogValueVersion), v0 below it
@pytest.mark.parametrize("tv, value_version", [(2, 1), (1, 1), (0, 0)])
def test_transaction_state_is_written_in_kafkas_format_and_a_restart_resumes_it(tmp_path, clock, tv, value_version):
    core = with_topic(tmp_path / "d", clock, transaction_version=tv)
    c = Client(core)
    _, pid, ep = init(c)
    add(c, pid, ep, [("t", 0)])
    produce(c, pid, ep, 0, [b"open"])
    core.close()
    rows = read_internal(str(tmp_path / "d"))["TransactionLog"].to_pylist()
    assert [(r["key"]["transactional_id"], r["value_version"], r["value"]["transaction_status"])
            for r in rows] == [("tx", value_version, 0), ("tx", value_version, 1)]
    assert rows[-1]["value"]["transaction_partitions"] == [{"topic": "t", "partition_ids": [0]}]
    again = make_core(tmp_path / "d", clock, transaction_version=tv)
    try:
        c = Client(again)
        lg = again.logs.get("t", 0)
        assert (lg.high_watermark, lg.last_stable_offset) == (1, 0)   # still open after the restart
        assert end(c, pid, ep, True) == 0
        assert lg.last_stable_offset == 2
        assert values(fetch(c, 0, committed=True).records) == [b"open"]
    finally:
        again.close()


def test_describe_and_list_transactions_and_describe_producers(core, clock):
    c = Client(core)
    _, pid, ep = init(c, "tx-a", timeout=30_000)
    _, pid_b, _ = init(c, "tx-b")
    add(c, pid, ep, [("t", 1), ("t", 0)], tid="tx-a")
    assert produce(c, pid, ep, 0, [b"a1", b"a2"], tid="tx-a").error_code == 0
    clock.advance(2_000)

    d = c.call(K.DESCRIBE_TRANSACTIONS, 0, transactional_ids=["tx-a", "tx-b", "nope"])
    a, b, nope = d.transaction_states
    assert (a.error_code, a.transaction_state, a.producer_id, a.producer_epoch, a.transaction_timeout_ms) == (
        0, "Ongoing", pid, ep, 30_000)
    assert [(t.topic, t.partitions) for t in a.topics] == [("t", [0, 1])]
    assert a.transaction_start_time_ms > 0
    assert (b.transaction_state, b.producer_id, b.topics) == ("Empty", pid_b, [])
    assert nope.error_code == E.TRANSACTIONAL_ID_NOT_FOUND

    def listed(version=2, **filters):
        r = c.call(K.LIST_TRANSACTIONS, version, **filters)
        return r.error_code, r.unknown_state_filters, [(t.transactional_id, t.transaction_state)
                                                       for t in r.transaction_states]
    assert listed() == (0, [], [("tx-a", "Ongoing"), ("tx-b", "Empty")])
    assert listed(state_filters=["Ongoing", "Bogus"]) == (0, ["Bogus"], [("tx-a", "Ongoing")])
    assert listed(state_filters=["Bogus"]) == (0, ["Bogus"], [])
    assert listed(producer_id_filters=[pid_b]) == (0, [], [("tx-b", "Empty")])
    assert listed(transactional_id_pattern="tx-.") == (0, [], [("tx-a", "Ongoing"), ("tx-b", "Empty")])
    assert listed(transactional_id_pattern="tx") == (0, [], [])             # a whole match, as Java's
    assert listed(transactional_id_pattern="(")[0] == E.INVALID_REGULAR_EXPRESSION
    # running longer than the filter: tx-a began when it added partitions; tx-b has no start
    # time (-1), so Kafka's rule (now - start > duration) always lists it
    started = a.transaction_start_time_ms
    longer = listed(version=1, duration_filter=core.wall_ms() - started - 1)[2]
    assert [t for t, _ in longer] == ["tx-a", "tx-b"]
    assert [t for t, _ in listed(version=1, duration_filter=core.wall_ms() - started)[2]] == ["tx-b"]

    r = c.call(K.DESCRIBE_PRODUCERS, 0, topics=[kproto.request(K.DESCRIBE_PRODUCERS).cls.TopicRequest(
        name="t", partition_indexes=[0, 1, 7])])
    p0, p1, p7 = r.topics[0].partitions
    [st] = p0.active_producers
    assert (st.producer_id, st.producer_epoch, st.last_sequence, st.current_txn_start_offset) == (pid, ep, 1, 0)
    assert st.last_timestamp == 1_700_000_000_001
    assert p1.active_producers == [] and p7.error_code == E.UNKNOWN_TOPIC_OR_PARTITION

    assert end(c, pid, ep, True, tid="tx-a") == 0
    assert listed(state_filters=["CompleteCommit"])[2] == [("tx-a", "CompleteCommit")]
    [st] = c.call(K.DESCRIBE_PRODUCERS, 0, topics=[kproto.request(K.DESCRIBE_PRODUCERS).cls.TopicRequest(
        name="t", partition_indexes=[0])]).topics[0].partitions[0].active_producers
    assert st.current_txn_start_offset == -1


def test_a_live_log_dir_lists_the_active_segments_aborted_transactions(core, tmp_path):
    """The .txnindex entry is appended as the ABORT marker lands (as Kafka does), not when the
    segment rolls: a read_committed reader of the running broker's directory hides them."""
    import kproto.storage as ks
    c = Client(core)
    _, pid, ep = init(c)
    add(c, pid, ep, [("t", 0)])
    produce(c, pid, ep, 0, [b"gone1", b"gone2"])
    assert end(c, pid, ep, False) == 0
    add(c, pid, ep, [("t", 0)])
    produce(c, pid, ep, 2, [b"kept"])
    assert end(c, pid, ep, True) == 0
    data_dir = core.logs.data_dir              # the broker is still running: nothing rolled
    seg = os.path.join(data_dir, "t-0", "00000000000000000000.txnindex")
    assert os.path.getsize(seg) == 34          # one entry: the aborted transaction
    table = ks.read_arrow(data_dir, topics=["t"], isolation="read_committed")
    assert table.column("value").to_pylist() == [b"kept"]
