"""QuorumController on an in-memory metadata log and a fake clock: brokers, topics, elections,
ISR changes, reassignments, configs, producer ids and failover."""
from __future__ import annotations

import json
import os
import random
from typing import Any, Optional

import pytest

from kproto.broker.features import default_levels
from kproto.broker.cluster.controller import (ControllerConfig, NotLeaderError, QuorumController,
                                      StripedReplicaPlacer)
from kproto.storage.metadata_image import MetadataImage, decode_metadata_record
from kproto.broker.timer import FakeClock, SystemTimer
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey
from kproto.storage.internal import decode_metadata_frame

FIXTURE_DECODED = "/work/shared/fixtures/expected/broker1-clean/__cluster_metadata-0/00000000000000000000.log.decoded.jsonl"


class SharedLog:
    """The replicated log as the controllers see it: one list, one leader, a high watermark
    the test moves."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.leader: Optional[int] = None
        self.epoch = 0
        self.high_watermark = 0


class LogView:
    """One node's MetadataLog."""

    def __init__(self, shared: SharedLog, node: int) -> None:
        self.shared, self.node = shared, node

    @property
    def is_leader(self) -> bool:
        return self.shared.leader == self.node

    @property
    def epoch(self) -> int:
        return self.shared.epoch

    @property
    def high_watermark(self) -> int:
        return self.shared.high_watermark

    @property
    def end_offset(self) -> int:
        return len(self.shared.values)

    def append(self, values: list[bytes]) -> int:
        if not self.is_leader:
            raise NotLeaderError()
        self.shared.values += values
        return len(self.shared.values) - 1


class Cluster:
    """Controllers 1..n over one shared log; brokers are only requests here."""

    def __init__(self, controllers: int = 1, seed: int = 7, **config: Any) -> None:
        self.clock = FakeClock(1_000)
        self.timer = SystemTimer(clock=self.clock)
        self.log = SharedLog()
        self.delivered: dict[int, int] = {}
        self.ctrls: dict[int, QuorumController] = {}
        for n in range(1, controllers + 1):
            cfg = ControllerConfig(cluster_id="cluster-A", node_id=n, **config)
            self.ctrls[n] = QuorumController(n, LogView(self.log, n), self.timer, cfg,
                                             rng=random.Random(seed))
            self.delivered[n] = 0
        self.elect(1)
        self.epochs: dict[int, int] = {}

    @property
    def active(self) -> QuorumController:
        return self.ctrls[self.log.leader]

    @property
    def image(self) -> MetadataImage:
        return self.active.image

    def elect(self, node: int) -> None:
        self.log.leader = node
        self.log.epoch += 1
        for c in self.ctrls.values():
            c.handle_leader_change(node, self.log.epoch)

    def commit(self, upto: Optional[int] = None) -> None:
        """Move the high watermark (to the log end by default) and deliver the records."""
        self.log.high_watermark = len(self.log.values) if upto is None else upto
        for n, c in self.ctrls.items():
            start, end = self.delivered[n], self.log.high_watermark
            if end > start:
                self.delivered[n] = end
                c.handle_commit([(o, self.log.values[o]) for o in range(start, end)])

    def send(self, api: int, version: int, commit: bool = True, ctrl: Optional[int] = None,
             **fields: Any) -> list[Any]:
        out: list[Any] = []
        c = self.ctrls[ctrl] if ctrl is not None else self.active
        c.handle(api, version, request_codec(api).cls(**fields), out.append)
        if commit:
            self.commit()
        return out

    def call(self, api: int, version: int, **fields: Any) -> Any:
        out = self.send(api, version, **fields)
        assert len(out) == 1, out
        return out[0]

    def records(self, start: int = 0) -> list[tuple[int, int, Any]]:
        return [decode_metadata_record(v) for v in self.log.values[start:]]

    def register(self, broker_id: int, rack: Optional[str] = None, version: int = 3) -> int:
        R = request_codec(ApiKey.BROKER_REGISTRATION).cls
        resp = self.call(ApiKey.BROKER_REGISTRATION, version, broker_id=broker_id, cluster_id="cluster-A",
                         incarnation_id=Uuid(bytes([broker_id] * 16)),
                         listeners=[R.Listener(name="PLAINTEXT", host=f"b{broker_id}", port=9092,
                                               security_protocol=0)],
                         features=[R.Feature(name="metadata.version", min_supported_version=1,
                                             max_supported_version=21)],
                         rack=rack, log_dirs=[Uuid(bytes([100 + broker_id] * 16))])
        assert resp.error_code == 0
        self.epochs[broker_id] = resp.broker_epoch
        return resp.broker_epoch

    def heartbeat(self, broker_id: int, offset: Optional[int] = None, **flags: Any) -> Any:
        return self.call(ApiKey.BROKER_HEARTBEAT, 1, broker_id=broker_id,
                         broker_epoch=self.epochs[broker_id],
                         current_metadata_offset=len(self.log.values) if offset is None else offset,
                         **flags)

    def start_brokers(self, racks: dict[int, Optional[str]]) -> None:
        for b, rack in racks.items():
            self.register(b, rack)
        for b in racks:
            assert self.heartbeat(b).is_fenced is False

    def create_topic(self, name: str, partitions: int = 3, rf: int = 3, version: int = 7,
                     configs: Optional[dict[str, str]] = None, **fields: Any) -> Any:
        Q = request_codec(ApiKey.CREATE_TOPICS).cls
        topic = Q.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf,
                                 assignments=[], configs=[Q.CreatableTopicConfig(name=k, value=v)
                                                          for k, v in (configs or {}).items()])
        resp = self.call(ApiKey.CREATE_TOPICS, version, topics=[topic], timeout_ms=1000,
                         validate_only=fields.pop("validate_only", False))
        return resp.topics[0]

    def advance(self, ms: int, heartbeat: tuple[int, ...] = ()) -> None:
        """Time passes in steps; the listed brokers heartbeat every step."""
        step = 100  # below the controller's lateness tolerance: a bigger jump is a stall
        while ms > 0:
            d = min(step, ms)
            ms -= d
            self.clock.advance(d)
            self.timer.advance_clock()
            self.commit()
            for b in heartbeat:
                self.heartbeat(b)


def cluster3(**config: Any) -> Cluster:
    c = Cluster(**config)
    c.start_brokers({1: "r1", 2: "r2", 3: "r3"})
    return c


