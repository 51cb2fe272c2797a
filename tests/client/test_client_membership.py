"""The KIP-848 member state machine (kproto.client.membership), without sockets: requests are
built and encoded with kproto's codec, answers are ConsumerGroupHeartbeatResponse objects as a
broker writes them, the clock is a number the test moves."""
from __future__ import annotations

import pytest

import kproto
from kproto.client.membership import (ConsumerMembership, MemberState, LEAVE_GROUP_MEMBER_EPOCH,
                                      LEAVE_GROUP_STATIC_MEMBER_EPOCH, new_member_id)
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode

REQ = kproto.request(68)
RESP = kproto.response(68).cls
ORDERS, PAYMENTS = Uuid(b"\x01" * 16), Uuid(b"\x02" * 16)
NAMES = {ORDERS: "orders", PAYMENTS: "payments"}


def answer(member: ConsumerMembership, epoch: int, assignment=None, *, interval_ms: int = 3000,
           error: int = 0) -> object:
    """A broker's answer; ``assignment``: {topic id: [partitions]} or None (unchanged)."""
    a = None if assignment is None else RESP.Assignment(topic_partitions=[
        RESP.TopicPartitions(topic_id=t, partitions=ps) for t, ps in assignment.items()])
    return RESP(error_code=error, member_id=None if error else member.member_id, member_epoch=epoch,
                heartbeat_interval_ms=interval_ms, assignment=a)


def roundtrip(req, version: int = 1):
    """What the broker reads: the request through kproto's encoder and decoder."""
    return REQ.decode(REQ.encode(req, version), version)


def ids(req) -> dict:
    return None if req.topic_partitions is None else {t.topic_id: list(t.partitions) for t in req.topic_partitions}


def joined(topics=("orders",), **kw) -> ConsumerMembership:
    m = ConsumerMembership("g", topics=topics, rebalance_timeout_ms=45000, **kw)
    m.join()
    return m


def test_member_id_is_the_clients_own_uuid():
    mid = new_member_id()
    assert len(mid) == 22 and "=" not in mid and mid != new_member_id()


def test_join_sends_every_field_then_only_changes():
    m = joined(rack_id="r1", server_assignor="uniform")
    assert m.state is MemberState.JOINING and m.time_to_heartbeat(0.0) == 0.0
    req = roundtrip(m.heartbeat_request(0.0))
    assert (req.group_id, req.member_id, req.member_epoch) == ("g", m.member_id, 0)
    assert req.rebalance_timeout_ms == 45000 and req.rack_id == "r1" and req.server_assignor == "uniform"
    # both subscription fields, the unused one empty (librdkafka's form; Kafka reads "" as none)
    assert req.subscribed_topic_names == ["orders"] and req.subscribed_topic_regex == ""
    assert req.topic_partitions == []                       # owns nothing yet
    assert m.time_to_heartbeat(0.0) is None                 # one heartbeat in flight at a time
    m.on_heartbeat_response(answer(m, 5, {ORDERS: [0, 1]}, interval_ms=2500), 0.1)
    assert (m.member_epoch, m.heartbeat_interval, m.state) == (5, 2.5, MemberState.RECONCILING)
    plan = m.reconcile(NAMES)
    assert plan.revoked == frozenset() and plan.added == {("orders", 0), ("orders", 1)}
    assert m.reconciled(plan) and m.state is MemberState.ACKNOWLEDGING
    assert m.time_to_heartbeat(0.2) == 0.0                  # the acknowledgement goes at once
    ack = roundtrip(m.heartbeat_request(0.2))
    assert ack.member_epoch == 5 and ids(ack) == {ORDERS: [0, 1]}
    # unchanged fields are null ("no change" for the broker)
    assert ack.subscribed_topic_names is None and ack.subscribed_topic_regex is None
    assert ack.rebalance_timeout_ms == -1 and ack.rack_id is None and ack.server_assignor is None
    m.on_heartbeat_response(answer(m, 5, interval_ms=2500), 0.25)
    assert m.state is MemberState.STABLE
    # then on the broker's interval, and only the epoch
    assert m.time_to_heartbeat(0.25) == pytest.approx(2.5)
    assert m.time_to_heartbeat(3.0) == 0.0
    plain = roundtrip(m.heartbeat_request(3.0))
    assert plain.topic_partitions is None and plain.subscribed_topic_names is None


