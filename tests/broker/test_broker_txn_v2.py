"""Transaction version 2 (KIP-890 part 2) and the verification of transactional writes (part 1)
through the sans-I/O core: partitions added by Produce v12 and TxnOffsetCommit v5, EndTxn v5's
epoch bump (markers, retries, an exhausted epoch), the finalized transaction.version setting,
TxnOffsetCommit v6 by topic id, and coordinator-epoch fencing of markers."""
from __future__ import annotations

import uuid

import pytest

import kproto
from kproto.broker.log import BrokerError
from kproto.broker.coordinators.txn import append_txn_marker
from kproto.error_codes import ErrorCode as E
from kproto.records import RecordBatchBuilder, iter_batches
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client
from test_broker_txn import add, end, fetch, init, values, with_topic


@pytest.fixture
def core(tmp_path, clock):
    c = with_topic(tmp_path / "d", clock)
    yield c
    c.close()


def produce(client, pid, epoch, seq, vals, version=12, partition=0, tid="tx"):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    for i, v in enumerate(vals):
        b.append(1_700_000_000_000 + i, None, v)
    req = kproto.request(K.PRODUCE).cls
    r = client.call(K.PRODUCE, version, transactional_id=tid, acks=-1, timeout_ms=1000, topic_data=[
        req.TopicProduceData(name="t", partition_data=[req.PartitionProduceData(index=partition, records=b.build())])])
    return r.responses[0].partition_responses[0]


def end_v5(client, pid, epoch, commit, tid="tx"):
    r = client.call(K.END_TXN, 5, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
    return r.error_code, r.producer_id, r.producer_epoch


def txn_commit(client, pid, epoch, version, offset, topic="t", topic_id=None, group="g"):
    req = kproto.request(K.TXN_OFFSET_COMMIT).cls
    r = client.call(K.TXN_OFFSET_COMMIT, version, transactional_id="tx", group_id=group, producer_id=pid,
                    producer_epoch=epoch, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                    topics=[req.TxnOffsetCommitRequestTopic(
                        name=topic, topic_id=topic_id or kproto.Uuid.ZERO, partitions=[
                            req.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                committed_metadata="")])])
    return r.topics[0]


def committed_offset(client, group="g"):
    freq = kproto.request(K.OFFSET_FETCH).cls
    g = client.call(K.OFFSET_FETCH, 8, require_stable=True, groups=[freq.OffsetFetchRequestGroup(
        group_id=group, topics=[freq.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])]).groups[0]
    p = g.topics[0].partitions[0]
    return p.committed_offset, p.error_code


def markers(core, partition=0):
    lg = core.logs.get("t", partition)
    return [(b.producer_id, b.producer_epoch) for b in iter_batches(lg.read(0, 1 << 20)) if b.is_control]


def test_a_tv2_transaction_adds_its_partitions_implicitly_and_bumps_the_epoch_at_its_end(core):
    c = Client(core)
    _, pid, ep = init(c)
    # Produce v12 adds the partition; TxnOffsetCommit v5 the group's offsets, no AddOffsetsToTxn
    assert produce(c, pid, ep, 0, [b"a", b"b"]).error_code == 0
    assert txn_commit(c, pid, ep, 5, 2).partitions[0].error_code == 0
    assert core.txns.txns["tx"].partitions >= {("t", 0)}
    assert committed_offset(c) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    assert end_v5(c, pid, ep, True) == (0, pid, ep + 1)
    # the markers carry the bumped epoch; the offsets and records are committed
    assert markers(core) == [(pid, ep + 1)]
    assert committed_offset(c) == (2, 0)
    assert values(fetch(c, 0, committed=True).records) == [b"a", b"b"]
    # a retry of the EndTxn (the epoch it was sent with) is answered alike, nothing more
    assert end_v5(c, pid, ep, True) == (0, pid, ep + 1)
    assert end_v5(c, pid, ep, False)[0] == E.INVALID_TXN_STATE
    # the next transaction runs at the new epoch from sequence 0; an abort hides it
    ep += 1
    assert produce(c, pid, ep, 0, [b"gone"]).error_code == 0
    assert produce(c, pid, ep - 1, 2, [b"zombie"]).error_code == E.INVALID_PRODUCER_EPOCH
    assert end_v5(c, pid, ep, False) == (0, pid, ep + 1)
    assert markers(core) == [(pid, ep), (pid, ep + 1)]
    pd = fetch(c, 0, committed=True)
    assert pd.last_stable_offset == 5
    assert [(a.producer_id, a.first_offset) for a in pd.aborted_transactions] == [(pid, 3)]
    # a stale EndTxn (two epochs back) is fenced, and answers no producer id
    assert end_v5(c, pid, ep - 1, True) == (E.PRODUCER_FENCED, -1, -1)