# ---------------------------------------------------------------------------- brokers
def test_bootstrap_writes_features_and_the_formatted_min_insync_replicas() -> None:
    # metadata.version first, then the levels of the other features kproto finalizes, then the
    # cluster-wide dynamic defaults Kafka 4.x's storage tool formats a cluster with
    c = Cluster()
    c.commit()
    records = c.records()
    features = [(rtype, version, rec.name, rec.feature_level) for rtype, version, rec in records
                if rtype == 12]
    assert features == [(12, 0, "metadata.version", 21)] + [
        (12, 0, n, v) for n, v in default_levels().items() if n != "metadata.version"]
    assert c.image.features == default_levels()
    (ctype, _, config), = [r for r in records if r[0] != 12]
    assert (ctype, config.resource_type, config.resource_name, config.name, config.value) == (
        4, 4, "", "min.insync.replicas", "1")
    assert c.image.configs[(4, "")] == {"min.insync.replicas": "1"}


def test_registration_epoch_is_record_offset_and_unfence_when_caught_up() -> None:
    c = Cluster()
    epoch = c.register(1, "r1")
    rtype, version, rec = decode_metadata_record(c.log.values[epoch])
    assert (rtype, version, rec.broker_id, rec.broker_epoch, rec.fenced) == (0, 3, 1, epoch, True)
    assert c.image.brokers[1].fenced
    # behind its own registration: stays fenced
    r = c.heartbeat(1, offset=epoch - 1)
    assert (r.is_caught_up, r.is_fenced, r.should_shut_down) == (False, True, False)
    assert c.image.brokers[1].fenced
    r = c.heartbeat(1, offset=epoch)
    assert (r.is_caught_up, r.is_fenced) == (True, False)
    rtype, version, rec = c.records()[-1]
    # Kafka's controller writes (un)fencing changes at version 0
    assert (rtype, version, rec.broker_id, rec.broker_epoch, rec.fenced) == (17, 0, 1, epoch, -1)
    assert not c.image.brokers[1].fenced


def test_responses_wait_for_commit() -> None:
    c = Cluster()
    c.commit()
    out = c.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, commit=False, broker_id=1, broker_epoch=0)
    assert out and out[0].error_code == ErrorCode.STALE_BROKER_EPOCH  # nothing written: at once
    c.register(1)
    R = request_codec(ApiKey.BROKER_REGISTRATION).cls
    out = c.send(ApiKey.BROKER_REGISTRATION, 3, commit=False, broker_id=2, cluster_id="cluster-A",
                 incarnation_id=Uuid(bytes([2] * 16)), listeners=[], rack=None, log_dirs=[],
                 features=[R.Feature(name="metadata.version", min_supported_version=1,
                                     max_supported_version=21)])
    assert out == []
    assert 2 in c.image.brokers  # replayed at once into the live image ...
    assert 2 not in c.active.committed.brokers  # ... not in the committed one
    c.commit(upto=len(c.log.values) - 1)
    assert out == []
    c.commit()
    assert out[0].error_code == 0 and out[0].broker_epoch == len(c.log.values) - 1


def test_registration_errors() -> None:
    c = Cluster()
    c.register(1)
    c.heartbeat(1)
    R = request_codec(ApiKey.BROKER_REGISTRATION).cls
    feats = [R.Feature(name="metadata.version", min_supported_version=1, max_supported_version=21)]
    base = dict(broker_id=1, listeners=[], rack=None, log_dirs=[], features=feats)
    r = c.call(ApiKey.BROKER_REGISTRATION, 3, cluster_id="other", incarnation_id=Uuid(bytes([1] * 16)), **base)
    assert r.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    # another incarnation while the first one's session is alive
    r = c.call(ApiKey.BROKER_REGISTRATION, 3, cluster_id="cluster-A", incarnation_id=Uuid(bytes([9] * 16)), **base)
    assert r.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    base["features"] = [R.Feature(name="metadata.version", min_supported_version=1, max_supported_version=7)]
    r = c.call(ApiKey.BROKER_REGISTRATION, 3, cluster_id="cluster-A", incarnation_id=Uuid(bytes([1] * 16)), **base)
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_session_timeout_fences_and_moves_leaders() -> None:
    c = cluster3(broker_session_timeout_ms=3000)
    c.create_topic("t", partitions=3, rf=3)
    before = {p.partition: p for p in c.image.topics["t"].partitions.values()}
    victim = before[0].leader
    alive = tuple(b for b in (1, 2, 3) if b != victim)
    start = len(c.log.values)
    c.advance(2500, heartbeat=(1, 2, 3))
    assert not c.image.brokers[victim].fenced
    c.advance(3500, heartbeat=alive)
    assert c.image.brokers[victim].fenced
    recs = c.records(start)
    changes = [r for t, v, r in recs if t == 5]
    fence = [(i, r) for i, (t, v, r) in enumerate(recs) if t == 17 and r.fenced == 1]
    assert [r.broker_id for _, r in fence] == [victim]
    # partition changes come before the fence record, in the same write
    assert all(recs.index(x) < fence[0][0] for x in [(5, 2, r) for r in changes])
    for i, old in before.items():
        new = c.image.topics["t"].partitions[i]
        assert victim not in new.isr and new.isr == tuple(r for r in old.isr if r != victim)
        assert new.partition_epoch == old.partition_epoch + 1
        if old.leader == victim:
            assert new.leader in alive and new.leader == next(r for r in old.replicas if r in alive)
            assert new.leader_epoch == old.leader_epoch + 1
        else:
            assert (new.leader, new.leader_epoch) == (old.leader, old.leader_epoch)
    # a stale broker's heartbeat with the old epoch still works; it comes back unfenced
    r = c.heartbeat(victim)
    assert r.is_fenced is False and not c.image.brokers[victim].fenced


def test_controller_stall_fences_nobody() -> None:
    """The controller's loop held up past the session timeout (a loaded machine): heartbeats
    sent meanwhile are read before sessions are judged, so no broker is fenced and no
    leadership moves; a broker still silent afterwards is fenced."""
    c = cluster3(broker_session_timeout_ms=2000)
    c.create_topic("t", partitions=3, rf=3)
    before = {i: (p.leader, p.leader_epoch) for i, p in c.image.topics["t"].partitions.items()}
    c.advance(1000, heartbeat=(1, 2, 3))
    c.clock.advance(2500)  # one stall: the session check fires 1.5 s late
    c.timer.advance_clock()
    c.commit()
    for b in (1, 2):  # the queued heartbeats are read right after
        c.heartbeat(b)
    c.advance(300, heartbeat=(1, 2))
    assert not any(b.fenced for b in c.image.brokers.values())
    after = {i: (p.leader, p.leader_epoch) for i, p in c.image.topics["t"].partitions.items()}
    assert after == before
    c.advance(1000, heartbeat=(1, 2))
    assert c.image.brokers[3].fenced and not c.image.brokers[1].fenced


