"""The transaction state machine (Kafka's TransactionManager rules), without I/O."""
from __future__ import annotations

import pytest

import kproto
from kproto.client.transactions import (Action, TransactionAbortableError, TransactionFatalError,
                                        TransactionManager, TxnState)
from kproto.errors import KprotoError


def resp(api_key, **kw):
    return kproto.response(api_key).cls(**kw)


def add_result(results):
    cls = kproto.response(24).cls
    by_topic = {}
    for (t, p), code in results.items():
        by_topic.setdefault(t, []).append(cls.AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=code))
    return cls(results_by_topic_v3_and_below=[
        cls.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()])


def ready(tid="tx"):
    tm = TransactionManager(tid, 30000)
    body = tm.init_producer_id_request()
    assert (body.transactional_id, body.transaction_timeout_ms) == (tid, 30000)
    assert tm.handle_init_producer_id(resp(22, error_code=14)) is Action.RETRY  # loading
    assert tm.handle_init_producer_id(resp(22, error_code=16)) is Action.FIND_COORDINATOR
    assert tm.handle_init_producer_id(resp(22, producer_id=7, producer_epoch=3)) is Action.DONE
    assert (tm.state, tm.producer_id, tm.producer_epoch) == (TxnState.READY, 7, 3)
    return tm


def test_a_transaction_adds_each_partition_once_and_ends_with_endtxn():
    tm = ready()
    with pytest.raises(KprotoError, match="no transaction in progress"):
        tm.check_can_send()
    tm.begin()
    new = tm.new_partitions([("b", 1), ("a", 0), ("b", 1), ("b", 0)])
    assert new == [("a", 0), ("b", 0), ("b", 1)]
    body = tm.add_partitions_request(new)
    for v in range(4):  # the client versions all carry it, and it encodes
        kproto.request(24).encode(body, v)
    assert [(t.name, t.partitions) for t in body.v3_and_below_topics] == [("a", [0]), ("b", [0, 1])]
    assert (body.v3_and_below_producer_id, body.v3_and_below_producer_epoch) == (7, 3)
    # one partition must wait (the previous transaction still completing), the others are in
    action = tm.handle_add_partitions(add_result({("a", 0): 0, ("b", 0): 51, ("b", 1): 0}))
    assert action is Action.RETRY and tm.new_partitions(new) == [("b", 0)]
    assert tm.handle_add_partitions(add_result({("b", 0): 0})) is Action.DONE
    assert tm.new_partitions(new) == [] and tm.started
    end = tm.end_request(commit=True)
    assert (end.producer_id, end.producer_epoch, end.committed) == (7, 3, True)
    assert tm.handle_end(resp(26, error_code=51)) is Action.RETRY
    assert tm.state is TxnState.COMMITTING
    assert tm.handle_end(resp(26, error_code=0)) is Action.DONE
    assert tm.state is TxnState.READY and tm.partitions == set() and not tm.started


def test_an_empty_transaction_ends_without_endtxn():
    tm = ready()
    tm.begin()
    assert tm.end_request(commit=True) is None and tm.state is TxnState.READY
    tm.begin()
    assert tm.end_request(commit=False) is None and tm.state is TxnState.READY


def test_offsets_join_the_transaction():
    tm = ready()
    tm.begin()
    body = tm.add_offsets_request("g")
    assert (body.group_id, body.producer_id) == ("g", 7)
    assert tm.handle_add_offsets(resp(25, error_code=0)) is Action.DONE and tm.started
    commit = tm.txn_offset_commit_request("g", {("t", 1): 10, ("t", 0): 5, ("s", 0): 1},
                                          generation_id=4, member_id="m")
    assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
            for t in commit.topics] == [("s", [(0, 1)]), ("t", [(0, 5), (1, 10)])]
    codec = kproto.request(28)
    for v in codec.valid_versions[3:]:
        codec.encode(commit, v)
    # group metadata needs v3+, as Kafka's client says (TxnOffsetCommitRequest.Builder)
    with pytest.raises(kproto.UnsupportedVersionError):
        codec.encode(commit, 2)
    codec.encode(tm.txn_offset_commit_request("g", {("t", 0): 5}), 0)
    cls = kproto.response(28).cls
    ok = cls(topics=[cls.TxnOffsetCommitResponseTopic(name="t", partitions=[
        cls.TxnOffsetCommitResponsePartition(partition_index=0, error_code=0)])])
    assert tm.handle_txn_offset_commit(ok) is Action.DONE
    moved = cls(topics=[cls.TxnOffsetCommitResponseTopic(name="t", partitions=[
        cls.TxnOffsetCommitResponsePartition(partition_index=0, error_code=51),
        cls.TxnOffsetCommitResponsePartition(partition_index=1, error_code=16)])])
    assert tm.handle_txn_offset_commit(moved) is Action.FIND_COORDINATOR
    assert tm.end_request(commit=True).committed is True