def test_pattern_subscription_sends_the_regex():
    m = ConsumerMembership("g", pattern="^ord.*")
    m.join()
    req = roundtrip(m.heartbeat_request(0.0))
    assert req.subscribed_topic_regex == "^ord.*" and req.subscribed_topic_names == []
    with pytest.raises(ValueError):
        ConsumerMembership("g", topics=["a"], pattern="b")


def test_subscription_change_is_sent_once():
    m = joined()
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 1, {}), 0.0)
    assert m.state is MemberState.STABLE
    m.subscribe(["orders", "payments"])
    req = m.heartbeat_request(0.0)
    assert req.subscribed_topic_names == ["orders", "payments"]
    m.on_heartbeat_response(answer(m, 1), 0.0)
    assert m.heartbeat_request(1.0).subscribed_topic_names is None


def test_reconciliation_revokes_before_it_assigns():
    m = joined(topics=("orders", "payments"))
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 1, {ORDERS: [0, 1, 2, 3]}), 0.0)
    m.reconciled(m.reconcile(NAMES))
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 1), 0.0)
    assert m.owned == {("orders", p) for p in range(4)} and m.state is MemberState.STABLE
    # a second member joined: the broker takes orders-2 and orders-3 away first (same epoch)
    m.heartbeat_request(3.0)
    m.on_heartbeat_response(answer(m, 1, {ORDERS: [0, 1]}), 3.0)
    assert m.state is MemberState.RECONCILING
    plan = m.reconcile(NAMES)
    assert plan.revoked == {("orders", 2), ("orders", 3)} and plan.added == frozenset()
    assert m.reconcile(NAMES) is None                       # one reconciliation at a time
    # while the consumer commits the revoked offsets, heartbeats still carry what it owns
    assert m.owned == {("orders", p) for p in range(4)}
    assert m.reconciled(plan)
    ack = m.heartbeat_request(3.1)
    assert ids(ack) == {ORDERS: [0, 1]}
    # later, new partitions with a new epoch: only additions
    m.on_heartbeat_response(answer(m, 2, {ORDERS: [0, 1], PAYMENTS: [0]}), 3.2)
    plan = m.reconcile(NAMES)
    assert plan.revoked == frozenset() and plan.added == {("payments", 0)} and plan.epoch == 2
    m.reconciled(plan)
    assert m.member_epoch == 2 and m.owned == {("orders", 0), ("orders", 1), ("payments", 0)}


def test_target_with_unknown_topic_id_waits_for_metadata():
    m = joined()
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 1, {ORDERS: [0], PAYMENTS: [1]}), 0.0)
    assert m.unresolved({ORDERS: "orders"}) == {PAYMENTS}
    assert m.reconcile({ORDERS: "orders"}) is None and m.state is MemberState.RECONCILING
    assert m.reconcile(NAMES).added == {("orders", 0), ("payments", 1)}


def test_a_newer_target_during_reconciliation_is_reconciled_next():
    m = joined()
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 1, {ORDERS: [0, 1, 2]}), 0.0)
    plan = m.reconcile(NAMES)
    m.heartbeat_request(1.0)                                 # heartbeats go on meanwhile
    m.on_heartbeat_response(answer(m, 2, {ORDERS: [0]}), 1.0)
    assert m.reconciled(plan) and m.state is MemberState.RECONCILING
    nxt = m.reconcile(NAMES)
    assert nxt.revoked == {("orders", 1), ("orders", 2)} and nxt.epoch == 2


