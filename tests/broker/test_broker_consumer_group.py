"""KIP-848 consumer groups through the sans-I/O core, time from a fake clock: epochs,
reconciliation (revoke before reassign), fencing, timeouts, offsets at member epochs, the
classic APIs' answers for consumer groups, records in __consumer_offsets and their reload."""
from __future__ import annotations

import pytest

import kproto
from kproto.broker.coordinators.consumer_group import (STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS,
                                          ConsumerMember, range_assign, reconcile, uniform_assign)
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage import read_internal

from broker_support import Client, fake_core

HB = K.CONSUMER_GROUP_HEARTBEAT
T1, T2 = Uuid(b"\x01" * 16), Uuid(b"\x02" * 16)


def make_core(path, clock, **cfg):
    cfg.setdefault("offsets_topic_num_partitions", 3)
    # a new target assignment at every bump (KIP-1263's batching is tested on its own)
    cfg.setdefault("group_consumer_assignment_interval_ms", 0)
    return fake_core(path, clock, **cfg)


@pytest.fixture
def core(tmp_path, clock):
    c = make_core(tmp_path / "data", clock)
    c._create_topic("jobs", 6)
    yield c
    c.close()


def tick(core, clock, ms):
    clock.advance(ms)
    core.advance_clock()


class Member:
    """A KIP-848 member that does what a well-behaved client does: it owns what the last
    assignment gave it (revoking at once), and reports it in every heartbeat."""

    def __init__(self, core, member_id, group="g", topics=("jobs",), version=1, **extra):
        self.client = Client(core)
        self.core, self.group, self.member_id, self.version = core, group, member_id, version
        self.topics, self.extra = list(topics), extra
        self.epoch = 0
        self.owned: dict = {}

    def hb(self, *, epoch=None, owned="mine", **fields):
        body = dict(group_id=self.group, member_id=self.member_id,
                    member_epoch=self.epoch if epoch is None else epoch, rebalance_timeout_ms=-1)
        if (self.epoch if epoch is None else epoch) == 0:
            body.update(rebalance_timeout_ms=30_000, subscribed_topic_names=self.topics,
                        topic_partitions=[], **self.extra)
        elif owned == "mine":
            body["topic_partitions"] = [dict(topic_id=t, partitions=sorted(ps)) for t, ps in self.owned.items()]
        elif owned is not None:
            body["topic_partitions"] = owned
        body.update(fields)
        req = kproto.request(HB).cls
        if body.get("topic_partitions") is not None:
            body["topic_partitions"] = [req.TopicPartitions(**tp) for tp in body["topic_partitions"]]
        r = self.client.call(HB, self.version, **body)
        if r.error_code == E.NONE and r.member_epoch >= 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.owned = {t.topic_id: set(t.partitions) for t in r.assignment.topic_partitions}
        return r

    @property
    def partitions(self) -> list[int]:
        return sorted(p for ps in self.owned.values() for p in ps)


def settle(members, rounds=6):
    for _ in range(rounds):
        for m in members:
            assert m.hb().error_code == E.NONE


# ------------------------------------------------------------------ pure parts
def test_uniform_assignor_balances_sticks_and_respects_subscriptions():
    topics = {"a": (T1, 6), "b": (T2, 3)}
    first = uniform_assign({"m1": {"a"}, "m2": {"a"}}, topics, {})
    assert sorted(len(a[T1]) for a in first.values()) == [3, 3]
    # a third member: each keeps two of its three, the newcomer gets one from each
    second = uniform_assign({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}, topics, first)
    assert [len(second[m][T1]) for m in ("m1", "m2", "m3")] == [2, 2, 2]
    assert second["m1"][T1] <= first["m1"][T1] and second["m2"][T1] <= first["m2"][T1]
    # heterogeneous: b only to m2, a spread so counts stay close
    mixed = uniform_assign({"m1": {"a"}, "m2": {"a", "b"}}, topics, {})
    assert mixed["m2"][T2] == {0, 1, 2} and T2 not in mixed["m1"]
    assert len(mixed["m1"][T1]) + len(mixed["m2"].get(T1, ())) == 6
    assert abs(len(mixed["m1"][T1]) - (len(mixed["m2"].get(T1, ())) + 3)) <= 1