def test_tv2_aborts_a_transaction_with_nothing_added_but_commits_none(core):
    c = Client(core)
    _, pid, ep = init(c)
    assert end_v5(c, pid, ep, True)[0] == E.INVALID_TXN_STATE
    assert end_v5(c, pid, ep, False) == (0, pid, ep + 1)      # Empty: aborted, epoch bumped
    assert end_v5(c, pid, ep + 1, False) == (0, pid, ep + 2)  # CompleteAbort, not a retry: again
    assert end_v5(c, pid, ep + 1, False) == (0, pid, ep + 2)  # that one's retry
    assert markers(core) == []
    # EndTxn before v5 keeps the epoch (transaction version 1)
    assert add(c, pid, ep + 2, [("t", 0)]) == {("t", 0): 0}
    assert end(c, pid, ep + 2, True, version=4) == 0
    assert markers(core) == [(pid, ep + 2)]


def test_an_exhausted_epoch_moves_the_producer_to_a_new_id_at_its_end(core):
    c = Client(core)
    _, pid, _ = init(c)
    core.txns.txns["tx"].producer_epoch = 32766   # as after 32766 transactions
    assert produce(c, pid, 32766, 0, [b"last"]).error_code == 0
    err, new_pid, new_epoch = end_v5(c, pid, 32766, True)
    assert (err, new_epoch) == (0, 0) and new_pid != pid
    assert markers(core) == [(pid, 32767)]          # the old id's markers at the top epoch
    assert end_v5(c, pid, 32766, True) == (0, new_pid, 0)   # a retry with the old id
    assert produce(c, new_pid, 0, 0, [b"first"]).error_code == 0
    assert end_v5(c, new_pid, 0, True) == (0, new_pid, 1)
    assert values(fetch(c, 0, committed=True).records) == [b"last", b"first"]


@pytest.mark.parametrize("version, code, message", [
    (9, E.INVALID_TXN_STATE, "Partition was not added to the transaction"),
    (11, E.TRANSACTION_ABORTABLE, None)])
def test_a_write_outside_the_transaction_is_refused_before_produce_v12(core, version, code, message):
    c = Client(core)
    _, pid, ep = init(c)
    r = produce(c, pid, ep, 0, [b"x"], version=version)
    assert (r.error_code, r.error_message, r.base_offset) == (code, message, -1)
    assert ("t", 0) not in core.txns.txns["tx"].partitions
    # the group coordinator verifies a TxnOffsetCommit alike (v4: TRANSACTION_ABORTABLE)
    assert txn_commit(c, pid, ep, 3, 1).partitions[0].error_code == E.INVALID_TXN_STATE
    assert txn_commit(c, pid, ep, 4, 1).partitions[0].error_code == E.TRANSACTION_ABORTABLE
    # a fenced producer is told INVALID_PRODUCER_EPOCH by the leader
    assert produce(c, pid, ep + 1, 0, [b"x"]).error_code == E.INVALID_PRODUCER_EPOCH
    assert txn_commit(c, pid, ep + 1, 5, 1).partitions[0].error_code == E.INVALID_PRODUCER_EPOCH


def test_a_transaction_being_completed_is_retriable_for_the_leader(core):
    c = Client(core)
    _, pid, ep = init(c)
    txn = core.txns.txns["tx"]
    add(c, pid, ep, [("t", 0)])
    txn.state = 2  # PrepareCommit: markers still on their way
    r = produce(c, pid, ep, 0, [b"x"], version=12)
    assert r.error_code == E.NOT_ENOUGH_REPLICAS
    assert r.error_message.endswith("Underlying error: CONCURRENT_TRANSACTIONS")


def test_without_verification_a_write_outside_the_transaction_is_appended(tmp_path, clock):
    core = with_topic(tmp_path / "d", clock, transaction_partition_verification_enable=False)
    try:
        c = Client(core)
        _, pid, ep = init(c)
        assert produce(c, pid, ep, 0, [b"x"], version=11).error_code == 0
        assert produce(c, pid, ep, 1, [b"y"], version=12).error_code == 0
        assert core.txns.txns["tx"].partitions == set()
    finally:
        core.close()


@pytest.mark.parametrize("tv", [1, 2])
def test_api_versions_follow_the_finalized_transaction_version(tmp_path, clock, tv):
    core = with_topic(tmp_path / "d", clock, transaction_version=tv)
    try:
        # v4: below it Kafka leaves out features whose range starts at 0
        r = Client(core).call(K.API_VERSIONS, 4, client_software_name="t", client_software_version="1")
        top = {k.api_key: k.max_version for k in r.api_keys}
        # AddPartitionsToTxn v5 either way: the leaders' verification (only brokers send v4+)
        want = {K.PRODUCE: 13, K.ADD_PARTITIONS_TO_TXN: 5, K.END_TXN: 5, K.TXN_OFFSET_COMMIT: 6} if tv == 2 else \
            {K.PRODUCE: 11, K.ADD_PARTITIONS_TO_TXN: 5, K.END_TXN: 4, K.TXN_OFFSET_COMMIT: 4}
        assert {k: top[k] for k in want} == want
        assert ("transaction.version", 0, 2) in [(f.name, f.min_version, f.max_version)
                                                 for f in r.supported_features]
        assert ("transaction.version", tv) in [(f.name, f.max_version_level) for f in r.finalized_features]
    finally:
        core.close()