@pytest.mark.parametrize("code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
def test_fencing_releases_everything_and_rejoins_with_epoch_zero(code):
    m = joined()
    first_id = m.member_id
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 3, {ORDERS: [0, 1]}), 0.0)
    m.reconciled(m.reconcile(NAMES))
    m.heartbeat_request(0.1)
    m.on_heartbeat_response(answer(m, 4, {ORDERS: [0, 1, 2]}), 0.1)
    plan = m.reconcile(NAMES)                                # being applied when the fence comes
    m.heartbeat_request(1.0)
    m.on_heartbeat_response(answer(m, 4, error=code), 1.0)
    assert m.state is MemberState.FENCED and m.time_to_heartbeat(1.0) is None
    assert not m.reconciled(plan)                            # the reconciliation went stale
    lost = m.owned
    assert lost == {("orders", 0), ("orders", 1)}            # the consumer drops them, no commit
    m.released()
    assert m.state is MemberState.JOINING and m.owned == frozenset() and m.member_epoch == 0
    req = roundtrip(m.heartbeat_request(1.1))
    assert req.member_epoch == 0 and req.member_id == first_id
    assert req.subscribed_topic_names == ["orders"] and req.topic_partitions == []


def test_leave_dynamic_and_static():
    m = joined()
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 4, {ORDERS: [0]}), 0.0)
    m.reconciled(m.reconcile(NAMES))
    owned = m.leave()
    assert owned == {("orders", 0)} and m.state is MemberState.PREPARE_LEAVING
    assert m.time_to_heartbeat(0.0) is None                  # not before the consumer revoked
    m.left_prepared()
    req = roundtrip(m.heartbeat_request(0.1))
    assert (req.member_epoch, req.member_id) == (LEAVE_GROUP_MEMBER_EPOCH, m.member_id)
    m.on_heartbeat_response(answer(m, LEAVE_GROUP_MEMBER_EPOCH), 0.2)
    assert m.state is MemberState.UNSUBSCRIBED

    s = joined(instance_id="host-1")
    assert roundtrip(s.heartbeat_request(0.0)).instance_id == "host-1"
    s.on_heartbeat_response(answer(s, 1, {}), 0.0)
    s.leave()
    s.left_prepared()
    req = roundtrip(s.heartbeat_request(0.1))
    assert req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and req.instance_id == "host-1"


def test_answer_to_an_earlier_heartbeat_does_not_end_the_leave():
    m = joined()
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 1, {}), 0.0)
    m.heartbeat_request(3.0)                                 # a normal heartbeat in flight
    m.leave()
    m.left_prepared()
    m.on_heartbeat_response(answer(m, 1, {ORDERS: [0]}), 3.1)
    assert m.state is MemberState.LEAVING and m.time_to_heartbeat(3.1) == 0.0
    assert m.heartbeat_request(3.1).member_epoch == LEAVE_GROUP_MEMBER_EPOCH


def test_errors_retriable_and_fatal():
    m = joined()
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 0, error=ErrorCode.COORDINATOR_NOT_AVAILABLE), 1.0)
    assert m.state is MemberState.JOINING and m.time_to_heartbeat(1.0) == pytest.approx(m.retry_backoff)
    m.heartbeat_request(1.2)
    m.on_heartbeat_failure(1.3)                              # no answer: all fields again later
    assert m.time_to_heartbeat(1.3) == pytest.approx(m.retry_backoff)
    req = m.heartbeat_request(1.5)
    assert req.subscribed_topic_names == ["orders"]
    m.on_heartbeat_response(answer(m, 0, error=ErrorCode.GROUP_AUTHORIZATION_FAILED), 1.6)
    assert m.state is MemberState.FATAL and m.error[0] == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert m.time_to_heartbeat(2.0) is None


def test_joining_without_an_assignment_waits_for_the_interval():
    # librdkafka's mock answers a member whose partitions are still owned elsewhere with epoch 0
    # and no assignment: the member asks again on the interval, not in a tight loop
    m = joined()
    m.heartbeat_request(0.0)
    m.on_heartbeat_response(answer(m, 0, None, interval_ms=3000), 0.0)
    assert m.state is MemberState.JOINING and m.time_to_heartbeat(0.0) == pytest.approx(3.0)