def test_range_assignor_is_kafkas_ranges():
    out = range_assign({"b": {"a"}, "a": {"a"}, "c": {"a", "b"}}, {"a": (T1, 7), "b": (T2, 2)}, {})
    assert out["a"][T1] == {0, 1, 2} and out["b"][T1] == {3, 4} and out["c"][T1] == {5, 6}
    assert out["c"][T2] == {0, 1}


def test_reconcile_revokes_before_the_next_epoch_and_waits_for_unreleased():
    owner = ConsumerMember("a", member_epoch=1, assigned={T1: {0, 1, 2, 3}})
    epochs = {(T1, p): 1 for p in range(4)}
    target = {T1: {0, 1}}
    step = reconcile(owner, 2, target, lambda t, p: epochs.get((t, p), -1),
                     [(T1, [0, 1, 2, 3])])
    assert (step.state, step.member_epoch, step.assigned, step.pending_revocation) == \
        (UNREVOKED_PARTITIONS, 1, {T1: {0, 1}}, {T1: {2, 3}})
    # still reporting 2 and 3: no progress
    assert reconcile(step, 2, target, lambda t, p: 1, [(T1, [0, 1, 2, 3])]) is step
    done = reconcile(step, 2, target, lambda t, p: 1, [(T1, [0, 1])])
    assert (done.state, done.member_epoch, done.previous_member_epoch) == (STABLE, 2, 1)
    # the new owner of 2 and 3 reaches epoch 2 at once but gets them only once free
    newcomer = ConsumerMember("b")
    waiting = reconcile(newcomer, 2, {T1: {2, 3}}, lambda t, p: 1, [])
    assert (waiting.state, waiting.member_epoch, waiting.assigned) == (UNRELEASED_PARTITIONS, 2, {})
    got = reconcile(waiting, 2, {T1: {2, 3}}, lambda t, p: -1, [])
    assert (got.state, got.assigned) == (STABLE, {T1: {2, 3}})


# ------------------------------------------------------------------ through the core
def test_join_share_and_hand_over_only_after_revocation(core):
    a = Member(core, "member-a")
    r = a.hb()
    # a new group's first bump, then the subscription's: epoch 2, as Kafka 4.4
    assert r.error_code == E.NONE and r.member_epoch == 2 and r.heartbeat_interval_ms == 5000
    assert a.partitions == list(range(6))
    b = Member(core, "member-b")
    r = b.hb()
    # b is at the new epoch but gets nothing while a still owns everything
    assert r.member_epoch == 3 and b.partitions == []
    group = core.groups.consumer.groups["g"]
    assert group.state == "Reconciling" and group.members["member-b"].state == UNRELEASED_PARTITIONS
    ra = a.hb()
    # a must revoke three partitions first; it stays in epoch 2 until it did
    assert ra.member_epoch == 2 and len(a.partitions) == 3
    assert group.members["member-a"].state == UNREVOKED_PARTITIONS
    revoked = set(range(6)) - set(a.partitions)
    # b asks again before a acknowledged: still nothing
    assert b.hb(owned=None).assignment is None and b.partitions == []
    assert a.hb().member_epoch == 3               # owned now lists only the three it kept
    assert b.hb().member_epoch == 3 and set(b.partitions) == revoked
    assert group.state == "Stable" and group.group_epoch == 3 and group.assignment_epoch == 3
    # a heartbeat without changes carries no assignment (owned not sent)
    assert a.hb(owned=None).assignment is None


