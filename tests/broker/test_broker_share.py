"""KIP-932 share groups through the sans-I/O core, time from a fake clock: membership and
assignment (ShareGroupHeartbeat/Describe), share sessions, acquisition, acknowledgements
(ACCEPT/RELEASE/REJECT/GAP/RENEW), lock expiry, the delivery count limit, the persister's records in
__share_group_state and their reload, the offset admin APIs and the classic group APIs' view."""
from __future__ import annotations

import pytest

import kproto
from kproto.broker import features as feat
from kproto.broker.coordinators.share_assignor import share_assign
from kproto.broker.share_partition import (ACKNOWLEDGED, ARCHIVED, AVAILABLE, ShareLimits, SharePartition,
                                           state_batches)
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage import read_internal

from broker_support import Client, batch, fake_core

HB, SF, SA = K.SHARE_GROUP_HEARTBEAT, K.SHARE_FETCH, K.SHARE_ACKNOWLEDGE
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


def make_core(path, clock, **cfg):
    cfg.setdefault("offsets_topic_num_partitions", 3)
    cfg.setdefault("share_coordinator_state_topic_num_partitions", 3)
    cfg.setdefault("group_share_assignment_interval_ms", 0)
    return fake_core(path, clock, **cfg)


@pytest.fixture
def core(tmp_path, clock):
    c = make_core(tmp_path / "data", clock)
    c._create_topic("jobs", 2)
    yield c
    c.close()


def tick(core, clock, ms):
    clock.advance(ms)
    core.advance_clock()


def topic_id(core, name="jobs"):
    return core.logs.topics[name].topic_id


def produce(client, n, partition=0, first=0, topic="jobs", timestamp=1_700_000_000_000):
    req = kproto.request(K.PRODUCE).cls
    r = client.call(K.PRODUCE, 11, acks=-1, timeout_ms=1000, topic_data=[req.TopicProduceData(
        name=topic, partition_data=[req.PartitionProduceData(
            index=partition, records=batch([b"v%d" % (first + i) for i in range(n)], timestamp=timestamp))])])
    assert r.responses[0].partition_responses[0].error_code == 0
    return r.responses[0].partition_responses[0].base_offset


def hb(client, member="m1", epoch=0, group="g", topics=("jobs",), **kw):
    return client.call(HB, 1, group_id=group, member_id=member, member_epoch=epoch,
                       subscribed_topic_names=list(topics) if epoch == 0 else kw.pop("subscribed", None), **kw)


def join(client, member="m1", group="g"):
    """Join and heartbeat once more (the partitions' state is initialized after the join)."""
    r = hb(client, member, 0, group)
    assert r.error_code == 0, r
    return hb(client, member, r.member_epoch, group)


class Session:
    """A member's share session over one connection."""

    def __init__(self, core, member="m1", group="g", client=None):
        self.client = client or Client(core)
        self.core, self.member, self.group = core, member, group
        self.epoch = 0

    def fetch(self, partitions=(0,), acks=None, wait=0, max_records=500, epoch=None, version=1, **kw):
        req = kproto.request(SF).cls
        tid = topic_id(self.core)
        acks = acks or {}
        e = self.epoch if epoch is None else epoch
        body = dict(group_id=self.group, member_id=self.member, share_session_epoch=e, max_wait_ms=wait,
                    min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=500,
                    topics=[req.FetchTopic(topic_id=tid, partitions=[req.FetchPartition(
                        partition_index=p, acknowledgement_batches=[
                            req.AcknowledgementBatch(first_offset=a, last_offset=z, acknowledge_types=list(t))
                            for a, z, t in acks.get(p, [])]) for p in sorted(set(partitions) | set(acks))])],
                    forgotten_topics_data=[])
        body.update(kw)
        i = self.client.send(SF, version, req(**body))
        if epoch is None and e >= 0:
            self.epoch = e + 1
        return i

    def fetched(self, i):
        r = self.client.answer(i)
        return r

    def call(self, *a, **kw):
        return short(self.fetched(self.fetch(*a, **kw)))

    def ack(self, acks, epoch=None, version=1):
        req = kproto.request(SA).cls
        e = self.epoch if epoch is None else epoch
        r = self.client.call(SA, version, group_id=self.group, member_id=self.member, share_session_epoch=e,
                             topics=[req.AcknowledgeTopic(topic_id=topic_id(self.core), partitions=[
                                 req.AcknowledgePartition(partition_index=p, acknowledgement_batches=[
                                     req.AcknowledgementBatch(first_offset=a, last_offset=z,
                                                              acknowledge_types=list(t)) for a, z, t in bs])
                                 for p, bs in acks.items()])])
        if epoch is None and e >= 0:
            self.epoch = e + 1
        return r


def short(r):
    """(top error, [(partition, error, ack error, acquired ranges)])."""
    return r.error_code, [(p.partition_index, p.error_code, p.acknowledge_error_code,
                           [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records])
                          for t in r.responses for p in t.partitions]