def test_a_failed_partition_makes_the_transaction_abortable():
    tm = ready()
    tm.begin()
    with pytest.raises(TransactionAbortableError, match="TOPIC_AUTHORIZATION_FAILED"):
        tm.handle_add_partitions(add_result({("t", 0): 29}))
    assert tm.state is TxnState.ABORTABLE_ERROR
    with pytest.raises(KprotoError, match="cannot commit: the transaction failed earlier"):
        tm.end_request(commit=True)
    with pytest.raises(KprotoError, match="cannot send"):
        tm.check_can_send()
    assert tm.end_request(commit=False) is None  # nothing was added: ends locally
    tm.begin()  # and a new transaction can start


def test_a_failed_produce_makes_the_transaction_abortable_and_abort_sends_endtxn():
    from kproto.client.protocol import BrokerError

    tm = ready()
    tm.begin()
    tm.handle_add_partitions(add_result({("t", 0): 0}))
    tm.fail(BrokerError(45, "produce to t-0"))  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert tm.state is TxnState.ABORTABLE_ERROR
    end = tm.end_request(commit=False)
    assert end.committed is False
    assert tm.handle_end(resp(26, error_code=0)) is Action.DONE and tm.state is TxnState.READY


@pytest.mark.parametrize("code", [90, 47, 53])  # fenced, old epoch, not authorised
def test_fencing_is_fatal(code):
    tm = ready()
    tm.begin()
    tm.handle_add_partitions(add_result({("t", 0): 0}))
    tm.end_request(commit=True)
    with pytest.raises(TransactionFatalError) as info:
        tm.handle_end(resp(26, error_code=code))
    assert info.value.code == code and tm.state is TxnState.FATAL_ERROR
    for call in (tm.begin, lambda: tm.end_request(commit=False), tm.check_can_send):
        with pytest.raises(KprotoError, match="the producer failed earlier"):
            call()


def test_states_are_checked():
    tm = TransactionManager("tx")
    with pytest.raises(KprotoError, match="cannot begin a transaction in state uninitialized"):
        tm.begin()
    with pytest.raises(ValueError):
        TransactionManager("")
    tm = ready()
    tm.begin()
    with pytest.raises(KprotoError, match="in state in_transaction"):
        tm.begin()


def test_transaction_version_2_adds_partitions_with_the_produce_and_takes_the_bumped_epoch():
    tm = ready()
    tm.tv2 = True
    tm.begin()
    new = tm.new_partitions([("a", 0), ("a", 1)])
    tm.added_by_produce(new)                      # no AddPartitionsToTxn
    assert tm.new_partitions([("a", 0)]) == [] and tm.started
    body = tm.end_request(commit=True)
    assert (body.producer_id, body.producer_epoch) == (7, 3)
    assert tm.handle_end(resp(26, error_code=51)) is Action.RETRY   # markers of the last one
    assert tm.state is TxnState.COMMITTING
    # EndTxn v5 hands over the next epoch (or a new producer id once the epoch is exhausted)
    assert tm.handle_end(resp(26, producer_id=7, producer_epoch=4)) is Action.DONE
    assert (tm.state, tm.producer_id, tm.producer_epoch) == (TxnState.READY, 7, 4)
    tm.begin()
    tm.handle_txn_offset_commit(resp(28, topics=[]))  # v5 puts the group's offsets in it
    assert tm.started
    tm.end_request(commit=False)
    assert tm.handle_end(resp(26, producer_id=12, producer_epoch=0)) is Action.DONE
    assert (tm.producer_id, tm.producer_epoch) == (12, 0)


def test_transaction_version_1_keeps_the_epoch_an_endtxn_answers():
    tm = ready()
    tm.begin()
    tm.handle_add_partitions(add_result({("a", 0): 0}))
    tm.end_request(commit=True)
    # a v5 answer read by a version 1 manager (not sent by it) changes nothing
    assert tm.handle_end(resp(26, producer_id=7, producer_epoch=4)) is Action.DONE
    assert (tm.producer_id, tm.producer_epoch) == (7, 3)