def test_fencing_and_unknown_members(core):
    a = Member(core, "member-a")
    a.hb()
    assert a.hb(epoch=5).error_code == E.FENCED_MEMBER_EPOCH
    b = Member(core, "member-b")
    b.hb()
    a.hb()
    a.hb()  # a at epoch 3 now
    assert a.epoch == 3
    # the previous epoch with a subset of the current assignment is accepted (lost answer)
    assert a.hb(epoch=2).error_code == E.NONE
    assert a.hb(epoch=2, owned=[dict(topic_id=core.logs.topics["jobs"].topic_id,
                                     partitions=list(range(6)))]).error_code == E.FENCED_MEMBER_EPOCH
    assert Member(core, "ghost").hb(epoch=3).error_code == E.UNKNOWN_MEMBER_ID
    assert Member(core, "x", group="nope").hb(epoch=3).error_code == E.GROUP_ID_NOT_FOUND
    # a fenced member rejoins under its id with epoch 0 and gets partitions again
    a.epoch = 0
    a.owned = {}
    assert a.hb().error_code == E.NONE and a.epoch > 0


def test_request_validation(core):
    m = Member(core, "")
    assert m.hb().error_code == E.INVALID_REQUEST                   # v1 needs a member id
    assert Member(core, "", version=0).hb().error_code == E.NONE     # v0: the broker makes one
    bad = Member(core, "m", server_assignor="sticky")
    r = bad.hb()
    assert r.error_code == E.UNSUPPORTED_ASSIGNOR and "uniform, range" in r.error_message
    assert Member(core, "m").hb(rebalance_timeout_ms=-1).error_code == E.INVALID_REQUEST
    assert Member(core, "m").hb(epoch=-3).error_code == E.INVALID_REQUEST
    assert Member(core, "m", topics=[], subscribed_topic_regex="jobs(").hb().error_code == \
        E.INVALID_REGULAR_EXPRESSION


def test_leave_hands_partitions_over_and_session_timeout_fences(core, clock):
    a, b, c = Member(core, "a"), Member(core, "b"), Member(core, "c")
    settle([a, b, c])
    assert sorted(len(m.partitions) for m in (a, b, c)) == [2, 2, 2]
    epoch = core.groups.consumer.groups["g"].group_epoch
    r = c.hb(epoch=-1)
    assert r.error_code == E.NONE and r.member_epoch == -1
    group = core.groups.consumer.groups["g"]
    assert "c" not in group.members and group.group_epoch == epoch + 1
    settle([a, b])
    assert sorted(a.partitions + b.partitions) == list(range(6))
    # b stops heartbeating: gone after group.consumer.session.timeout.ms
    for _ in range(10):
        tick(core, clock, 5_000)
        a.hb()
    assert "b" not in group.members and a.partitions == list(range(6))
    assert b.hb().error_code == E.UNKNOWN_MEMBER_ID


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(core, clock):
    a = Member(core, "a")
    a.hb()
    b = Member(core, "b")
    b.hb()
    a.hb()                                 # told to revoke three
    mine = {core.logs.topics["jobs"].topic_id: set(range(6))}
    for _ in range(5):                     # keeps heartbeating while holding on to all six
        tick(core, clock, 5_000)
        assert a.hb(owned=[dict(topic_id=t, partitions=sorted(p)) for t, p in mine.items()]).error_code \
            == E.NONE
    assert "a" in core.groups.consumer.groups["g"].members
    tick(core, clock, 5_000)               # 30 s since it was told to revoke: fenced
    assert "a" not in core.groups.consumer.groups["g"].members
    assert a.hb().error_code == E.UNKNOWN_MEMBER_ID
    b.hb()
    assert b.partitions == list(range(6))


