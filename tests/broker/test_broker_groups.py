"""The classic group coordinator through the sans-I/O core, time from a fake clock."""
from __future__ import annotations

import pytest

import kproto
from kproto.broker.coordinators.offsets_topic import partition_for
from kproto.error_codes import ErrorCode as E
from kproto.javahash import java_string_hash
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage import read_internal

from broker_support import Client, fake_core

SESSION, REBALANCE = 10_000, 30_000


def make_core(path, clock, **cfg):
    cfg.setdefault("offsets_topic_num_partitions", 5)
    return fake_core(path, clock, **cfg)


@pytest.fixture
def core(tmp_path, clock):
    c = make_core(tmp_path / "data", clock)
    yield c
    c.close()


def tick(core, clock, ms):
    clock.advance(ms)
    core.advance_clock()


def join_body(group, member_id="", instance=None, meta=b"m", protocols=("range",)):
    req = kproto.request(K.JOIN_GROUP).cls
    return req(group_id=group, session_timeout_ms=SESSION, rebalance_timeout_ms=REBALANCE,
               member_id=member_id, group_instance_id=instance, protocol_type="consumer",
               protocols=[req.JoinGroupRequestProtocol(name=p, metadata=meta) for p in protocols])


def join(client, group, member_id="", **kw):
    """Send a JoinGroup v5; returns a function giving its answer (None while it waits)."""
    i = client.send(K.JOIN_GROUP, 5, join_body(group, member_id, **kw))
    return lambda: client.answer(i) if len(client.channel.frames) > i else None


def sync(client, group, gen, member_id, assignments=None, instance=None):
    req = kproto.request(K.SYNC_GROUP).cls
    i = client.send(K.SYNC_GROUP, 5, req(
        group_id=group, generation_id=gen, member_id=member_id, group_instance_id=instance,
        protocol_type="consumer", protocol_name="range",
        assignments=[req.SyncGroupRequestAssignment(member_id=m, assignment=a)
                     for m, a in (assignments or {}).items()]))
    return lambda: client.answer(i) if len(client.channel.frames) > i else None


def heartbeat(client, group, gen, member_id, instance=None):
    return client.call(K.HEARTBEAT, 4, group_id=group, generation_id=gen, member_id=member_id,
                       group_instance_id=instance).error_code


def joined(core, clock, group, n, delay=3000):
    """``n`` clients joined (member id round trip) and synced; returns [(client, member id)]
    and the generation; the first is the leader."""
    out = []
    waits = []
    for _ in range(n):
        c = Client(core)
        first = join(c, group)()
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
        waits.append(join(c, group, first.member_id))
        out.append((c, first.member_id))
    assert all(w() is None for w in waits)  # the initial rebalance delay holds them
    tick(core, clock, delay)
    if n > 1:  # members arrived during the first delay: one more delay
        assert all(w() is None for w in waits)
        tick(core, clock, delay)
    answers = [w() for w in waits]
    assert {a.error_code for a in answers} == {0}
    gen = answers[0].generation_id
    leader = answers[0].leader
    out.sort(key=lambda cm: cm[1] != leader)
    syncs = [sync(c, group, gen, m, {mm: mm.encode() for _, mm in out} if m == leader else None)
             for c, m in out[::-1]]  # followers first: they wait for the leader
    assert all(s() is not None for s in syncs)
    return out, gen


def test_partition_for_is_kafkas_abs_hashcode_modulo():
    h = java_string_hash("my-group")
    signed = h - (1 << 32) if h >= 1 << 31 else h
    assert partition_for("my-group", 50) == abs(signed) % 50
    assert partition_for("", 50) == 0
    # a group id whose hashCode is Integer.MIN_VALUE goes to partition 0 (Utils.abs)
    assert partition_for("polygenelubricants", 50) == 0
    assert java_string_hash("polygenelubricants") == 1 << 31