def test_last_isr_member_stays_and_leader_returns_on_unfence() -> None:
    c = cluster3(broker_session_timeout_ms=3000)
    c.create_topic("solo", partitions=1, rf=1)
    p = c.image.partition("solo", 0)
    b = p.leader
    others = tuple(x for x in (1, 2, 3) if x != b)
    c.advance(4000, heartbeat=others)
    q = c.image.partition("solo", 0)
    assert (q.leader, q.isr, q.leader_epoch) == (-1, (b,), p.leader_epoch + 1)
    c.heartbeat(b)
    q = c.image.partition("solo", 0)
    assert (q.leader, q.isr, q.leader_epoch) == (b, (b,), p.leader_epoch + 2)


def test_unclean_election_on_fence_only_where_enabled() -> None:
    c = cluster3(broker_session_timeout_ms=3000)
    for name, conf in (("clean", {}), ("dirty", {"unclean.leader.election.enable": "true"})):
        Q = request_codec(ApiKey.CREATE_TOPICS).cls
        r = c.call(ApiKey.CREATE_TOPICS, 7, timeout_ms=0, validate_only=False, topics=[Q.CreatableTopic(
            name=name, num_partitions=-1, replication_factor=-1, configs=[
                Q.CreatableTopicConfig(name=k, value=v) for k, v in conf.items()],
            assignments=[Q.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])])])
        assert r.topics[0].error_code == 0, r
        p = c.image.partition(name, 0)
        shrink(c, p, [1])
    c.advance(4000, heartbeat=(2, 3))
    clean, dirty = c.image.partition("clean", 0), c.image.partition("dirty", 0)
    assert (clean.leader, clean.isr, clean.leader_recovery_state) == (-1, (1,), 0)
    assert (dirty.leader, dirty.isr, dirty.leader_recovery_state) == (2, (2,), 1)


def shrink(c: Cluster, p: Any, isr: list[int], version: int = 3, broker: Optional[int] = None,
           **over: Any) -> Any:
    A = request_codec(ApiKey.ALTER_PARTITION).cls
    pd = A.PartitionData(partition_index=p.partition, leader_epoch=over.get("leader_epoch", p.leader_epoch),
                         partition_epoch=over.get("partition_epoch", p.partition_epoch),
                         leader_recovery_state=over.get("lrs", 0),
                         new_isr=isr, new_isr_with_epochs=[A.BrokerState(broker_id=b, broker_epoch=-1) for b in isr])
    broker = p.leader if broker is None else broker
    r = c.call(ApiKey.ALTER_PARTITION, version, broker_id=broker,
               broker_epoch=over.get("broker_epoch", c.epochs[broker]),
               topics=[A.TopicData(topic_name=p.topic, topic_id=p.topic_id, partitions=[pd])])
    return r


def test_controlled_shutdown_moves_leadership_then_shuts_down() -> None:
    c = cluster3()
    c.create_topic("t", partitions=3, rf=3)
    led = [p for p in c.image.topics["t"].partitions.values() if p.leader == 2]
    assert led
    r = c.heartbeat(2, want_shut_down=True)
    assert (r.is_fenced, r.should_shut_down) == (False, False)
    b2 = c.image.brokers[2]
    assert b2.in_controlled_shutdown and not b2.fenced
    for p in c.image.topics["t"].partitions.values():
        assert p.leader != 2 and 2 not in p.isr
    # the others have not yet fetched past the shutdown records
    r = c.heartbeat(2, want_shut_down=True)
    assert r.should_shut_down is False
    c.heartbeat(1)
    c.heartbeat(3)
    r = c.heartbeat(2, want_shut_down=True)
    assert (r.is_fenced, r.should_shut_down) == (True, True)
    assert c.image.brokers[2].fenced


def test_unregister_broker() -> None:
    c = cluster3()
    c.create_topic("t", partitions=1, rf=3)
    r = c.call(ApiKey.UNREGISTER_BROKER, 0, broker_id=3)
    assert r.error_code == 0
    assert 3 not in c.image.brokers and 3 not in c.image.partition("t", 0).isr
    assert c.call(ApiKey.UNREGISTER_BROKER, 0, broker_id=3).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED


# ---------------------------------------------------------------------------- topics
def test_create_topic_records_and_placement() -> None:
    c = cluster3()
    start = len(c.log.values)
    res = c.create_topic("orders", partitions=3, rf=3, configs={"cleanup.policy": "compact"})
    assert res.error_code == 0 and res.num_partitions == 3 and res.replication_factor == 3
    listed = dict((x.name, (x.value, x.config_source)) for x in res.configs)
    assert listed["cleanup.policy"] == ("compact", 1)
    assert (listed["min.insync.replicas"], listed["retention.ms"]) == (("1", 3), ("604800000", 5))
    types = [t for t, v, r in c.records(start)]
    assert types == [2, 4, 3, 3, 3]  # TopicRecord, ConfigRecords, PartitionRecords
    t = c.image.topics["orders"]
    assert res.topic_id == t.topic_id and c.image.configs[(2, "orders")] == {"cleanup.policy": "compact"}
    leaders = sorted(p.leader for p in t.partitions.values())
    assert leaders == [1, 2, 3]  # the striped placer spreads leaders
    for p in t.partitions.values():
        assert sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
        assert p.directories == tuple(Uuid(bytes([100 + r] * 16)) for r in p.replicas)


def test_placement_is_rack_aware_and_deterministic() -> None:
    brokers = [(1, "a", False), (2, "a", False), (3, "b", False), (4, "b", False)]
    placer = StripedReplicaPlacer(random.Random(1), brokers)
    assignments = [placer.place(2) for _ in range(8)]
    rack = {b: r for b, r, _ in brokers}
    for a in assignments:
        assert len(set(a)) == 2 and {rack[x] for x in a} == {"a", "b"}
    assert sorted(a[0] for a in assignments) == [1, 1, 2, 2, 3, 3, 4, 4]
    again = StripedReplicaPlacer(random.Random(1), brokers)
    assert [again.place(2) for _ in range(8)] == assignments
    # a fenced broker never leads a new partition but may follow when needed
    placer = StripedReplicaPlacer(random.Random(3), [(1, None, False), (2, None, True)])
    for _ in range(4):
        assert placer.place(2)[0] == 1