def test_a_transaction_version_downgrade_takes_the_tv2_versions_away(tmp_path, clock):
    """UpdateFeatures down to transaction.version 1 (Kafka allows it): the broker then serves
    transactions version 1, and ApiVersions stops advertising the TV2 request versions."""
    core = with_topic(tmp_path / "d", clock)
    try:
        c = Client(core)
        top = lambda: {k.api_key: k.max_version for k in c.call(  # noqa: E731
            K.API_VERSIONS, 4, client_software_name="t", client_software_version="1").api_keys}
        assert top()[K.END_TXN] == 5 and core.txns.tv2
        from kproto.codecs import request as request_codec
        key = request_codec(K.UPDATE_FEATURES).cls.FeatureUpdateKey
        body = c.call(K.UPDATE_FEATURES, 1, timeout_ms=1000, validate_only=False, feature_updates=[
            key(feature="transaction.version", max_version_level=1, upgrade_type=2)])
        assert [(r.feature, r.error_code) for r in body.results] == [("transaction.version", 0)]
        assert top()[K.END_TXN] == 4 and top()[K.PRODUCE] == 11 and not core.txns.tv2
    finally:
        core.close()


def test_txn_offset_commit_v6_names_topics_by_id(core):
    c = Client(core)
    _, pid, ep = init(c)
    topic_id = core.logs.topics["t"].topic_id
    t = txn_commit(c, pid, ep, 6, 7, topic="", topic_id=topic_id)
    assert (t.topic_id, t.partitions[0].error_code) == (topic_id, 0)
    unknown = kproto.Uuid(uuid.uuid4())
    t = txn_commit(c, pid, ep, 6, 7, topic="", topic_id=unknown)
    assert (t.topic_id, t.partitions[0].error_code) == (unknown, E.UNKNOWN_TOPIC_ID)
    assert end_v5(c, pid, ep, True)[0] == 0
    assert committed_offset(c) == (7, 0)


def test_a_marker_from_an_older_coordinator_is_fenced(core):
    lg = core.logs.get("t", 1)
    append_txn_marker(lg, 9, 0, 5, True, 0)
    with pytest.raises(BrokerError) as exc:
        append_txn_marker(lg, 9, 0, 4, False, 0)
    assert exc.value.code == E.TRANSACTION_COORDINATOR_FENCED
    append_txn_marker(lg, 9, 1, 5, False, 0)   # the same coordinator, a newer producer epoch
    with pytest.raises(BrokerError) as exc:
        append_txn_marker(lg, 9, 0, 5, False, 0)
    assert exc.value.code == E.INVALID_PRODUCER_EPOCH
    assert lg.log_end_offset == 2


def test_the_coordinator_answers_once_its_transaction_log_record_is_committed(core):
    # Kafka answers InitProducerId, AddPartitionsToTxn and a TV2 leader's adding verification
    # after appending the transaction's record with acks=all: answered earlier, a coordinator
    # failover could lose the record and the new coordinator end the transaction without the
    # partition (its records then swept into the producer's next abort)
    c = Client(core)
    _, pid, epoch = init(c)
    held: list = []
    core.when_replicated = lambda log, offset, then, timeout_ms: held.append((log.topic, offset, then))
    answers: list = []
    core.txns.verify_or_add("tx", pid, epoch, [("t", 0)], True, answers.append)
    assert answers == [] and [h[0] for h in held] == ["__transaction_state"]
    held.pop()[2](E.NONE)
    assert answers == [{("t", 0): E.NONE}]
    # a partition already in the transaction waits for the record that put it there
    core.txns.verify_or_add("tx", pid, epoch, [("t", 1)], True, answers.append)
    core.txns.verify_or_add("tx", pid, epoch, [("t", 1)], False, answers.append)
    assert len(answers) == 1 and held[0][1] == held[1][1]
    # an append that failed: what Kafka's coordinator answers then (both retriable)
    held.pop()[2](E.REQUEST_TIMED_OUT)
    held.pop()[2](E.NOT_COORDINATOR)
    assert answers[1:] == [{("t", 1): E.COORDINATOR_NOT_AVAILABLE}, {("t", 1): E.NOT_COORDINATOR}]
    # refusals need no record: at once
    core.txns.verify_or_add("tx", pid, epoch + 1, [("t", 0)], True, answers.append)
    assert answers[-1] == {("t", 0): E.PRODUCER_FENCED} and held == []
    # the client's AddPartitionsToTxn and InitProducerId likewise
    responses: list = []
    req = kproto.request(K.ADD_PARTITIONS_TO_TXN).cls
    core.txns.add_partitions(req(v3_and_below_transactional_id="tx2", v3_and_below_producer_id=pid,
                                 v3_and_below_producer_epoch=epoch, v3_and_below_topics=[]), 3, responses.append)
    core.txns.init_producer_id(kproto.request(K.INIT_PRODUCER_ID).cls(
        transactional_id="tx2", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1), 4,
        responses.append)
    assert len(responses) == 1 and len(held) == 1  # the unknown id's refusal, then the new id's record
    held.pop()[2](E.NONE)
    assert responses[1].error_code == E.NONE and responses[1].producer_id >= 0