def test_member_id_required_then_the_initial_delay_then_the_leaders_assignment(core, clock):
    a, b = Client(core), Client(core)
    ra = join(a, "g")()
    assert ra.error_code == E.MEMBER_ID_REQUIRED and ra.member_id.startswith("test-")
    wa = join(a, "g", ra.member_id)
    assert wa() is None                                 # waiting for the initial delay
    tick(core, clock, 2000)
    rb = join(b, "g")()
    wb = join(b, "g", rb.member_id)
    tick(core, clock, 1000)                             # the first delay ends: a member came, wait again
    assert wa() is None and wb() is None
    tick(core, clock, 3000)
    ja, jb = wa(), wb()
    assert (ja.error_code, jb.error_code) == (0, 0)
    assert ja.generation_id == jb.generation_id == 1 and ja.protocol_name == "range"
    leader, follower = (ja, jb) if ja.leader == ja.member_id else (jb, ja)
    assert {m.member_id for m in leader.members} == {ra.member_id, rb.member_id} and follower.members == []
    lc, fc = (a, b) if leader is ja else (b, a)
    sf = sync(fc, "g", 1, follower.member_id)
    assert sf() is None                                 # the follower waits for the leader
    sl = sync(lc, "g", 1, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"})
    assert (sl().error_code, sl().assignment, sf().error_code, sf().assignment) == (0, b"L", 0, b"F")
    assert heartbeat(fc, "g", 1, follower.member_id) == 0
    assert heartbeat(fc, "g", 0, follower.member_id) == E.ILLEGAL_GENERATION
    assert heartbeat(fc, "g", 1, "nobody") == E.UNKNOWN_MEMBER_ID
    d = a.call(K.DESCRIBE_GROUPS, 5, groups=["g", "none"], include_authorized_operations=False)
    g, none = d.groups
    assert (g.group_state, g.protocol_type, g.protocol_data, len(g.members)) == ("Stable", "consumer", "range", 2)
    assert {m.member_assignment for m in g.members} == {b"L", b"F"}
    assert (none.error_code, none.group_state) == (0, "Dead")
    d6 = a.call(K.DESCRIBE_GROUPS, 6, groups=["none"], include_authorized_operations=False)
    assert d6.groups[0].error_code == E.GROUP_ID_NOT_FOUND


def test_a_joining_member_rebalances_the_group_and_a_member_that_does_not_rejoin_is_dropped(core, clock):
    (members, gen) = joined(core, clock, "g", 2)
    (a, ma), (b, mb) = members
    c = Client(core)
    mc = join(c, "g")().member_id
    wc = join(c, "g", mc)
    assert wc() is None
    assert heartbeat(a, "g", gen, ma) == E.REBALANCE_IN_PROGRESS
    wa = join(a, "g", ma)
    # b keeps heartbeating (a consumer busy between polls) but does not rejoin: the rebalance
    # timeout (30 s), not its session, puts it out
    for _ in range(REBALANCE // 5000 - 1):
        tick(core, clock, 5000)
        assert heartbeat(b, "g", gen, mb) == E.REBALANCE_IN_PROGRESS
        assert wa() is None
    tick(core, clock, 5000)
    assert wa().error_code == 0 and wc().error_code == 0 and wa().generation_id == gen + 1
    assert {m.member_id for m in (wa() if wa().leader == ma else wc()).members} == {ma, mc}
    assert heartbeat(b, "g", gen, mb) == E.UNKNOWN_MEMBER_ID


def test_a_session_expiry_removes_the_member_and_the_others_rebalance(core, clock):
    (members, gen) = joined(core, clock, "g", 2)
    (a, ma), (b, mb) = members
    tick(core, clock, SESSION // 2)                    # a heartbeats, b does not
    assert heartbeat(a, "g", gen, ma) == 0
    tick(core, clock, SESSION // 2 - 1)
    assert heartbeat(a, "g", gen, ma) == 0
    tick(core, clock, 1)                               # b's session is over
    assert heartbeat(a, "g", gen, ma) == E.REBALANCE_IN_PROGRESS
    assert heartbeat(b, "g", gen, mb) == E.UNKNOWN_MEMBER_ID
    ra = join(a, "g", ma)()                            # alone now: completes at once
    assert ra.error_code == 0 and ra.generation_id == gen + 1 and [m.member_id for m in ra.members] == [ma]


def test_leave_group_v3_batch_and_v0_then_the_empty_group_is_deleted(core, clock):
    (members, gen) = joined(core, clock, "g", 3)
    (a, ma), (b, mb), (c, mc) = members
    req = kproto.request(K.LEAVE_GROUP).cls
    r = a.call(K.LEAVE_GROUP, 3, group_id="g", members=[
        req.MemberIdentity(member_id=mb), req.MemberIdentity(member_id="ghost")])
    assert [(m.member_id, m.error_code) for m in r.members] == [(mb, 0), ("ghost", E.UNKNOWN_MEMBER_ID)]
    assert a.call(K.DELETE_GROUPS, 2, groups_names=["g"]).results[0].error_code == E.NON_EMPTY_GROUP
    # v3: a non-empty group comes without a message, as Apache Kafka 4.4 answers it
    r = a.call(K.DELETE_GROUPS, 3, groups_names=["g"]).results[0]
    assert (r.error_code, r.error_message) == (E.NON_EMPTY_GROUP, None)
    assert a.call(K.LEAVE_GROUP, 0, group_id="g", member_id=mc).error_code == 0
    ra = join(a, "g", ma)()
    assert ra.error_code == 0 and [m.member_id for m in ra.members] == [ma]
    assert a.call(K.LEAVE_GROUP, 1, group_id="g", member_id=ma).error_code == 0
    lst = a.call(K.LIST_GROUPS, 4, states_filter=["Empty"])
    assert [(g.group_id, g.group_state) for g in lst.groups] == [("g", "Empty")]
    r = a.call(K.DELETE_GROUPS, 3, groups_names=["g", "g"[:0], "nope"])
    # the empty group id is an unknown group to Kafka's DeleteGroups
    assert [(x.error_code, x.error_message) for x in r.results] == [
        (0, None), (E.GROUP_ID_NOT_FOUND, "Group  not found."), (E.GROUP_ID_NOT_FOUND, "Group nope not found.")]
    assert a.call(K.LIST_GROUPS, 4, states_filter=[]).groups == []


# its subscription's metadata may differ (a fresh consumer owns no partitions, knows no
# generation): as in Kafka, only a change of the group's selected protocol would rebalance
@pytest.mark.parametrize("meta", [b"m", b"fresh metadata"])
def test_a_static_member_restarting_gets_its_assignment_back_without_a_rebalance(core, clock, meta):
    a, b = Client(core), Client(core)
    wa, wb = join(a, "s", instance="i-a"), join(b, "s", instance="i-b")  # static: no MEMBER_ID_REQUIRED
    tick(core, clock, 3000)                            # two initial delays: b came during the first
    tick(core, clock, 3000)
    ja, jb = wa(), wb()
    assert ja.error_code == jb.error_code == 0
    leader, follower = (ja, jb) if ja.leader == ja.member_id else (jb, ja)
    lc, fc = (a, b) if leader is ja else (b, a)
    f_inst = "i-b" if leader is ja else "i-a"
    sf = sync(fc, "s", 1, follower.member_id, instance=f_inst)
    sync(lc, "s", 1, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"},
         instance="i-a" if leader is ja else "i-b")
    assert sf().assignment == b"F"
    # the follower restarts: same instance id, no member id
    again = Client(core)
    r = join(again, "s", instance=f_inst, meta=meta)()
    assert r is not None, "the rejoin waits for a rebalance"
    assert r.error_code == 0 and r.member_id != follower.member_id and r.generation_id == 1
    s = sync(again, "s", 1, r.member_id, instance=f_inst)()
    assert (s.error_code, s.assignment) == (0, b"F")
    # the old incarnation is fenced
    assert heartbeat(fc, "s", 1, follower.member_id, instance=f_inst) == E.FENCED_INSTANCE_ID
    d = a.call(K.DESCRIBE_GROUPS, 5, groups=["s"], include_authorized_operations=False).groups[0]
    assert d.group_state == "Stable" and {m.group_instance_id for m in d.members} == {"i-a", "i-b"}


def commit(client, group, offsets, gen=-1, member="", version=8):
    req = kproto.request(K.OFFSET_COMMIT).cls
    topics: dict = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(req.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_leader_epoch=3, committed_metadata="md"))
    r = client.call(K.OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=gen,
                    member_id=member, group_instance_id=None, topics=[
                        req.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def test_offsets_commit_fetch_delete_and_a_restart_reads_them_back(tmp_path, clock):
    core = make_core(tmp_path / "d", clock, num_partitions=3)
    c = Client(core)
    c.call(K.METADATA, 12, topics=[kproto.request(3).cls.MetadataRequestTopic(name="t")],
           allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    assert commit(c, "simple", {("t", 0): 5, ("t", 1): 7, ("nope", 0): 1}) == {
        ("t", 0): 0, ("t", 1): 0, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert commit(c, "other", {("t", 2): 9}) == {("t", 2): 0}
    assert commit(c, "simple", {("t", 0): 6}, gen=4, member="m") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    assert commit(c, "fresh", {("t", 0): 6}, gen=4, member="m") == {("t", 0): E.ILLEGAL_GENERATION}
    req = kproto.request(K.OFFSET_FETCH).cls
    r = c.call(K.OFFSET_FETCH, 7, group_id="simple", require_stable=True, topics=[
        req.OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1, 2])])
    assert [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata)
            for p in r.topics[0].partitions] == [(0, 5, 3, "md"), (1, 7, 3, "md"), (2, -1, -1, "")]
    r = c.call(K.OFFSET_FETCH, 9, require_stable=False, groups=[
        req.OffsetFetchRequestGroup(group_id="simple", topics=None),
        req.OffsetFetchRequestGroup(group_id="other", topics=None),
        req.OffsetFetchRequestGroup(group_id="unknown", topics=None)])
    got = {g.group_id: {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}
           for g in r.groups}
    assert got == {"simple": {("t", 0): 5, ("t", 1): 7}, "other": {("t", 2): 9}, "unknown": {}}
    dreq = kproto.request(K.OFFSET_DELETE).cls
    r = c.call(K.OFFSET_DELETE, 0, group_id="simple", topics=[dreq.OffsetDeleteRequestTopic(
        name="t", partitions=[dreq.OffsetDeleteRequestPartition(partition_index=1)])])
    assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0
    r = c.call(K.OFFSET_DELETE, 0, group_id="absent", topics=[])
    assert r.error_code == E.GROUP_ID_NOT_FOUND
    groups_before = {g: (x.state, dict((tp, om.offset) for tp, om in x.offsets.items()))
                     for g, x in core.groups.groups.items()}
    core.close()
    # the records decode with kproto.storage and say what was committed
    tables = read_internal(str(tmp_path / "d"))
    commits = tables["OffsetCommit"].to_pylist()
    assert all(r["key_version"] == 1 and (r["value_version"] == 3 or r["value"] is None) for r in commits)
    assert [(r["key"]["group"], r["key"]["partition"], r["value"] and r["value"]["offset"]) for r in commits
            if r["key"]["group"] == "simple"] == [("simple", 0, 5), ("simple", 1, 7), ("simple", 1, None)]
    assert {r["partition"] for r in commits if r["key"]["group"] == "simple"} == {partition_for("simple", 5)}
    again = make_core(tmp_path / "d", clock, num_partitions=3)
    try:
        assert {g: (x.state, dict((tp, om.offset) for tp, om in x.offsets.items()))
                for g, x in again.groups.groups.items()} == groups_before
    finally:
        again.close()


def test_a_generation_and_its_assignment_survive_a_restart(tmp_path, clock):
    core = make_core(tmp_path / "d", clock)
    (members, gen) = joined(core, clock, "g", 2)
    (a, ma), (b, mb) = members
    assert commit(a, "g", {}, gen=gen, member=ma) == {}
    core.close()
    tables = read_internal(str(tmp_path / "d"))
    meta = tables["GroupMetadata"].to_pylist()[-1]
    assert meta["value_version"] == 3 and meta["value"]["generation"] == gen
    assert {m["member_id"]: m["assignment"] for m in meta["value"]["members"]} == {ma: ma.encode(), mb: mb.encode()}
    core = make_core(tmp_path / "d", clock)
    try:
        a2 = Client(core)
        assert heartbeat(a2, "g", gen, ma) == 0
        assert sync(a2, "g", gen, mb)().assignment == mb.encode()
        # b says nothing: its session runs out and the group rebalances
        tick(core, clock, SESSION // 2)
        assert heartbeat(a2, "g", gen, ma) == 0
        tick(core, clock, SESSION // 2 + 1)
        assert heartbeat(a2, "g", gen, ma) == E.REBALANCE_IN_PROGRESS
    finally:
        core.close()


def test_join_errors(core, clock):
    c = Client(core)
    assert join(c, "")().error_code == E.INVALID_GROUP_ID
    assert join(c, "g", "not-a-member")().error_code == E.UNKNOWN_MEMBER_ID
    body = join_body("g")
    body.session_timeout_ms = 10
    i = c.send(K.JOIN_GROUP, 5, body)
    assert c.answer(i).error_code == E.INVALID_SESSION_TIMEOUT
    r = join(c, "g")()
    join(c, "g", r.member_id)
    # the group's protocols are checked before a member id is handed out
    assert join(Client(core), "g", protocols=("roundrobin",))().error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert join(Client(core), "g", protocols=("roundrobin", "range"))().error_code == E.MEMBER_ID_REQUIRED
    tick(core, clock, 3000)
    i = c.send(K.JOIN_GROUP, 3, join_body("g", protocols=("roundrobin",)))
    assert c.answer(i).error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_offset_commit_and_fetch_v10_name_topics_by_id(core):
    # v10 names topics by id only: the broker finds the names; an unknown id is answered
    # UNKNOWN_TOPIC_ID, in commit order as Kafka answers (unknown partitions and ids first, the
    # coordinator's results merged in after), and after the known topics in a fetch
    c = Client(core)
    c.call(K.METADATA, 12, topics=[kproto.request(3).cls.MetadataRequestTopic(name="t")],
           allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    tid = c.call(K.METADATA, 12, topics=[kproto.request(3).cls.MetadataRequestTopic(name="t")]).topics[0].topic_id
    unknown, other = kproto.Uuid(bytes(range(16))), kproto.Uuid(bytes(range(1, 17)))
    req = kproto.request(K.OFFSET_COMMIT).cls
    r = c.call(K.OFFSET_COMMIT, 10, group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        req.OffsetCommitRequestTopic(topic_id=i, partitions=[req.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=5, committed_metadata="md") for p in ps])
        for i, ps in ((tid, [0]), (unknown, [0]), (tid, [7]), (other, [2]))])
    assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics] == [
        (unknown, [(0, E.UNKNOWN_TOPIC_ID)]), (tid, [(7, E.UNKNOWN_TOPIC_OR_PARTITION), (0, 0)]),
        (other, [(2, E.UNKNOWN_TOPIC_ID)])]
    assert core.groups.groups["g"].offsets[("t", 0)].offset == 5
    freq = kproto.request(K.OFFSET_FETCH).cls

    def fetch(topics):
        r = c.call(K.OFFSET_FETCH, 10, require_stable=False, groups=[freq.OffsetFetchRequestGroup(
            group_id="g", topics=None if topics is None else [
                freq.OffsetFetchRequestTopics(topic_id=i, partition_indexes=ps) for i, ps in topics])])
        return [(t.topic_id, [(p.partition_index, p.committed_offset, p.error_code) for p in t.partitions])
                for t in r.groups[0].topics]
    assert fetch([(unknown, [0]), (tid, [0, 1])]) == [
        (tid, [(0, 5, 0), (1, -1, 0)]), (unknown, [(0, -1, E.UNKNOWN_TOPIC_ID)])]
    assert fetch(None) == [(tid, [(0, 5, 0)])]
    # before v10 the same topic goes by name, with no id in the answer
    r = c.call(K.OFFSET_FETCH, 9, require_stable=False, groups=[freq.OffsetFetchRequestGroup(
        group_id="g", topics=[freq.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])])
    assert [(t.name, t.topic_id, t.partitions[0].committed_offset) for t in r.groups[0].topics] == [
        ("t", kproto.Uuid(), 5)]