def test_create_topic_errors_and_defaults() -> None:
    c = cluster3(default_replication_factor=2, num_partitions=4)
    res = c.create_topic("d", partitions=-1, rf=-1)
    assert res.error_code == 0 and (res.num_partitions, res.replication_factor) == (4, 2)
    assert all(len(p.replicas) == 2 for p in c.image.topics["d"].partitions.values())
    res = c.create_topic("d")
    assert (res.error_code, res.error_message) == (ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'd' already exists.")
    res = c.create_topic("big", rf=4)
    assert res.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert res.error_message == ("Unable to replicate the partition 4 time(s): The target replication "
                                 "factor of 4 cannot be reached because only 3 broker(s) are registered.")
    res = c.create_topic("zero", rf=0)
    assert res.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert c.create_topic("bad name!").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert c.create_topic("x", configs={"no.such": "1"}).error_code == ErrorCode.INVALID_CONFIG
    start = len(c.log.values)
    res = c.create_topic("dry", validate_only=True)
    assert res.error_code == 0 and "dry" not in c.image.topics and len(c.log.values) == start


def test_create_topic_needs_unfenced_brokers() -> None:
    c = Cluster()
    c.register(1)
    res = c.create_topic("t", partitions=1, rf=1)
    assert res.error_code == ErrorCode.INVALID_REPLICATION_FACTOR
    assert res.error_message.endswith("All brokers are currently fenced.")


def test_delete_topics() -> None:
    c = cluster3()
    res = c.create_topic("gone", configs={"retention.ms": "1000"})
    r = c.call(ApiKey.DELETE_TOPICS, 6, timeout_ms=0, topics=[
        request_codec(ApiKey.DELETE_TOPICS).cls.DeleteTopicState(name="gone", topic_id=Uuid.ZERO),
        request_codec(ApiKey.DELETE_TOPICS).cls.DeleteTopicState(name=None, topic_id=Uuid(b"\1" * 16))])
    assert [x.error_code for x in r.responses] == [0, ErrorCode.UNKNOWN_TOPIC_ID]
    assert r.responses[0].topic_id == res.topic_id
    t, v, rec = c.records()[-1]
    assert (t, v, rec.topic_id) == (9, 0, res.topic_id)
    assert "gone" not in c.image.topics and (2, "gone") not in c.image.configs
    r = c.call(ApiKey.DELETE_TOPICS, 4, timeout_ms=0, topic_names=["gone"])
    assert r.responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_partitions() -> None:
    c = cluster3()
    c.create_topic("t", partitions=1, rf=2)
    P = request_codec(ApiKey.CREATE_PARTITIONS).cls
    r = c.call(ApiKey.CREATE_PARTITIONS, 3, timeout_ms=0, validate_only=False, topics=[
        P.CreatePartitionsTopic(name="t", count=3, assignments=None),
        P.CreatePartitionsTopic(name="nope", count=3, assignments=None)])
    assert [x.error_code for x in r.results] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    parts = c.image.topics["t"].partitions
    assert sorted(parts) == [0, 1, 2] and all(len(p.replicas) == 2 for p in parts.values())
    r = c.call(ApiKey.CREATE_PARTITIONS, 3, timeout_ms=0, validate_only=False, topics=[
        P.CreatePartitionsTopic(name="t", count=2, assignments=None)])
    assert r.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    r = c.call(ApiKey.CREATE_PARTITIONS, 3, timeout_ms=0, validate_only=False, topics=[
        P.CreatePartitionsTopic(name="t", count=4, assignments=[P.CreatePartitionsAssignment(broker_ids=[3, 9])])])
    assert r.results[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT


# ---------------------------------------------------------------------------- AlterPartition
def test_alter_partition_accept_and_reject() -> None:
    c = cluster3()
    c.create_topic("t", partitions=1, rf=3)
    p = c.image.partition("t", 0)
    follower = p.replicas[-1]
    new_isr = [r for r in p.isr if r != follower]
    r = shrink(c, p, new_isr)
    assert r.error_code == 0
    out = r.topics[0].partitions[0]
    q = c.image.partition("t", 0)
    assert out.error_code == 0 and list(out.isr) == new_isr == list(q.isr)
    assert (out.leader_id, out.leader_epoch, out.partition_epoch) == (q.leader, p.leader_epoch, p.partition_epoch + 1)
    # the same request again: its partition epoch is stale now
    assert shrink(c, p, new_isr).topics[0].partitions[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert shrink(c, q, new_isr, leader_epoch=q.leader_epoch - 1).topics[0].partitions[0].error_code == \
        ErrorCode.FENCED_LEADER_EPOCH
    assert shrink(c, q, new_isr, leader_epoch=q.leader_epoch + 1).topics[0].partitions[0].error_code == \
        ErrorCode.NOT_CONTROLLER
    assert shrink(c, q, new_isr, broker=follower).topics[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
    assert shrink(c, q, new_isr, broker_epoch=12345).error_code == ErrorCode.STALE_BROKER_EPOCH
    # a shutting-down broker cannot rejoin the ISR
    c.heartbeat(follower, want_shut_down=True)
    q = c.image.partition("t", 0)
    assert shrink(c, q, list(q.isr) + [follower]).topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA
    # version 1 topics by name
    assert shrink(c, q, list(q.isr), version=1).topics[0].partitions[0].error_code == 0


# ---------------------------------------------------------------------------- elections
def elect(c: Cluster, kind: int, topic: str, parts: list[int]) -> list[Any]:
    E = request_codec(ApiKey.ELECT_LEADERS).cls
    r = c.call(ApiKey.ELECT_LEADERS, 2, election_type=kind, timeout_ms=0,
               topic_partitions=[E.TopicPartitions(topic=topic, partitions=parts)])
    return [(x.partition_id, x.error_code) for res in r.replica_election_results for x in res.partition_result]


def test_preferred_and_unclean_elections() -> None:
    c = cluster3(broker_session_timeout_ms=3000)
    c.create_topic("t", partitions=1, rf=3)
    p = c.image.partition("t", 0)
    pref = p.replicas[0]
    assert elect(c, 0, "t", [0]) == [(0, ErrorCode.ELECTION_NOT_NEEDED)]
    # the preferred leader leaves: another leads; back but out of the ISR: not available
    c.advance(4000, heartbeat=tuple(b for b in (1, 2, 3) if b != pref))
    q = c.image.partition("t", 0)
    assert q.leader != pref
    c.heartbeat(pref)
    assert elect(c, 0, "t", [0]) == [(0, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)]
    q = c.image.partition("t", 0)
    assert shrink(c, q, list(q.isr) + [pref]).topics[0].partitions[0].error_code == 0
    assert elect(c, 0, "t", [0]) == [(0, 0)]
    assert c.image.partition("t", 0).leader == pref
    assert elect(c, 0, "t", [9]) == [(9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    # unclean: the ISR's only member is gone, a live out-of-sync replica may lead
    q = c.image.partition("t", 0)
    shrink(c, q, [pref])
    c.advance(4000, heartbeat=tuple(b for b in (1, 2, 3) if b != pref))
    q = c.image.partition("t", 0)
    assert (q.leader, q.isr) == (-1, (pref,))
    assert elect(c, 0, "t", [0]) == [(0, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)]
    assert elect(c, 1, "t", [0]) == [(0, 0)]
    u = c.image.partition("t", 0)
    assert u.leader == next(r for r in q.replicas if r != pref) and u.isr == (u.leader,)
    assert u.leader_recovery_state == 1 and u.leader_epoch == q.leader_epoch + 1
    assert elect(c, 1, "t", [0]) == [(0, ErrorCode.ELECTION_NOT_NEEDED)]


def test_election_and_reassignment_answers_carry_kafkas_texts() -> None:
    """As the single broker answers (both as Kafka 4.4.0's controller): ELECTION_NOT_NEEDED's
    wire text, an unknown election type refusing the whole request, an unknown topic named
    as such, an unknown broker found before a repeated one, no text with
    NO_REASSIGNMENT_IN_PROGRESS."""
    c = cluster3()
    c.create_topic("t", partitions=1, rf=3)
    E = request_codec(ApiKey.ELECT_LEADERS).cls
    r = c.call(ApiKey.ELECT_LEADERS, 2, election_type=0, timeout_ms=0,
               topic_partitions=[E.TopicPartitions(topic="t", partitions=[0])])
    assert r.replica_election_results[0].partition_result[0].error_message == \
        "Leader election not needed for topic partition."
    r = c.call(ApiKey.ELECT_LEADERS, 2, election_type=3, timeout_ms=0,
               topic_partitions=[E.TopicPartitions(topic="nope", partitions=[0])])
    assert r.error_code == ErrorCode.INVALID_REQUEST
    p = r.replica_election_results[0].partition_result[0]
    assert (p.error_code, p.error_message) == (ErrorCode.INVALID_REQUEST, "Unknown election type 3")
    A = request_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS).cls

    def alter(topic: str, replicas: Any) -> tuple[int, Any]:
        r = c.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=0, topics=[A.ReassignableTopic(
            name=topic, partitions=[A.ReassignablePartition(partition_index=0, replicas=replicas)])])
        p = r.responses[0].partitions[0]
        return p.error_code, p.error_message
    assert alter("nope", [1]) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")
    assert alter("t", None) == (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, None)
    assert alter("t", [7, 7]) == (ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment "
                                  "includes broker 7, but no such broker is registered.")


def test_auto_rebalance_moves_leader_back_to_preferred() -> None:
    c = cluster3(broker_session_timeout_ms=3000, leader_imbalance_check_interval_ms=10_000)
    c.create_topic("t", partitions=1, rf=3)
    pref = c.image.partition("t", 0).replicas[0]
    others = tuple(b for b in (1, 2, 3) if b != pref)
    c.advance(4000, heartbeat=others)
    c.heartbeat(pref)
    q = c.image.partition("t", 0)
    shrink(c, q, list(q.isr) + [pref])
    assert c.image.partition("t", 0).leader != pref
    c.advance(7000, heartbeat=(1, 2, 3))
    assert c.image.partition("t", 0).leader == pref


# ---------------------------------------------------------------------------- reassignment
def test_reassignment_completes_when_new_replica_joins_isr() -> None:
    c = cluster3()
    A = request_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS).cls
    Q = request_codec(ApiKey.CREATE_TOPICS).cls
    c.call(ApiKey.CREATE_TOPICS, 7, timeout_ms=0, validate_only=False, topics=[Q.CreatableTopic(
        name="r", num_partitions=-1, replication_factor=-1, configs=[],
        assignments=[Q.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])])])
    r = c.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=0, topics=[A.ReassignableTopic(
        name="r", partitions=[A.ReassignablePartition(partition_index=0, replicas=[2, 3])])])
    assert r.responses[0].partitions[0].error_code == 0
    p = c.image.partition("r", 0)
    assert (p.replicas, p.adding_replicas, p.removing_replicas) == ((2, 3, 1), (3,), (1,))
    # each replica's log dir: kept for the old ones, the broker's only dir for the new one
    assert p.directories == tuple(Uuid(bytes([100 + r] * 16)) for r in p.replicas)
    assert p.leader_epoch == 0  # nothing removed yet: the epoch is bumped when 1 leaves
    L = request_codec(ApiKey.LIST_PARTITION_REASSIGNMENTS).cls
    lr = c.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=0, topics=None)
    (t,) = lr.topics
    assert t.name == "r" and list(t.partitions[0].adding_replicas) == [3]
    # the new replica catches up: the leader adds it to the ISR and the reassignment completes
    out = shrink(c, p, [1, 2, 3]).topics[0].partitions[0]
    assert out.error_code == ErrorCode.NEW_LEADER_ELECTED
    p = c.image.partition("r", 0)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas, p.leader) == ((2, 3), (2, 3), (), (), 2)
    lr = c.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, timeout_ms=0,
                topics=[L.ListPartitionReassignmentsTopics(name="r", partition_indexes=[0])])
    assert lr.topics == []
    r = c.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=0, topics=[A.ReassignableTopic(
        name="r", partitions=[A.ReassignablePartition(partition_index=0, replicas=None)])])
    assert r.responses[0].partitions[0].error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_reassignment_cancel_reverts() -> None:
    c = cluster3()
    c.create_topic("r", partitions=1, rf=1)
    p = c.image.partition("r", 0)
    other = next(b for b in (1, 2, 3) if b != p.leader)
    A = request_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS).cls
    c.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=0, topics=[A.ReassignableTopic(
        name="r", partitions=[A.ReassignablePartition(partition_index=0, replicas=[p.leader, other])])])
    assert c.image.partition("r", 0).adding_replicas == (other,)
    c.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, timeout_ms=0, topics=[A.ReassignableTopic(
        name="r", partitions=[A.ReassignablePartition(partition_index=0, replicas=None)])])
    q = c.image.partition("r", 0)
    assert (q.replicas, q.adding_replicas, q.leader) == (p.replicas, (), p.leader)