# ------------------------------------------------------------------ versions and features
def test_api_versions_advertise_share_apis_and_share_version(core):
    r = Client(core).call(K.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    keys = {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}
    assert keys[HB] == (1, 1) and keys[K.SHARE_GROUP_DESCRIBE] == (1, 1)
    assert keys[SF] == (1, 2) and keys[SA] == (1, 2)
    assert keys[K.WRITE_SHARE_GROUP_STATE] == (0, 1) and keys[K.READ_SHARE_GROUP_STATE_SUMMARY] == (0, 1)
    assert keys[K.DESCRIBE_SHARE_GROUP_OFFSETS] == (0, 1) and keys[K.DELETE_SHARE_GROUP_OFFSETS] == (0, 0)
    finalized = {f.name: f.max_version_level for f in r.finalized_features}
    assert finalized[feat.SHARE_VERSION] == 2 == feat.FEATURES[feat.SHARE_VERSION].kafka_level


# ------------------------------------------------------------------ membership
def test_join_then_assignment_after_initialization(core):
    c = Client(core)
    r = hb(c)
    # Kafka 4.4: the first member is at epoch 2 with nothing: the partitions' state is not initialized yet
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m1", 2, 5000)
    assert r.assignment.topic_partitions == []
    r = hb(c, epoch=2)
    assert r.member_epoch == 3
    assert [(t.topic_id, t.partitions) for t in r.assignment.topic_partitions] == [(topic_id(core), [0, 1])]
    r = hb(c, epoch=3)
    assert r.member_epoch == 3 and r.assignment is None  # unchanged: not sent
    d = c.call(K.SHARE_GROUP_DESCRIBE, 1, group_ids=["g"], include_authorized_operations=True).groups[0]
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == \
        (0, "Stable", 3, 3, "simple")
    assert d.authorized_operations == 3400
    m = d.members[0]
    assert (m.member_id, m.member_epoch, m.client_id, m.subscribed_topic_names) == ("m1", 3, "test", ["jobs"])
    assert [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == [("jobs", [0, 1])]


def test_the_share_state_topic_has_kafkas_configs(core):
    """``__share_group_state`` as Apache Kafka 4.4.0's share coordinator creates it:
    cleanup.policy delete (the coordinator prunes its records; it is not compacted), no
    retention."""
    c = Client(core)
    hb(c)
    hb(c, epoch=2)   # the partitions' states are initialized: the topic exists
    configs = core.logs.topics["__share_group_state"].configs
    assert {k: configs.get(k) for k in ("cleanup.policy", "retention.ms")} == {
        "cleanup.policy": "delete", "retention.ms": "-1"}


def test_two_members_share_the_partitions(core):
    a, b = Client(core), Client(core)
    join(a, "a")
    rb = hb(b, "b")  # the join computes the new target at once
    ra = hb(a, "a", 3)
    assert ra.member_epoch == rb.member_epoch == 4
    got = {"a": ra.assignment.topic_partitions[0].partitions, "b": rb.assignment.topic_partitions[0].partitions}
    # one each: which one follows the topic id's hash, as in Kafka
    assert sorted(got.values()) == [[0], [1]]


def test_simple_assignor_shares_partitions_among_more_members():
    t = Uuid(b"\x01" * 16)
    got = share_assign({"c": [t], "a": [t], "b": [t]}, {t: [0, 1]}, {})
    # Kafka's desired counts: each partition shared by ceil(3 / 2) = 2 members, 4 assignments
    assert sorted(len(a[t]) for a in got.values()) == [1, 1, 2]
    assert sorted(p for a in got.values() for p in a[t]) == [0, 0, 1, 1]
    assert share_assign({"a": [t]}, {t: []}, {}) == {"a": {}}


def test_heartbeat_errors(core):
    c = Client(core)
    r = hb(c, member="")
    assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, None)
    r = hb(c, group="")
    assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, "GroupId can't be empty.")
    r = hb(c, topics=())
    assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, "SubscribedTopicNames must be set in first request.")
    assert hb(c, epoch=5).error_message == "Share group g not found."
    assert hb(c, epoch=-1).error_message == "Group g not found."
    join(c)
    r = hb(c, epoch=7)
    assert r.error_code == E.FENCED_MEMBER_EPOCH
    assert r.error_message.startswith("The share group member has a greater member epoch (7) than the one "
                                      "known by the group coordinator (3).")
    r = hb(c, member="other", epoch=3)
    assert (r.error_code, r.error_message) == (E.UNKNOWN_MEMBER_ID, "Member other is not a member of group g.")
    r = hb(c, epoch=-1)
    assert (r.error_code, r.member_epoch, r.heartbeat_interval_ms) == (0, -1, 0)
    assert hb(c, epoch=-1).error_code == E.UNKNOWN_MEMBER_ID