def test_static_member_leaves_and_comes_back_with_its_assignment(core, clock):
    a = Member(core, "a1", instance_id="inst-a")
    b = Member(core, "b", instance_id=None)
    a.hb()
    b.hb()
    settle([a, b])
    kept = a.partitions
    assert a.hb(epoch=-2, instance_id="inst-a").member_epoch == -2
    group = core.groups.consumer.groups["g"]
    assert group.members["a1"].member_epoch == -2
    epoch = group.group_epoch
    # the instance restarts under a new member id: same partitions, no rebalance
    a2 = Member(core, "a2", instance_id="inst-a")
    r = a2.hb()
    assert r.error_code == E.NONE and a2.partitions == kept and "a1" not in group.members
    assert group.group_epoch == epoch and b.hb().error_code == E.NONE
    # a second process with that instance id while a2 holds it: refused
    assert Member(core, "a3", instance_id="inst-a").hb().error_code == E.UNRELEASED_INSTANCE_ID
    # the old member id is fenced
    assert a.hb(instance_id="inst-a").error_code == E.FENCED_INSTANCE_ID


def test_range_assignor_and_regex_subscription(core):
    core._create_topic("logs-1", 2)
    core._create_topic("logs-2", 2)
    a = Member(core, "a", topics=[], subscribed_topic_regex="logs-.*", server_assignor="range")
    b = Member(core, "b", topics=[], subscribed_topic_regex="logs-.*", server_assignor="range")
    settle([a, b])
    ids = {core.logs.topics[n].topic_id: n for n in ("logs-1", "logs-2")}
    assert {ids[t]: sorted(p) for t, p in a.owned.items()} == {"logs-1": [0], "logs-2": [0]}
    assert {ids[t]: sorted(p) for t, p in b.owned.items()} == {"logs-1": [1], "logs-2": [1]}
    # a topic created later that matches joins the subscription at the next heartbeat
    core._create_topic("logs-3", 2)
    settle([a, b])
    assert len(a.partitions) + len(b.partitions) == 6
    d = Client(core).call(K.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"], include_authorized_operations=False)
    assert d.groups[0].assignor_name == "range" and d.groups[0].group_state == "Stable"
    assert [m.subscribed_topic_regex for m in d.groups[0].members] == ["logs-.*", "logs-.*"]
    # a member subscribed by names has regex '' (not null), as Kafka describes it
    Member(core, "c", group="named").hb()
    d = Client(core).call(K.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["named"], include_authorized_operations=False)
    assert [m.subscribed_topic_regex for m in d.groups[0].members] == [""]


def test_offsets_at_member_epochs(core):
    a = Member(core, "a")
    a.hb()
    c = Client(core)
    req = kproto.request(K.OFFSET_COMMIT).cls

    def commit(version, epoch, member="a"):
        r = c.call(K.OFFSET_COMMIT, version, group_id="g", generation_id_or_member_epoch=epoch,
                   member_id=member, topics=[req.OffsetCommitRequestTopic(name="jobs", partitions=[
                       req.OffsetCommitRequestPartition(partition_index=0, committed_offset=42,
                                                        committed_metadata="")])])
        return r.topics[0].partitions[0].error_code

    assert commit(9, a.epoch + 1) == E.STALE_MEMBER_EPOCH
    assert commit(8, a.epoch) == E.UNSUPPORTED_VERSION
    assert commit(9, a.epoch, member="zz") == E.UNKNOWN_MEMBER_ID
    assert commit(9, -1, member="") == E.UNKNOWN_MEMBER_ID      # not while the group has members
    assert commit(9, a.epoch) == E.NONE
    fr = kproto.request(K.OFFSET_FETCH).cls

    def fetch(epoch, member="a"):
        return c.call(K.OFFSET_FETCH, 9, require_stable=False, groups=[fr.OffsetFetchRequestGroup(
            group_id="g", member_id=member, member_epoch=epoch, topics=None)]).groups[0]

    assert fetch(a.epoch + 3).error_code == E.STALE_MEMBER_EPOCH
    got = fetch(a.epoch)
    assert got.error_code == E.NONE and got.topics[0].partitions[0].committed_offset == 42
    assert fetch(-1, member=None).topics[0].partitions[0].committed_offset == 42   # admin


def test_classic_apis_on_a_consumer_group(core):
    a = Member(core, "a")
    a.hb()
    c = Client(core)
    d = c.call(K.DESCRIBE_GROUPS, 6, groups=["g"], include_authorized_operations=False).groups[0]
    assert d.error_code == E.GROUP_ID_NOT_FOUND and d.error_message == "Group g is not a classic group."
    assert c.call(K.DESCRIBE_GROUPS, 5, groups=["g"], include_authorized_operations=False).groups[0] \
        .group_state == "Dead"
    jreq = kproto.request(K.JOIN_GROUP).cls
    j = c.call(K.JOIN_GROUP, 5, group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
               member_id="", group_instance_id=None, protocol_type="consumer",
               protocols=[jreq.JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert j.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.call(K.HEARTBEAT, 4, group_id="g", generation_id=1, member_id="a",
                  group_instance_id=None).error_code == E.UNKNOWN_MEMBER_ID
    listed = c.call(K.LIST_GROUPS, 5, states_filter=[], types_filter=["consumer"]).groups
    assert [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in listed] == \
        [("g", "consumer", "Stable", "consumer")]
    assert c.call(K.LIST_GROUPS, 5, states_filter=[], types_filter=["classic"]).groups == []
    assert c.call(K.DELETE_GROUPS, 2, groups_names=["g"]).results[0].error_code == E.NON_EMPTY_GROUP
    d = c.call(K.CONSUMER_GROUP_DESCRIBE, 0, group_ids=["g", "none"], include_authorized_operations=False)
    g, none = d.groups
    assert (g.error_code, g.group_epoch, g.assignment_epoch, g.assignor_name) == (E.NONE, 2, 2, "uniform")
    assert g.members[0].assignment.topic_partitions[0].topic_name == "jobs"
    assert sorted(g.members[0].target_assignment.topic_partitions[0].partitions) == list(range(6))
    assert none.error_code == E.GROUP_ID_NOT_FOUND
    # once empty, the group can be deleted, and a classic member may then use the id
    a.hb(epoch=-1)
    assert c.call(K.DELETE_GROUPS, 2, groups_names=["g"]).results[0].error_code == E.NONE
    assert "g" not in core.groups.consumer.groups


def test_records_written_decoded_and_reloaded(tmp_path, clock):
    data = tmp_path / "data"
    core = make_core(data, clock)
    core._create_topic("jobs", 6)
    a, b = Member(core, "a"), Member(core, "b", instance_id="inst-b")
    settle([a, b])
    req = kproto.request(K.OFFSET_COMMIT).cls
    Client(core).call(K.OFFSET_COMMIT, 9, group_id="g", generation_id_or_member_epoch=a.epoch,
                      member_id="a", topics=[req.OffsetCommitRequestTopic(name="jobs", partitions=[
                          req.OffsetCommitRequestPartition(partition_index=1, committed_offset=7,
                                                           committed_metadata="")])])
    before = core.groups.consumer.groups["g"]
    snapshot = (before.group_epoch, before.assignment_epoch,
                {m: (x.member_epoch, x.state, x.assigned, x.instance_id) for m, x in before.members.items()},
                dict(before.target), dict(before.partition_epochs))
    core.close()
    tables = read_internal(str(data))
    for name in ("ConsumerGroupMetadata", "ConsumerGroupPartitionMetadata", "ConsumerGroupMemberMetadata",
                 "ConsumerGroupTargetAssignmentMetadata", "ConsumerGroupTargetAssignmentMember",
                 "ConsumerGroupCurrentMemberAssignment", "OffsetCommit"):
        assert tables[name].num_rows > 0, name
    epochs = [r["value"]["epoch"] for r in tables["ConsumerGroupMetadata"].to_pylist()]
    assert epochs == [2, 3]  # a new group's first member: 2 (see the first test)
    members = {r["key"]["member_id"] for r in tables["ConsumerGroupMemberMetadata"].to_pylist()}
    assert members == {"a", "b"}

    again = make_core(data, clock)
    try:
        after = again.groups.consumer.groups["g"]
        assert (after.group_epoch, after.assignment_epoch,
                {m: (x.member_epoch, x.state, x.assigned, x.instance_id) for m, x in after.members.items()},
                dict(after.target), dict(after.partition_epochs)) == snapshot
        assert after.offsets[("jobs", 1)].offset == 7 and "g" not in again.groups.groups
        # the members carry on at their epochs
        a.core = b.core = again
        a.client, b.client = Client(again), Client(again)
        assert a.hb().error_code == E.NONE and b.hb().error_code == E.NONE
        # sessions restart at load: silent members are fenced one session later
        tick(again, clock, 46_000)
        assert again.groups.consumer.groups["g"].members == {}
    finally:
        again.close()


# ------------------------------------------------------------------ Kafka 4.4's epochs
def test_a_new_group_moves_away_from_epoch_0_with_a_bump_of_its_own(core):
    """Kafka 4.4: a new group's first heartbeat bumps once for the group and once for the
    subscription; a member joining with no subscription changes nothing."""
    assert Member(core, "a").hb().member_epoch == 2
    assert Member(core, "x", group="nothing", topics=[]).hb().member_epoch == 1
    assert Member(core, "y", group="unknown", topics=["no-such-topic"]).hb().member_epoch == 2
    quiet = Member(core, "q", topics=[])
    assert quiet.hb().member_epoch == 2                      # the group's epoch, no bump
    group = core.groups.consumer.groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (2, 2)
    assert Member(core, "b").hb().member_epoch == 3          # a subscription: one bump


def test_the_last_member_leaving_brings_the_assignment_epoch_along(core):
    a, b = Member(core, "a"), Member(core, "b")
    settle([a, b])
    assert b.hb(epoch=-1).member_epoch == -1
    group = core.groups.consumer.groups["g"]
    assert group.group_epoch == 4 and group.assignment_epoch == 3   # a still has a member to reconcile
    assert a.hb(epoch=-1).member_epoch == -1
    assert (group.group_epoch, group.assignment_epoch) == (5, 5)


def test_only_a_full_heartbeat_or_a_changed_assignment_carries_the_assignment(core):
    a = Member(core, "a")
    a.hb()
    # owned partitions alone (no rebalance timeout, no subscription) are not a full request
    assert a.hb().assignment is None
    full = a.hb(rebalance_timeout_ms=30_000, subscribed_topic_names=["jobs"])
    assert full.assignment is not None and a.partitions == list(range(6))


def test_assignments_are_batched_by_the_assignment_interval(tmp_path, clock):
    """KIP-1263 (group.consumer.assignment.interval.ms, 1 s by default): a bump within the
    interval of the last assignment waits for a heartbeat after it; no timer runs it."""
    core = make_core(tmp_path / "data", clock, group_consumer_assignment_interval_ms=1000)
    core._create_topic("jobs", 2)
    try:
        a = Member(core, "a")
        assert a.hb().member_epoch == 2 and a.partitions == [0, 1]   # a new group: at once
        b = Member(core, "b")
        r = b.hb()
        group = core.groups.consumer.groups["g"]
        # the group is at 3, its assignment still at 2: b is at 2 with nothing
        assert (r.member_epoch, b.partitions, group.group_epoch, group.assignment_epoch) == (2, [], 3, 2)
        assert group.state == "Assigning"
        tick(core, clock, 999)
        assert a.hb().member_epoch == 2 and group.assignment_epoch == 2
        tick(core, clock, 1)
        assert group.assignment_epoch == 2                          # nothing without a heartbeat
        settle([a, b])
        assert group.assignment_epoch == 3 and sorted(a.partitions + b.partitions) == [0, 1]
        assert a.epoch == b.epoch == 3
    finally:
        core.close()