# ---------------------------------------------------------------------------- configs, producer ids
def test_incremental_alter_configs() -> None:
    c = cluster3()
    c.create_topic("t", partitions=1, rf=1)
    I = request_codec(ApiKey.INCREMENTAL_ALTER_CONFIGS).cls

    def alter(rtype: int, name: str, *ops: tuple[str, int, Optional[str]], validate: bool = False) -> Any:
        return c.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=validate, resources=[
            I.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
                I.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])]).responses[0]

    assert alter(2, "t", ("retention.ms", 0, "1000"), ("cleanup.policy", 2, "compact")).error_code == 0
    assert c.image.configs[(2, "t")] == {"retention.ms": "1000", "cleanup.policy": "delete,compact"}
    start = len(c.log.values)
    assert alter(2, "t", ("retention.ms", 0, "1000")).error_code == 0
    assert len(c.log.values) == start  # no change, no record
    assert alter(2, "t", ("retention.ms", 1, None), ("cleanup.policy", 3, "delete")).error_code == 0
    assert c.image.configs[(2, "t")] == {"cleanup.policy": "compact"}
    assert alter(2, "t", ("no.such", 0, "1")).error_code == ErrorCode.INVALID_CONFIG
    r = alter(2, "t", ("retention.ms", 2, "5"))
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_CONFIG, "Config value append is not "
                                               "allowed for config key: retention.ms")
    assert alter(2, "t", ("retention.ms", 0, "abc")).error_code == ErrorCode.INVALID_CONFIG
    assert alter(2, "missing", ("retention.ms", 0, "1")).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(4, "", ("log.retention.ms", 0, "5")).error_code == 0
    assert alter(4, "1", ("log.retention.ms", 0, "6"), validate=True).error_code == 0
    assert c.image.configs[(4, "")] == {"log.retention.ms": "5", "min.insync.replicas": "1"}
    assert (4, "1") not in c.image.configs
    t, v, rec = c.records()[-1]
    assert (t, v, rec.resource_type, rec.resource_name, rec.name, rec.value) == (4, 0, 4, "", "log.retention.ms", "5")