def test_share_group_in_the_classic_group_apis(core):
    c = Client(core)
    join(c)
    listed = c.call(K.LIST_GROUPS, 5, states_filter=[], types_filter=["share"]).groups
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed] == \
        [("g", "share", "Stable", "share")]
    assert c.call(K.LIST_GROUPS, 5, states_filter=[], types_filter=["consumer"]).groups == []
    d = c.call(K.DESCRIBE_GROUPS, 5, groups=["g"], include_authorized_operations=False).groups[0]
    assert (d.error_code, d.group_state) == (0, "Dead")
    d = c.call(K.DESCRIBE_GROUPS, 6, groups=["g"], include_authorized_operations=False).groups[0]
    assert (d.error_code, d.error_message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a classic group.")
    assert c.call(K.DELETE_GROUPS, 2, groups_names=["g"]).results[0].error_code == E.NON_EMPTY_GROUP
    hb(c, epoch=-1)
    assert c.call(K.LIST_GROUPS, 5, states_filter=["empty"], types_filter=[]).groups[0].group_id == "g"
    assert c.call(K.DELETE_GROUPS, 2, groups_names=["g"]).results[0].error_code == 0
    d = c.call(K.SHARE_GROUP_DESCRIBE, 1, group_ids=["g", ""], include_authorized_operations=False).groups
    assert [(x.error_code, x.error_message) for x in d] == [(E.GROUP_ID_NOT_FOUND, "Group g not found."),
                                                           (E.INVALID_GROUP_ID, None)]


def test_session_timeout_fences_the_member(core, clock):
    c = Client(core)
    join(c)
    tick(core, clock, 44_000)
    assert hb(c, epoch=3).error_code == 0
    tick(core, clock, 45_001)
    assert hb(c, epoch=3).error_code == E.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------ fetch and acknowledge
def test_fetch_acquires_from_latest_and_acknowledges(core):
    prod = Client(core)
    produce(prod, 3)  # before the share-partition exists: share.auto.offset.reset=latest skips them
    join(Client(core))
    s = Session(core)
    assert s.call() == (0, [(0, 0, 0, [])])  # initialized now: answered at once, empty
    assert produce(prod, 3, first=3) == 3
    assert s.call() == (0, [(0, 0, 0, [(3, 5, 1)])])
    # accept 3, release 4, reject 5: 4 is delivered again
    assert s.call(acks={0: [(3, 5, [ACCEPT, RELEASE, REJECT])]}) == (0, [(0, 0, 0, [(4, 4, 2)])])
    assert s.call(acks={0: [(4, 4, [ACCEPT])]}) == (0, [(0, 0, 0, [])])
    sp = core.shares.partitions[("g", topic_id(core), 0)]
    assert (sp.start_offset, sp.end_offset, sp.records) == (6, 6, {})
    # past what was acquired, and an offset acquired by nobody
    r = s.call(acks={0: [(9, 9, [ACCEPT])]})
    assert r == (0, [(0, 0, E.INVALID_REQUEST, [])])
    produce(prod, 2, first=6)
    assert s.call() == (0, [(0, 0, 0, [(6, 7, 1)])])
    assert s.ack({0: [(7, 7, [ACCEPT])]}).responses[0].partitions[0].error_code == 0
    r = s.ack({0: [(7, 7, [ACCEPT])]})  # done, but the start offset is still at 6
    assert r.responses[0].partitions[0].error_code == E.INVALID_RECORD_STATE
    assert s.ack({0: [(6, 6, [ACCEPT])]}).responses[0].partitions[0].error_code == 0
    # below the start offset now: acknowledged already, nothing to do (as Kafka)
    assert s.ack({0: [(6, 7, [ACCEPT])]}).responses[0].partitions[0].error_code == 0


def test_other_member_cannot_acknowledge(core):
    prod = Client(core)
    join(Client(core), "a")
    a, b = Session(core, "a"), Session(core, "b")
    a.call(), b.call()
    produce(prod, 2)
    assert a.call() == (0, [(0, 0, 0, [(0, 1, 1)])])
    r = b.call(acks={0: [(0, 1, [ACCEPT])]})
    assert r == (0, [(0, 0, E.INVALID_RECORD_STATE, [])])


def test_lock_expiry_and_delivery_count_limit(tmp_path, clock):
    core = make_core(tmp_path / "d", clock, group_share_record_lock_duration_ms=1000,
                     group_share_delivery_count_limit=2)
    core._create_topic("jobs", 1)
    try:
        prod = Client(core)
        join(Client(core))
        s = Session(core)
        s.call()
        produce(prod, 1)
        r = s.fetched(s.fetch())
        assert r.acquisition_lock_timeout_ms == 1000
        assert short(r) == (0, [(0, 0, 0, [(0, 0, 1)])])
        tick(core, clock, 1001)  # the lock expires: available again
        assert s.call() == (0, [(0, 0, 0, [(0, 0, 2)])])
        tick(core, clock, 1001)  # second delivery's lock expires: the limit archives it
        sp = core.shares.partitions[("g", topic_id(core), 0)]
        assert sp.start_offset == 1
        assert s.call() == (0, [])
    finally:
        core.close()


def dlq_records(core, name="dlq.jobs", partition=0):
    from kproto.records.reader import BatchReader
    lg = core.logs.get(name, partition)
    return [(r.key, r.value, dict(r.headers)) for b in BatchReader(lg.read(0, 1 << 20, True)) for r in b.records()]


def test_dead_letter_queue_only_to_an_enabled_dlq_topic_and_on_lock_expiry_too(tmp_path, clock):
    """The dead-letter queue's conditions (tests/client_io compares its records with Apache
    Kafka's): a dlq.* topic with errors.deadletterqueue.group.enable, else the records are
    only archived; a record whose last lock expires goes there as one released at the limit."""
    core = make_core(tmp_path / "d", clock, group_share_record_lock_duration_ms=1000,
                     group_share_delivery_count_limit=2)
    core._create_topic("jobs", 1)
    core._create_topic("dlq.jobs", 1)
    core._create_topic("other", 1)
    try:
        c, prod = Client(core), Client(core)
        join(c)
        s = Session(core)
        s.call()
        produce(prod, 4)
        assert s.call() == (0, [(0, 0, 0, [(0, 3, 1)])])
        for name in ("other", "dlq.jobs"):   # "other": not a dlq.* name; dlq.jobs: not enabled yet
            assert alter_group(c, "g", errors_deadletterqueue_topic_name=name) == (0, None)
            s.ack({0: [(0, 0, [REJECT])]}) if name == "other" else s.ack({0: [(1, 1, [REJECT])]})
        assert dlq_records(core) == [] and core.logs.get("other", 0).log_end_offset == 0
        ia = kproto.request(K.INCREMENTAL_ALTER_CONFIGS).cls
        r = c.call(K.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[ia.AlterConfigsResource(
            resource_type=2, resource_name="dlq.jobs", configs=[ia.AlterableConfig(
                name="errors.deadletterqueue.group.enable", config_operation=0, value="true")])])
        assert r.responses[0].error_code == 0
        assert alter_group(c, "g", errors_deadletterqueue_copy_record_enable="true") == (0, None)
        tick(core, clock, 1001)            # offsets 2, 3: first lock expired
        assert s.call() == (0, [(0, 0, 0, [(2, 3, 2)])])
        tick(core, clock, 1001)            # the second lock expires at the limit
        got = dlq_records(core)
        assert [(v, h["__dlq.errors.offset"], h["__dlq.errors.delivery.count"], h["__dlq.errors.message"])
                for _, v, h in got] == [(b"v2", b"2", b"2", b"Offset delivery count exceeded the threshold."),
                                        (b"v3", b"3", b"2", b"Offset delivery count exceeded the threshold.")]
    finally:
        core.close()


def test_renew_extends_the_lock(tmp_path, clock):
    core = make_core(tmp_path / "d", clock, group_share_record_lock_duration_ms=1000)
    core._create_topic("jobs", 1)
    try:
        prod = Client(core)
        join(Client(core))
        s = Session(core)
        s.call()
        produce(prod, 1)
        s.call()
        tick(core, clock, 800)
        assert s.call(acks={0: [(0, 0, [RENEW])]}, version=2, is_renew_ack=True, **RENEWAL) == (0, [(0, 0, 0, [])])
        tick(core, clock, 800)  # 1600 ms after acquisition, 800 after the renewal: still held
        assert s.ack({0: [(0, 0, [ACCEPT])]}).responses[0].partitions[0].error_code == 0
    finally:
        core.close()


#: a renewing ShareFetch asks for no records (Kafka refuses it otherwise)
RENEWAL = dict(max_records=0, max_bytes=0, min_bytes=0, wait=0)


def test_renewals_as_apache_kafka_answers_them(core):
    """As Apache Kafka 4.4.0 answers (seen on it): a renewing ShareFetch (IsRenewAck) asking for
    records is refused whole, the session epoch unmoved; one asking for none renews and acquires
    nothing although records wait; RENEW without IsRenewAck (or in v1) is refused per partition
    (INVALID_REQUEST) while the fetch goes on; with the group's share.renew.acknowledge.enable
    off, RENEW is INVALID_RECORD_STATE."""
    prod, c = Client(core), Client(core)
    join(c)
    s = Session(core)
    s.call()
    produce(prod, 6)
    assert s.call() == (0, [(0, 0, 0, [(0, 5, 1)])])
    produce(prod, 2, first=6)
    for asked in (dict(max_records=5), dict(wait=100), dict(min_bytes=1), dict(max_bytes=100)):
        r = s.fetched(s.fetch(acks={0: [(0, 0, [RENEW])]}, version=2, is_renew_ack=True, epoch=s.epoch,
                              **{**RENEWAL, **asked}))
        assert (r.error_code, r.responses, r.acquisition_lock_timeout_ms) == (E.INVALID_REQUEST, [], 0)
    assert s.call(acks={0: [(0, 0, [RENEW])]}, version=2, is_renew_ack=True, **RENEWAL) == (0, [(0, 0, 0, [])])
    assert s.call(partitions=(), version=2, is_renew_ack=True, **RENEWAL) == (0, [])
    assert s.call(acks={0: [(1, 1, [RENEW])]}, version=2) == (0, [(0, 0, E.INVALID_REQUEST, [(6, 7, 1)])])
    assert s.call(acks={0: [(1, 1, [RENEW])]}, version=1) == (0, [(0, 0, E.INVALID_REQUEST, [])])
    assert s.ack({0: [(1, 1, [RENEW])]}, version=1).responses[0].partitions[0].error_code == E.INVALID_REQUEST
    assert s.ack({0: [(1, 1, [RENEW])]}, version=2).responses[0].partitions[0].error_code == E.INVALID_REQUEST
    assert alter_group(c, "g", share_renew_acknowledge_enable="false") == (0, None)
    r = s.fetched(s.fetch(acks={0: [(1, 2, [RENEW, ACCEPT])]}, version=2, is_renew_ack=True, **RENEWAL))
    p = r.responses[0].partitions[0]
    assert (p.acknowledge_error_code, p.acknowledge_error_message) == (
        E.INVALID_RECORD_STATE, "Renewing acquisition locks is not enabled for the group.")
    # nothing of the refused partition's acknowledgements applied: offset 2 is still held
    assert s.call(acks={0: [(2, 2, [ACCEPT])]}, max_records=0) == (0, [(0, 0, 0, [])])


def test_session_epochs(core):
    join(Client(core))
    s = Session(core)
    assert s.call(epoch=1) == (E.SHARE_SESSION_NOT_FOUND, [])
    s.call()
    assert s.call(epoch=5) == (E.INVALID_SHARE_SESSION_EPOCH, [])
    assert s.ack({}, epoch=0).error_code == E.INVALID_SHARE_SESSION_EPOCH
    assert s.ack({}).error_code == 0
    assert s.call(epoch=-1) == (0, [])
    assert s.call(epoch=2) == (E.SHARE_SESSION_NOT_FOUND, [])
    r = s.call(epoch=0, acks={0: [(0, 0, [ACCEPT])]})
    assert r[0] == E.INVALID_REQUEST


def test_closing_the_session_releases_records(core):
    prod = Client(core)
    join(Client(core))
    s = Session(core)
    s.call()
    produce(prod, 2)
    assert s.call() == (0, [(0, 0, 0, [(0, 1, 1)])])
    core.connection_closed(s.client.channel)
    s2 = Session(core)
    assert s2.call() == (0, [(0, 0, 0, [(0, 1, 2)])])


def test_waiting_fetch_completes_on_produce(core, clock):
    join(Client(core))
    s = Session(core)
    s.call()
    i = s.fetch(wait=5000)
    assert s.client.channel.frames[i:] == []  # waiting
    produce(Client(core), 1)
    assert short(s.fetched(i)) == (0, [(0, 0, 0, [(0, 0, 1)])])
    i = s.fetch(wait=500)
    tick(core, clock, 501)
    assert short(s.fetched(i)) == (0, [])


def test_max_records_whole_batches_or_record_limit(core):
    prod = Client(core)
    join(Client(core))
    s = Session(core)
    s.call()
    produce(prod, 3)
    produce(prod, 3, first=3)
    assert s.call(max_records=2) == (0, [(0, 0, 0, [(0, 2, 1)])])  # the first batch whole
    assert s.call(max_records=2, version=2, share_acquire_mode=1) == (0, [(0, 0, 0, [(3, 4, 1)])])
    assert s.call() == (0, [(0, 0, 0, [(5, 5, 1)])])


# ------------------------------------------------------------------ persister
def test_state_written_to_share_group_state_and_read_back(tmp_path, clock):
    path = tmp_path / "d"
    core = make_core(path, clock)
    core._create_topic("jobs", 1)
    prod = Client(core)
    join(Client(core))
    s = Session(core)
    s.call()
    produce(prod, 4)
    s.call()
    s.call(acks={0: [(0, 3, [ACCEPT, RELEASE, REJECT, ACCEPT])]})  # 1 delivered again at once
    tid = topic_id(core)
    state = core.share_state.read(("g", tid, 0))
    # written as Kafka writes it: the start offset from before the acknowledgement moved it
    assert (state.start_offset, state.delivery_complete_count) == (0, 3)
    assert state.batches == [(0, 0, ACKNOWLEDGED, 1), (1, 1, AVAILABLE, 1), (2, 2, ARCHIVED, 1),
                             (3, 3, ACKNOWLEDGED, 1)]
    assert core.shares.partitions[("g", tid, 0)].start_offset == 1
    core.close()
    tables = read_internal(str(path))
    snaps, updates = tables["ShareSnapshot"].to_pylist(), tables["ShareUpdate"].to_pylist()
    assert snaps and updates
    assert {r["topic"] for r in snaps + updates} == {"__share_group_state"}
    assert updates[-1]["value"]["start_offset"] == 0 and snaps[0]["value"]["start_offset"] == -1
    assert updates[-1]["value"]["delivery_complete_count"] == 3
    assert (snaps[0]["key"]["group_id"], snaps[0]["key"]["partition"]) == ("g", 0)
    core = make_core(path, clock)
    try:
        again = core.share_state.read(("g", tid, 0))
        assert (again.start_offset, again.delivery_complete_count, again.batches) == \
            (state.start_offset, state.delivery_complete_count, state.batches)
        # the group comes back empty; its state is described from the persister
        r = Client(core).call(K.DESCRIBE_SHARE_GROUP_OFFSETS, 1, groups=[
            kproto.request(K.DESCRIBE_SHARE_GROUP_OFFSETS).cls.DescribeShareGroupOffsetsRequestGroup(
                group_id="g", topics=None)])
        p = r.groups[0].topics[0].partitions[0]
        assert (r.groups[0].topics[0].topic_name, p.start_offset, p.lag) == ("jobs", 0, 1)
        # a new share-partition starts from the persisted state: offset 1 once more, count 2
        join(Client(core))
        assert Session(core).call() == (0, [(0, 0, 0, [(1, 1, 2)])])
    finally:
        core.close()


def test_snapshot_every_n_updates(tmp_path, clock):
    core = make_core(tmp_path / "d", clock, share_coordinator_snapshot_update_records_per_snapshot=2)
    core._create_topic("jobs", 1)
    try:
        prod = Client(core)
        join(Client(core))
        s = Session(core)
        s.call()
        produce(prod, 4)
        s.call()
        for off in range(4):
            s.call(acks={0: [(off, off, [ACCEPT])]})
        key = ("g", topic_id(core), 0)
        st = core.share_state.read(key)
        assert st.snapshot_epoch >= 1 and st.start_offset == 3  # one write behind
    finally:
        core.close()


def test_state_rpcs(core):
    c = Client(core)
    tid = topic_id(core)
    init = kproto.request(K.INITIALIZE_SHARE_GROUP_STATE).cls
    r = c.call(K.INITIALIZE_SHARE_GROUP_STATE, 0, group_id="x", topics=[init.InitializeStateData(
        topic_id=tid, partitions=[init.PartitionData(partition=0, state_epoch=1, start_offset=7)])])
    assert r.results[0].partitions[0].error_code == 0
    w = kproto.request(K.WRITE_SHARE_GROUP_STATE).cls
    r = c.call(K.WRITE_SHARE_GROUP_STATE, 1, group_id="x", topics=[w.WriteStateData(topic_id=tid, partitions=[
        w.PartitionData(partition=0, state_epoch=0, leader_epoch=0, start_offset=8, delivery_complete_count=0,
                        state_batches=[])])])
    assert r.results[0].partitions[0].error_code == E.FENCED_STATE_EPOCH
    r = c.call(K.WRITE_SHARE_GROUP_STATE, 1, group_id="x", topics=[w.WriteStateData(topic_id=tid, partitions=[
        w.PartitionData(partition=0, state_epoch=1, leader_epoch=0, start_offset=8, delivery_complete_count=1,
                        state_batches=[w.StateBatch(first_offset=9, last_offset=9, delivery_state=2,
                                                    delivery_count=1)])])])
    assert r.results[0].partitions[0].error_code == 0
    rd = kproto.request(K.READ_SHARE_GROUP_STATE).cls
    r = c.call(K.READ_SHARE_GROUP_STATE, 0, group_id="x", topics=[rd.ReadStateData(
        topic_id=tid, partitions=[rd.PartitionData(partition=0, leader_epoch=0)])])
    p = r.results[0].partitions[0]
    assert (p.state_epoch, p.start_offset, [(b.first_offset, b.delivery_state) for b in p.state_batches]) == \
        (1, 8, [(9, 2)])
    sm = kproto.request(K.READ_SHARE_GROUP_STATE_SUMMARY).cls
    r = c.call(K.READ_SHARE_GROUP_STATE_SUMMARY, 1, group_id="x", topics=[sm.ReadStateSummaryData(
        topic_id=tid, partitions=[sm.PartitionData(partition=0, leader_epoch=0)])])
    assert (r.results[0].partitions[0].start_offset, r.results[0].partitions[0].delivery_complete_count) == (8, 1)
    d = kproto.request(K.DELETE_SHARE_GROUP_STATE).cls
    c.call(K.DELETE_SHARE_GROUP_STATE, 0, group_id="x", topics=[d.DeleteStateData(
        topic_id=tid, partitions=[d.PartitionData(partition=0)])])
    assert core.share_state.read(("x", tid, 0)) is None


# ------------------------------------------------------------------ offsets admin
def test_alter_and_delete_offsets(core):
    c = Client(core)
    prod = Client(core)
    produce(prod, 5)
    join(c)
    alt = kproto.request(K.ALTER_SHARE_GROUP_OFFSETS).cls
    body = dict(group_id="g", topics=[alt.AlterShareGroupOffsetsRequestTopic(topic_name="jobs", partitions=[
        alt.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=2)])])
    assert c.call(K.ALTER_SHARE_GROUP_OFFSETS, 0, **body).error_code == E.NON_EMPTY_GROUP
    hb(c, epoch=-1)
    r = c.call(K.ALTER_SHARE_GROUP_OFFSETS, 0, **body)
    assert (r.error_code, r.responses[0].partitions[0].error_code) == (0, 0)
    join(c)
    s = Session(core)
    assert s.call() == (0, [(0, 0, 0, [(2, 4, 1)])])
    core.connection_closed(s.client.channel)
    hb(c, epoch=-1)
    dl = kproto.request(K.DELETE_SHARE_GROUP_OFFSETS).cls
    r = c.call(K.DELETE_SHARE_GROUP_OFFSETS, 0, group_id="g", topics=[
        dl.DeleteShareGroupOffsetsRequestTopic(topic_name="jobs"),
        dl.DeleteShareGroupOffsetsRequestTopic(topic_name="nope")])
    assert [(t.topic_name, t.error_code) for t in r.responses] == \
        [("jobs", 0), ("nope", E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert core.share_state.read(("g", topic_id(core), 0)) is None


def test_share_partition_state_batches():
    from kproto.broker.share_partition import InFlight
    recs = {5: InFlight(ACKNOWLEDGED, 1), 6: InFlight(ACKNOWLEDGED, 1), 7: InFlight(AVAILABLE, 0),
            8: InFlight(1, 2), 9: InFlight(AVAILABLE, 2)}
    assert state_batches(recs, 5, 10) == [(5, 6, ACKNOWLEDGED, 1), (8, 9, AVAILABLE, 2)]


def test_share_partition_refuses_bad_batches(clock):
    from kproto.broker.share_partition import AcknowledgeError
    from kproto.broker.timer import SystemTimer
    sp = SharePartition("g", "t", 0, 0, SystemTimer(clock=clock), ShareLimits, lambda _: None)
    sp.acquire("m", [(0, 2, False)], 10)
    for bad in [(2, 1, [1]), (0, 2, [1, 1]), (0, 0, [9])]:
        with pytest.raises(AcknowledgeError):
            sp.acknowledge("m", [bad])
    assert all(r.state == 1 for r in sp.records.values())  # nothing applied


def test_share_partition_cuts_new_records_into_batch_size_ranges(clock):
    """BatchSize cuts records acquired for the first time along the log's batches, as Apache
    Kafka 4.4.0 does (tests/client_io's test compares with it): whole batches, a range closed
    before a batch starting batch_size or more records after its first offset; re-acquired
    records are not cut."""
    from kproto.broker.timer import SystemTimer
    log = [(0, 9, False), (10, 10, False), (11, 11, False), (12, 12, False), (13, 13, False), (14, 14, False),
           (15, 21, False)]

    def acquire(**kw):
        sp = SharePartition("g", "t", 0, 0, SystemTimer(clock=clock), ShareLimits, lambda _: None)
        return sp, sp.acquire("m", log, kw.pop("max_records", 500), **kw)

    assert acquire(batch_size=3)[1] == [(0, 9, 1), (10, 12, 1), (13, 21, 1)]
    assert acquire(batch_size=4)[1] == [(0, 9, 1), (10, 13, 1), (14, 21, 1)]
    assert acquire(batch_size=22)[1] == acquire()[1] == [(0, 21, 1)]
    assert acquire(batch_size=0)[1][:2] == [(0, -1, 1), (0, 9, 1)]   # Kafka's empty first range
    assert acquire(batch_size=5, max_records=12)[1] == [(0, 9, 1), (10, 11, 1)]
    assert acquire(batch_size=4, max_records=13, record_limit=True)[1] == [(0, 12, 1)]
    sp, _ = acquire()
    sp.acknowledge("m", [(0, 21, [RELEASE])])
    assert sp.acquire("m", log, 500, batch_size=2) == [(0, 21, 2)]


# ------------------------------------------------------------------ group configs
def alter_group(client, group, **configs):
    ia = kproto.request(K.INCREMENTAL_ALTER_CONFIGS).cls
    r = client.call(K.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[ia.AlterConfigsResource(
        resource_type=32, resource_name=group, configs=[
            ia.AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v) for k, v in configs.items()])])
    return r.responses[0].error_code, r.responses[0].error_message


def test_group_configs_set_checked_and_described(core):
    c = Client(core)
    assert alter_group(c, "g", share_auto_offset_reset="earliest") == (0, None)
    assert alter_group(c, "g", share_record_lock_duration_ms="500") == (
        E.INVALID_CONFIG, "Invalid value 500 for configuration share.record.lock.duration.ms: Value must be at least 1000")
    code, msg = alter_group(c, "g", share_auto_offset_reset="bogus")
    assert code == E.INVALID_CONFIG and "'earliest', 'latest' or of the format 'by_duration:" in msg
    assert alter_group(c, "g", nope="1") == (E.INVALID_CONFIG, "Unknown group config name: nope")
    assert alter_group(c, "", share_auto_offset_reset="earliest") == (
        E.INVALID_REQUEST, "Default group resources are not allowed.")
    dc = kproto.request(K.DESCRIBE_CONFIGS).cls
    r = c.call(K.DESCRIBE_CONFIGS, 4, include_synonyms=True, include_documentation=False, resources=[
        dc.DescribeConfigsResource(resource_type=32, resource_name="g", configuration_keys=None)])
    got = {x.name: (x.value, x.config_source) for x in r.results[0].configs}
    assert len(got) == 21
    assert got["share.auto.offset.reset"] == ("earliest", 8)
    assert got["share.record.lock.duration.ms"] == ("30000", 5)
    syn = {x.name: [(y.name, y.value, y.source) for y in x.synonyms] for x in r.results[0].configs}
    assert syn["share.auto.offset.reset"] == [("share.auto.offset.reset", "earliest", 8),
                                              ("share.auto.offset.reset", "latest", 5)]
    assert syn["share.session.timeout.ms"] == [("group.share.session.timeout.ms", "45000", 5)]
    listed = c.call(K.LIST_CONFIG_RESOURCES, 1, resource_types=[32]).config_resources
    assert [(x.resource_name, x.resource_type) for x in listed] == [("g", 32)]


def test_group_configs_are_config_records_of_the_metadata_log_and_survive_a_restart(tmp_path, clock):
    """Group configs are ConfigRecords of resource type GROUP in the metadata log (as Kafka's
    controller writes them): a restart reads them back, from the log and from a snapshot; a
    topic config change leaves them alone; a deleted one stays deleted."""
    path = tmp_path / "d"
    core = make_core(path, clock)
    core._create_topic("jobs", 1)
    c = Client(core)
    assert alter_group(c, "g", share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000") == (0, None)
    assert alter_group(c, "h", share_delivery_count_limit="3", share_isolation_level="read_committed") == (0, None)
    ia = kproto.request(K.INCREMENTAL_ALTER_CONFIGS).cls
    r = c.call(K.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[
        ia.AlterConfigsResource(resource_type=32, resource_name="h", configs=[
            ia.AlterableConfig(name="share.isolation.level", config_operation=1, value=None)]),
        ia.AlterConfigsResource(resource_type=2, resource_name="jobs", configs=[
            ia.AlterableConfig(name="retention.ms", config_operation=0, value="60000")])])
    assert [x.error_code for x in r.responses] == [0, 0]
    assert core.metadata.image.configs[(32, "g")] == {"share.auto.offset.reset": "earliest",
                                                      "share.record.lock.duration.ms": "2000"}
    assert core.metadata.image.configs[(32, "h")] == {"share.delivery.count.limit": "3"}
    wanted = {"g": {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000"},
              "h": {"share.delivery.count.limit": "3"}}
    core.close()
    for snapshot in (False, True):
        core = make_core(path, clock)
        try:
            assert core.group_configs.groups == wanted
            assert core.shares.limits("g").lock_duration_ms == 2000
            assert core.shares.limits("h").delivery_count_limit == 3
            listed = Client(core).call(K.LIST_CONFIG_RESOURCES, 1, resource_types=[32]).config_resources
            assert [x.resource_name for x in listed] == ["g", "h"]
            if not snapshot:
                core.metadata.snapshot()  # the next start reads them from the snapshot
        finally:
            core.close()


def test_group_configs_apply_to_the_share_group(core):
    c, prod = Client(core), Client(core)
    produce(prod, 3)
    assert alter_group(c, "g", share_auto_offset_reset="earliest", share_record_lock_duration_ms="2000",
                       share_heartbeat_interval_ms="700") == (0, None)
    assert hb(c).heartbeat_interval_ms == 700
    hb(c, epoch=2)
    s = Session(core)
    r = s.fetched(s.fetch())
    assert r.acquisition_lock_timeout_ms == 2000
    assert short(r) == (0, [(0, 0, 0, [(0, 2, 1)])])  # from the log start


def test_auto_offset_reset_by_duration(core, clock):
    c, prod = Client(core), Client(core)
    clock.advance(120_000)
    now = core.wall_ms()
    produce(prod, 2, timestamp=now - 90_000)
    produce(prod, 1, first=2, timestamp=now - 10_000)
    assert alter_group(c, "g", share_auto_offset_reset="by_duration:PT30S") == (0, None)
    join(c)
    assert Session(core).call() == (0, [(0, 0, 0, [(2, 2, 1)])])  # the first record at most 30 s old


def test_a_share_group_id_is_not_a_consumer_or_classic_group(core):
    c = Client(core)
    join(c)
    r = c.call(K.CONSUMER_GROUP_HEARTBEAT, 1, group_id="g", member_id="x", member_epoch=0, rebalance_timeout_ms=30000,
               subscribed_topic_names=["jobs"], topic_partitions=[])
    assert (r.error_code, r.error_message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
    d = c.call(K.CONSUMER_GROUP_DESCRIBE, 1, group_ids=["g"], include_authorized_operations=False).groups[0]
    assert (d.error_code, d.error_message) == (E.GROUP_ID_NOT_FOUND, "Group g is not a consumer group.")
    jg = kproto.request(K.JOIN_GROUP).cls
    r = c.call(K.JOIN_GROUP, 9, group_id="g", session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="",
               protocol_type="consumer", protocols=[jg.JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    oc = kproto.request(K.OFFSET_COMMIT).cls
    r = c.call(K.OFFSET_COMMIT, 9, group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        oc.OffsetCommitRequestTopic(name="jobs", partitions=[oc.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])])
    assert r.topics[0].partitions[0].error_code == E.GROUP_ID_NOT_FOUND
    # and the other way round
    r = c.call(K.CONSUMER_GROUP_HEARTBEAT, 1, group_id="cg", member_id="x", member_epoch=0, rebalance_timeout_ms=30000,
               subscribed_topic_names=["jobs"], topic_partitions=[])
    assert r.error_code == 0
    r = hb(c, group="cg")
    assert (r.error_code, r.error_message) == (E.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")


def test_records_deleted_from_the_log_are_skipped(core):
    prod = Client(core)
    join(Client(core))
    s = Session(core)
    s.call()
    produce(prod, 3)
    produce(prod, 2, first=3)
    assert s.call(max_records=1) == (0, [(0, 0, 0, [(0, 2, 1)])])
    dr = kproto.request(K.DELETE_RECORDS).cls
    r = prod.call(K.DELETE_RECORDS, 2, timeout_ms=1000, topics=[dr.DeleteRecordsTopic(
        name="jobs", partitions=[dr.DeleteRecordsPartition(partition_index=0, offset=4)])])
    assert r.topics[0].partitions[0].error_code == 0
    assert s.call() == (0, [(0, 0, 0, [(4, 4, 1)])])  # 0-2 (acquired) and 3 are gone with the log


def test_share_version_0_disables_share_groups(core):
    c = Client(core)
    uf = kproto.request(K.UPDATE_FEATURES).cls
    r = c.call(K.UPDATE_FEATURES, 1, timeout_ms=1000, validate_only=False, feature_updates=[
        uf.FeatureUpdateKey(feature="share.version", max_version_level=0, upgrade_type=2)])
    assert r.error_code == 0
    assert hb(c).error_code == E.UNSUPPORTED_VERSION
    d = c.call(K.SHARE_GROUP_DESCRIBE, 1, group_ids=["g"], include_authorized_operations=False).groups
    assert [(x.group_id, x.error_code) for x in d] == [("g", E.UNSUPPORTED_VERSION)]
    r = c.call(K.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    assert HB in {a.api_key for a in r.api_keys}  # still advertised, as Kafka does
    r = c.call(K.UPDATE_FEATURES, 1, timeout_ms=1000, validate_only=False, feature_updates=[
        uf.FeatureUpdateKey(feature="share.version", max_version_level=2, upgrade_type=1)])
    assert r.error_code == 0 and hb(c).error_code == 0


def test_read_committed_hands_out_committed_records_only(tmp_path, clock):
    from test_broker_txn import add, end, init
    from test_broker_txn import produce as txn_produce
    core = make_core(tmp_path / "d", clock, transaction_state_num_partitions=3)
    core._create_topic("t", 1)
    try:
        c = Client(core)
        assert alter_group(c, "g", share_isolation_level="read_committed", share_auto_offset_reset="earliest") == \
            (0, None)
        r = hb(c, topics=("t",))
        hb(c, epoch=r.member_epoch)
        _, pid, ep = init(c)
        add(c, pid, ep, [("t", 0)])
        txn_produce(c, pid, ep, 0, [b"a1", b"a2"])            # offsets 0-1, aborted below
        s = Session(core)
        tid = core.logs.topics["t"].topic_id

        def fetch():
            sf = kproto.request(SF).cls
            e, s.epoch = s.epoch, s.epoch + 1
            return short(s.client.call(SF, 1, group_id="g", member_id="m1", share_session_epoch=e, max_wait_ms=0,
                                       min_bytes=1, max_bytes=1 << 20, max_records=100, batch_size=100,
                                       forgotten_topics_data=[], topics=[sf.FetchTopic(topic_id=tid, partitions=[
                                           sf.FetchPartition(partition_index=0)])]))
        assert fetch() == (0, [(0, 0, 0, [])])                # the open transaction is past the LSO
        assert end(c, pid, ep, False) == 0                     # abort: marker at 2
        _, pid, ep = init(c)
        add(c, pid, ep, [("t", 0)])
        txn_produce(c, pid, ep, 0, [b"c1"])                    # offset 3
        assert end(c, pid, ep, True) == 0                      # commit: marker at 4
        assert fetch() == (0, [(0, 0, 0, [(3, 3, 1)])])        # only the committed record
        sp = core.shares.partitions[("g", tid, 0)]
        assert [(o, r.state) for o, r in sorted(sp.records.items())] == [(3, 1), (4, ARCHIVED)]
    finally:
        core.close()


def test_membership_written_to_consumer_offsets_and_read_back(tmp_path, clock):
    path = tmp_path / "d"
    core = make_core(path, clock)
    core._create_topic("jobs", 2)
    a, b = Client(core), Client(core)
    join(a, "a")
    hb(b, "b")
    ra = hb(a, "a", 3)
    assert ra.member_epoch == 4
    hb(b, "b", epoch=-1)                                   # b leaves: tombstones
    join(Client(core), "x", group="gone")
    hb(Client(core), "x", epoch=-1, group="gone")
    assert Client(core).call(K.DELETE_GROUPS, 2, groups_names=["gone"]).results[0].error_code == 0
    before = core.share_groups.groups["g"]
    state = (before.group_epoch, before.assignment_epoch, {m: (x.member_epoch, x.assigned, x.subscribed_topic_names)
                                                            for m, x in before.members.items()})
    core.close()
    tables = read_internal(str(path))
    assert {"ShareGroupMemberMetadata", "ShareGroupMetadata", "ShareGroupTargetAssignmentMetadata",
            "ShareGroupTargetAssignmentMember", "ShareGroupCurrentMemberAssignment",
            "ShareGroupStatePartitionMetadata"} <= set(tables)
    core = make_core(path, clock)
    try:
        after = core.share_groups.groups["g"]
        assert (after.group_epoch, after.assignment_epoch, {m: (x.member_epoch, x.assigned, x.subscribed_topic_names)
                                                            for m, x in after.members.items()}) == state
        assert after.initialized == before.initialized and "gone" not in core.share_groups.groups
        assert hb(Client(core), "a", 4).error_code == 0      # the member carries on at its epoch
        tick(core, clock, 45_001)                          # its session timeout runs again
        assert hb(Client(core), "a", 4).error_code == E.UNKNOWN_MEMBER_ID
    finally:
        core.close()