def test_allocate_producer_ids_in_blocks() -> None:
    c = cluster3()
    a = c.call(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1, broker_epoch=c.epochs[1])
    b = c.call(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=2, broker_epoch=c.epochs[2])
    assert (a.producer_id_start, a.producer_id_len, b.producer_id_start) == (0, 1000, 1000)
    t, v, rec = c.records()[-1]
    assert (t, v, rec.broker_id, rec.broker_epoch, rec.next_producer_id) == (15, 0, 2, c.epochs[2], 2000)
    assert c.image.next_producer_id == 2000
    r = c.call(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1, broker_epoch=c.epochs[1] + 1)
    assert r.error_code == ErrorCode.STALE_BROKER_EPOCH


# ---------------------------------------------------------------------------- failover
def image_state(img: MetadataImage) -> Any:
    return ({b: (x.epoch, x.fenced, x.rack) for b, x in img.brokers.items()},
            {n: sorted(t.partitions.items()) for n, t in img.topics.items()},
            img.configs, img.features, img.next_producer_id)


def test_failover_second_controller_takes_over() -> None:
    c = Cluster(controllers=2, broker_session_timeout_ms=3000)
    c.start_brokers({1: "r1", 2: "r2", 3: "r3"})
    c.create_topic("t", partitions=2, rf=2)
    standby = c.ctrls[2]
    assert not standby.is_active
    r = c.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, ctrl=2, broker_id=1, broker_epoch=c.epochs[1])
    assert r[0].error_code == ErrorCode.NOT_CONTROLLER
    assert image_state(standby.image) == image_state(c.ctrls[1].image)
    # controller 1 writes a topic that never commits, then loses the leadership
    pending = c.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, commit=False, broker_id=1, broker_epoch=c.epochs[1])
    assert pending == [] and c.ctrls[1].image.next_producer_id == 1000
    del c.log.values[c.log.high_watermark:]  # the new leader truncates the uncommitted tail
    c.elect(2)
    assert pending[0].error_code == ErrorCode.NOT_CONTROLLER
    assert not c.ctrls[1].is_active and standby.is_active
    assert c.ctrls[1].image.next_producer_id == 0  # back to the committed state
    assert image_state(standby.image) == image_state(c.ctrls[1].committed)
    # the new controller serves, and the old one refuses
    a = c.call(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1, broker_epoch=c.epochs[1])
    assert (a.error_code, a.producer_id_start) == (0, 0)
    assert c.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, ctrl=1, broker_id=1,
                  broker_epoch=c.epochs[1])[0].error_code == ErrorCode.NOT_CONTROLLER
    assert c.create_topic("u", partitions=1, rf=3).error_code == 0
    # it gave every broker a fresh session: nobody is fenced at once, then the silent one is
    c.advance(2500, heartbeat=(1, 2))
    assert not c.image.brokers[3].fenced
    c.advance(1000, heartbeat=(1, 2))
    assert c.image.brokers[3].fenced
    assert image_state(c.ctrls[1].image) == image_state(standby.image)


def test_leadership_needs_the_log_leader() -> None:
    """handle_leader_change naming this node does nothing while its log does not lead; the
    append error is the Raft replica's own NotLeaderError class."""
    from kproto.broker.cluster import raft

    assert NotLeaderError is raft.NotLeaderError
    c = Cluster(controllers=2)
    c.commit()
    c.ctrls[2].handle_leader_change(2, c.log.epoch)
    assert not c.ctrls[2].is_active and c.ctrls[1].is_active


# ---------------------------------------------------------------------------- Kafka's record shapes
def test_written_records_look_like_kafkas() -> None:
    """Every record type the controller wrote for registration, unfencing, a topic with a
    config and a producer id block decodes (Kafka's JSON convention) to the same type, version
    and fields as the same record type in a log written by Kafka 3.9."""
    if not os.path.exists(FIXTURE_DECODED):
        pytest.skip("fixtures not available")
    with open(FIXTURE_DECODED) as f:
        kafka = [json.loads(line) for line in f]
    theirs = {}
    for x in kafka:
        if not x["is_control"]:
            theirs.setdefault(x["type"], x)
    c = cluster3()
    c.create_topic("orders", partitions=3, rf=3, configs={"cleanup.policy": "compact"})
    c.call(ApiKey.ALLOCATE_PRODUCER_IDS, 0, broker_id=1, broker_epoch=c.epochs[1])
    ours = {}
    for v in c.log.values:
        d = decode_metadata_frame(v)
        ours.setdefault(d["type"], d)
    assert set(ours) == {"FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD",
                         "TOPIC_RECORD", "PARTITION_RECORD", "CONFIG_RECORD", "PRODUCER_IDS_RECORD"}
    for name, d in ours.items():
        k = theirs[name]
        assert (d["frame_version"], d["api_key"]) == (k["frame_version"], k["api_key"]), name
        if name == "BROKER_REGISTRATION_CHANGE_RECORD":
            # the fixture stores every type at its highest version; Kafka's controller writes
            # (un)fencing at version 0, the same tagged fields
            assert (d["version"], k["version"]) == (0, 2)
        else:
            assert d["version"] == k["version"], name
        assert set(d["data"]) == set(k["data"]), name
        for field, value in k["data"].items():
            assert type(d["data"][field]) is type(value) or value is None or d["data"][field] is None, (name, field)
    assert ours["PARTITION_RECORD"]["data"]["partitionEpoch"] == 0
    assert ours["PARTITION_RECORD"]["data"]["leaderEpoch"] == 0


def test_elect_all_partitions_reports_only_elections_done() -> None:
    c = cluster3(broker_session_timeout_ms=3000)
    c.create_topic("t", partitions=3, rf=2)
    moved = [p for p in c.image.topics["t"].partitions.values() if p.leader == 1]
    assert moved
    c.advance(4000, heartbeat=(2, 3))
    c.heartbeat(1)
    for p in moved:
        q = c.image.partition("t", p.partition)
        shrink(c, q, list(q.isr) + [1])
    r = c.call(ApiKey.ELECT_LEADERS, 2, election_type=0, timeout_ms=0, topic_partitions=None)
    done = sorted((res.topic, x.partition_id, x.error_code) for res in r.replica_election_results
                  for x in res.partition_result)
    assert done == sorted(("t", p.partition, 0) for p in moved)
    assert all(c.image.partition("t", p.partition).leader == 1 for p in moved)


def test_want_fence_fences_at_once() -> None:
    c = cluster3()
    c.create_topic("t", partitions=1, rf=3)
    r = c.heartbeat(3, want_fence=True)
    assert (r.is_fenced, r.should_shut_down) == (True, False)
    assert c.image.brokers[3].fenced and 3 not in c.image.partition("t", 0).isr


def test_old_create_topics_version_has_no_configs() -> None:
    c = cluster3()
    res = c.create_topic("old", partitions=2, rf=1, version=4)
    assert res.error_code == 0 and "old" in c.image.topics
    from kproto.codecs import response as response_codec
    data = response_codec(ApiKey.CREATE_TOPICS).encode(
        response_codec(ApiKey.CREATE_TOPICS).cls(topics=[res]), 4)
    assert response_codec(ApiKey.CREATE_TOPICS).decode(data, 4).topics[0].name == "old"


def test_registration_features() -> None:
    c = Cluster()
    c.commit()
    R = request_codec(ApiKey.BROKER_REGISTRATION).cls
    # no metadata.version named: only the first KRaft level, which this cluster is past
    r = c.call(ApiKey.BROKER_REGISTRATION, 3, broker_id=1, cluster_id="cluster-A",
               incarnation_id=Uuid(b"\1" * 16), listeners=[], rack=None, log_dirs=[], features=[])
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
    r = c.call(ApiKey.BROKER_REGISTRATION, 3, broker_id=1, cluster_id="cluster-A",
               incarnation_id=Uuid(b"\1" * 16), listeners=[], rack=None, log_dirs=[],
               features=[R.Feature(name="other.feature", min_supported_version=0, max_supported_version=3),
                         R.Feature(name="metadata.version", min_supported_version=1, max_supported_version=21)])
    assert r.error_code == 0
    rec = decode_metadata_record(c.log.values[r.broker_epoch])[2]
    assert [(f.name, f.min_supported_version, f.max_supported_version) for f in rec.features] == \
        [("other.feature", 0, 3), ("metadata.version", 1, 21)]


def test_offline_log_dir_moves_partitions_away() -> None:
    c = cluster3()
    c.create_topic("t", partitions=3, rf=3)
    before = {i: p for i, p in c.image.topics["t"].partitions.items()}
    dir2 = c.image.brokers[2].log_dirs[0]
    start = len(c.log.values)
    c.call(ApiKey.BROKER_HEARTBEAT, 1, broker_id=2, broker_epoch=c.epochs[2],
           current_metadata_offset=len(c.log.values), offline_log_dirs=[dir2])
    for i, p in c.image.topics["t"].partitions.items():
        assert 2 not in p.isr and p.leader != 2
        assert (p.leader_epoch > before[i].leader_epoch) == (before[i].leader == 2)
    t, v, rec = c.records(start)[-1]
    assert (t, v, rec.broker_id, list(rec.log_dirs)) == (17, 2, 2, [])


def test_append_refused_resigns_and_answers_not_controller() -> None:
    c = cluster3()
    pending = c.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, commit=False, broker_id=1, broker_epoch=c.epochs[1])
    assert pending == []
    ctrl = c.active
    c.log.leader = None  # Raft lost the leadership before telling the controller
    out = c.send(ApiKey.ALLOCATE_PRODUCER_IDS, 0, commit=False, ctrl=1, broker_id=2, broker_epoch=c.epochs[2])
    assert [r.error_code for r in out] == [ErrorCode.NOT_CONTROLLER]
    assert [r.error_code for r in pending] == [ErrorCode.NOT_CONTROLLER]
    assert not ctrl.is_active and ctrl.image is ctrl.committed


def test_reassignment_removing_a_follower_bumps_leader_epoch() -> None:
    c = cluster3()
    c.create_topic("s", partitions=1, rf=3)
    p = c.image.partition("s", 0)
    keep = [p.leader] + [r for r in p.replicas if r != p.leader][:1]
    A = request_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS).cls
    r = c.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, timeout_ms=0, allow_replication_factor_change=True,
               topics=[A.ReassignableTopic(name="s", partitions=[A.ReassignablePartition(partition_index=0,
                                                                                        replicas=keep)])])
    assert r.responses[0].partitions[0].error_code == 0
    q = c.image.partition("s", 0)
    # nothing to add: done at once; the removed replica is fenced off by a new leader epoch
    assert (q.replicas, q.isr, q.leader, q.adding_replicas, q.removing_replicas) == (tuple(keep), tuple(
        x for x in p.isr if x in keep), p.leader, (), ())
    assert (q.leader_epoch, q.partition_epoch) == (p.leader_epoch + 1, p.partition_epoch + 1)
    r = c.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, timeout_ms=0, allow_replication_factor_change=False,
               topics=[A.ReassignableTopic(name="s", partitions=[A.ReassignablePartition(partition_index=0,
                                                                                        replicas=[keep[0]])])])
    assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_over_the_raft_replica(tmp_path: Any) -> None:
    """A single-voter KRaftReplica as the metadata log: the controller is told it leads once
    the LeaderChange commits, bootstraps metadata.version, and answers a registration with the
    offset its record got, once committed."""
    from kproto.broker.cluster.raft import KRaftReplica, open_metadata_log

    class RaftLog:
        replica: Any = None
        is_leader = property(lambda self: self.replica.is_leader)
        epoch = property(lambda self: self.replica.epoch)
        high_watermark = property(lambda self: self.replica.high_watermark)
        end_offset = property(lambda self: self.replica.log.log_end_offset)

        def append(self, values: list[bytes]) -> int:
            return self.replica.append(values)

    class NoPeers:
        def send(self, *args: Any, **kwargs: Any) -> None:
            raise AssertionError("a single voter sends nothing")

    clock = FakeClock(1_000)
    timer = SystemTimer(clock=clock)
    log = RaftLog()
    ctrl = QuorumController(1, log, timer, ControllerConfig(cluster_id="c", node_id=1), rng=random.Random(1))
    log.replica = KRaftReplica(1, [1], open_metadata_log(str(tmp_path)), cluster_id="c", transport=NoPeers(),
                               timer=timer, wall_ms=clock.now_ms)
    log.replica.register(ctrl)   # once the adapter reaches the replica
    for _ in range(100):
        if ctrl.is_active and log.high_watermark == log.end_offset:
            break
        clock.advance(50)
        timer.advance_clock()
    assert ctrl.is_active and ctrl.committed.features == default_levels()
    R = request_codec(ApiKey.BROKER_REGISTRATION).cls
    out: list[Any] = []
    ctrl.handle(ApiKey.BROKER_REGISTRATION, 3, R(
        broker_id=1, cluster_id="c", incarnation_id=Uuid(b"\1" * 16), listeners=[], rack=None, log_dirs=[],
        features=[R.Feature(name="metadata.version", min_supported_version=1, max_supported_version=21)]),
        out.append)
    epoch = log.end_offset - 1
    for _ in range(10):
        clock.advance(10)
        timer.advance_clock()
    assert [(r.error_code, r.broker_epoch) for r in out] == [(0, epoch)]
    assert ctrl.committed.brokers[1].epoch == epoch


# ---------------------------------------------------------------------------- features and controllers
def test_update_features_writes_feature_level_records() -> None:
    c = Cluster()
    c.commit()
    c.register(1)
    start = len(c.log.values)
    R = request_codec(ApiKey.UPDATE_FEATURES).cls
    resp = c.call(ApiKey.UPDATE_FEATURES, 1, timeout_ms=1000, validate_only=True, feature_updates=[
        R.FeatureUpdateKey(feature="group.version", max_version_level=0, upgrade_type=2)])
    assert resp.error_code == 0 and len(c.log.values) == start  # nothing written
    # a registered broker that does not support the level is named, as Kafka's controller does
    resp = c.call(ApiKey.UPDATE_FEATURES, 2, timeout_ms=1000, feature_updates=[
        R.FeatureUpdateKey(feature="metadata.version", max_version_level=21, upgrade_type=1)])
    assert resp.error_code == 0
    rtype, version, rec = c.records(start)[-1]
    assert (rtype, version, rec.name, rec.feature_level) == (12, 0, "metadata.version", 21)
    resp = c.call(ApiKey.UPDATE_FEATURES, 2, timeout_ms=1000, feature_updates=[
        R.FeatureUpdateKey(feature="group.version", max_version_level=0, upgrade_type=2)])
    assert resp.error_code == 0 and c.image.features.get("group.version") is None
    resp = c.call(ApiKey.UPDATE_FEATURES, 2, timeout_ms=1000, feature_updates=[
        R.FeatureUpdateKey(feature="group.version", max_version_level=1, upgrade_type=1)])
    # broker 1 registered supporting metadata.version only: group.version 1 is beyond it
    assert (resp.error_code, resp.error_message) == (
        ErrorCode.INVALID_UPDATE_VERSION, "The update failed for all features since the following feature had "
        "an error: Invalid update version 1 for feature group.version. Broker 1 does not support this feature.")


def test_update_features_waits_for_every_voter_to_register() -> None:
    c = Cluster(voters=(1, 2, 3))
    c.commit()
    R = request_codec(ApiKey.UPDATE_FEATURES).cls
    resp = c.call(ApiKey.UPDATE_FEATURES, 2, timeout_ms=1000, validate_only=True, feature_updates=[
        R.FeatureUpdateKey(feature="group.version", max_version_level=1, upgrade_type=1)])
    assert resp.error_message.endswith("controller 2 has not registered, and may not support this feature")


def register_controller(c: Cluster, controller_id: int) -> Any:
    R = request_codec(ApiKey.CONTROLLER_REGISTRATION).cls
    return c.call(ApiKey.CONTROLLER_REGISTRATION, 0, controller_id=controller_id,
                  incarnation_id=Uuid(bytes([controller_id]) * 16), zk_migration_ready=False,
                  listeners=[R.Listener(name="CONTROLLER", host="h", port=9000 + controller_id, security_protocol=0)],
                  features=[R.Feature(name="metadata.version", min_supported_version=21, max_supported_version=21)])


def test_controller_registration_and_unregistration() -> None:
    c = Cluster(metadata_version=33)  # 4.4-IV2: controllers can be unregistered
    c.commit()
    assert register_controller(c, 2).error_code == 0
    rtype, _, rec = c.records()[-1]
    assert (rtype, rec.controller_id, [(e.name, e.port) for e in rec.end_points]) == (27, 2, [("CONTROLLER", 9002)])
    assert c.image.controllers[2].features == {"metadata.version": (21, 21)}
    resp = c.call(ApiKey.UNREGISTER_CONTROLLER, 0, controller_id=9)
    assert (resp.error_code, resp.error_message) == (ErrorCode.CONTROLLER_ID_NOT_REGISTERED,
                                                     "Controller ID 9 is not currently registered.")
    # the active controller (1) may not unregister itself, as Apache Kafka 4.4.0 answers
    resp = c.call(ApiKey.UNREGISTER_CONTROLLER, 0, controller_id=1)
    assert (resp.error_code, resp.error_message) == (ErrorCode.INVALID_REQUEST,
                                                     "Controller cannot unregister itself while it is active.")
    assert c.call(ApiKey.UNREGISTER_CONTROLLER, 0, controller_id=2).error_code == 0
    rtype, version, rec = c.records()[-1]
    assert (rtype, version, rec.controller_id) == (29, 0, 2)
    assert 2 not in c.image.controllers and 2 not in c.ctrls[1].committed.controllers


def test_controller_unregistration_needs_metadata_version_4_4_iv2() -> None:
    c = Cluster()  # kproto's 3.9-IV0
    c.commit()
    assert register_controller(c, 2).error_code == 0
    resp = c.call(ApiKey.UNREGISTER_CONTROLLER, 0, controller_id=2)
    assert (resp.error_code, resp.error_message) == (
        ErrorCode.UNSUPPORTED_VERSION, "The current MetadataVersion is too old to support controller unregistration.")
    assert 2 in c.image.controllers
