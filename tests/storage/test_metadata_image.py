"""The metadata image: record framing byte for byte against Kafka's log, replay of a real
``__cluster_metadata`` log, and the changes brokers act on."""
from __future__ import annotations

import json
import os
from typing import Any

import pytest

from kproto.storage.metadata_image import (MetadataImage, PartitionInfo, decode_metadata_record,
                                    encode_metadata_record)
from kproto.codecs import metadata_record
from kproto.codecs.primitives import Uuid
from kproto.errors import DecodeError

LOGDIR = "/work/shared/fixtures/logdirs/broker1-clean"
DECODED = ("/work/shared/fixtures/expected/broker1-clean/__cluster_metadata-0/"
           "00000000000000000000.log.decoded.jsonl")
needs_fixtures = pytest.mark.skipif(not (os.path.isdir(LOGDIR) and os.path.exists(DECODED)),
                                    reason="fixtures not available")


def fixture_records() -> list[tuple[int, bool, bytes]]:
    """(offset, is_control, value) of the fixture's __cluster_metadata-0, read with kproto.storage."""
    import kproto.storage as ks

    out = []
    for rb in ks.iter_arrow(LOGDIR, topics=["__cluster_metadata"]):
        cols = {c: rb.column(c).to_pylist() for c in ("offset", "is_control", "value")}
        out += zip(cols["offset"], cols["is_control"], cols["value"])
    return out


def kafka_lines() -> list[dict]:
    with open(DECODED) as f:
        return [json.loads(line) for line in f]


@needs_fixtures
def test_framing_is_byte_exact_with_kafkas_log() -> None:
    expected = {x["offset"]: x for x in kafka_lines()}
    records = [r for r in fixture_records() if not r[1]]
    assert len(records) == sum(1 for x in expected.values() if not x["is_control"])
    for offset, _, value in records:
        rtype, version, obj = decode_metadata_record(value)
        want = expected[offset]
        assert (rtype, version) == (want["api_key"], want["version"])
        assert metadata_record(rtype).to_json(obj, version) == want["data"]
        assert encode_metadata_record(obj, version) == bytes(value)


@needs_fixtures
def test_replay_of_kafkas_log_matches_its_content() -> None:
    img = MetadataImage()
    for offset, control, value in fixture_records():
        if not control:
            img.replay_value(value, offset)
    lines = [x for x in kafka_lines() if not x["is_control"]]
    assert img.offset == max(x["offset"] for x in lines)
    # what Kafka's own decoding of the same log says, folded independently here
    topics = {x["data"]["name"]: x["data"]["topicId"] for x in lines if x["type"] == "TOPIC_RECORD"}
    assert {n: str(t.topic_id) for n, t in img.topics.items()} == topics
    assert set(img.topics_by_id) == {Uuid(t) for t in topics.values()}
    names = {v: k for k, v in topics.items()}
    parts = {(names[d["topicId"]], d["partitionId"]): d
             for d in (x["data"] for x in lines if x["type"] == "PARTITION_RECORD")}
    assert {(p.topic, p.partition) for p in img.all_partitions()} == set(parts)
    for (topic, index), d in parts.items():
        p = img.partition(topic, index)
        assert (list(p.replicas), list(p.isr), p.leader, p.leader_epoch, p.partition_epoch) == \
            (d["replicas"], d["isr"], d["leader"], d["leaderEpoch"], d["partitionEpoch"])
        assert [str(u) for u in p.directories] == d["directories"]
    regs = {d["brokerId"]: d for d in (x["data"] for x in lines if x["type"] == "REGISTER_BROKER_RECORD")}
    fenced = {b: d["fenced"] for b, d in regs.items()}
    for x in lines:
        if x["type"] == "BROKER_REGISTRATION_CHANGE_RECORD" and x["data"].get("fenced", 0):
            fenced[x["data"]["brokerId"]] = x["data"]["fenced"] == 1
    assert set(img.brokers) == set(regs)
    for b, d in regs.items():
        info = img.brokers[b]
        assert (info.epoch, str(info.incarnation_id), info.rack, info.fenced) == \
            (d["brokerEpoch"], d["incarnationId"], d["rack"], fenced[b])
        assert [(e.name, e.host, e.port, e.security_protocol) for e in info.listeners] == \
            [(e["name"], e["host"], e["port"], e["securityProtocol"]) for e in d["endPoints"]]
        assert [str(u) for u in info.log_dirs] == d["logDirs"]
    configs: dict[tuple[int, str], dict[str, str]] = {}
    for d in (x["data"] for x in lines if x["type"] == "CONFIG_RECORD"):
        entries = configs.setdefault((d["resourceType"], d["resourceName"]), {})
        if d["value"] is None:
            entries.pop(d["name"], None)
        else:
            entries[d["name"]] = d["value"]
    assert img.configs == {k: v for k, v in configs.items() if v}
    levels = {x["data"]["name"]: x["data"]["featureLevel"] for x in lines if x["type"] == "FEATURE_LEVEL_RECORD"}
    assert img.features == levels
    pids = [x["data"] for x in lines if x["type"] == "PRODUCER_IDS_RECORD"]
    assert img.next_producer_id == pids[-1]["nextProducerId"]
    # the changes since the image was made: everything is new
    ch = img.take_changes()
    assert sorted(ch.topics_created) == sorted(topics) and not ch.topics_deleted
    assert sorted((c.topic, c.partition) for c, prev in ch.partitions if prev is None) == sorted(parts)
    assert sorted(ch.brokers) == sorted(regs)
    assert not img.take_changes()


# ---------------------------------------------------------------------------- replay semantics
def rec(rtype: int, **fields: Any) -> Any:
    return metadata_record(rtype)(**fields)


TID = Uuid(b"\7" * 16)


def image_with_topic() -> MetadataImage:
    img = MetadataImage()
    img.replay(0, 3, rec(0, broker_id=1, incarnation_id=Uuid(b"\1" * 16), broker_epoch=0,
                         end_points=[], features=[], rack=None, fenced=True), 0)
    img.replay(2, 0, rec(2, name="t", topic_id=TID), 1)
    for i in range(2):
        img.replay(3, 2, rec(3, partition_id=i, topic_id=TID, replicas=[1, 2], isr=[1, 2], removing_replicas=[],
                             adding_replicas=[], leader=1, leader_epoch=0, partition_epoch=0,
                             directories=[Uuid.ZERO, Uuid.ZERO]), 2 + i)
    return img


def test_partition_change_merge_epochs() -> None:
    img = image_with_topic()
    img.take_changes()
    img.replay(5, 2, rec(5, partition_id=0, topic_id=TID, isr=[1]), 4)
    p = img.partition("t", 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch) == ((1,), 1, 0, 1)
    # a leader field bumps the leader epoch even naming the same leader (Kafka's merge)
    img.replay(5, 2, rec(5, partition_id=0, topic_id=TID, leader=1), 5)
    p = img.partition("t", 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 1, 2)
    img.replay(5, 2, rec(5, partition_id=0, topic_id=TID, leader=2, isr=[2], leader_recovery_state=1), 6)
    p = img.partition("t", 0)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch, p.leader_recovery_state) == (2, (2,), 2, 3, 1)
    img.replay(5, 2, rec(5, partition_id=0, topic_id=TID, replicas=[2, 3], removing_replicas=[],
                         adding_replicas=[3]), 7)
    p = img.partition("t", 0)
    assert (p.replicas, p.adding_replicas, p.leader_recovery_state) == ((2, 3), (3,), 1)
    ch = img.take_changes()
    (now, before), = ch.partitions
    assert before.partition_epoch == 0 and before.isr == (1, 2) and now is p
    assert img.offset == 7


def test_take_changes_reports_creations_and_deletions() -> None:
    img = image_with_topic()
    ch = img.take_changes()
    assert ch.topics_created == ["t"] and len(ch.partitions) == 2 and list(ch.brokers) == [1]
    img.replay(4, 0, rec(4, resource_type=2, resource_name="t", name="retention.ms", value="1"), 4)
    img.replay(17, 2, rec(17, broker_id=1, broker_epoch=0, fenced=-1), 5)
    ch = img.take_changes()
    assert ch.configs == [(2, "t")] and not ch.brokers[1].fenced and ch.partitions == []
    old = img.partition("t", 1)
    img.replay(9, 0, rec(9, topic_id=TID), 6)
    ch = img.take_changes()
    assert ch.topics_deleted == ["t"] and ch.topics_created == []
    assert sorted((prev.partition, now) for now, prev in ch.partitions) == [(0, None), (1, None)]
    assert old in [prev for _, prev in ch.partitions]
    assert "t" not in img.topics and TID not in img.topics_by_id and (2, "t") not in img.configs
    # created and removed between two calls: nothing to report
    img.replay(2, 0, rec(2, name="u", topic_id=Uuid(b"\5" * 16)), 7)
    img.replay(9, 0, rec(9, topic_id=Uuid(b"\5" * 16)), 8)
    assert not img.take_changes()


def test_broker_records_old_and_new_forms() -> None:
    img = image_with_topic()
    img.replay(8, 0, rec(8, id=1, epoch=0), 4)                                  # UnfenceBrokerRecord
    assert not img.brokers[1].fenced
    img.replay(7, 0, rec(7, id=1, epoch=0), 5)                                  # FenceBrokerRecord
    assert img.brokers[1].fenced
    img.replay(17, 2, rec(17, broker_id=1, broker_epoch=99, fenced=-1), 6)      # another epoch: stale
    assert img.brokers[1].fenced
    img.replay(17, 1, rec(17, broker_id=1, broker_epoch=0, fenced=-1, in_controlled_shutdown=1), 7)
    assert not img.brokers[1].fenced and img.brokers[1].in_controlled_shutdown
    img.replay(1, 0, rec(1, broker_id=1, broker_epoch=0), 8)
    assert img.brokers == {} and img.take_changes().brokers == {1: None}


def test_unneeded_records_are_skipped() -> None:
    img = image_with_topic()
    for i, (t, r) in enumerate([(20, rec(20)), (27, rec(27, controller_id=3)),
                                (18, rec(18)), (14, rec(14))]):
        img.replay_value(encode_metadata_record(r, 0), 10 + i)
    assert img.offset == 13 and set(img.topics) == {"t"}
    # a change for a partition nobody knows (Kafka's fixture has some) is ignored
    img.replay(5, 2, rec(5, partition_id=0, topic_id=Uuid.ZERO, isr=[1]), 14)
    assert img.partition("t", 0).isr == (1, 2)
    # a record type the schemas do not know yet (a newer Kafka's) passes; a broken one does not
    img.replay_value(b"\x01\x7e\x00\x00", 15)
    assert img.offset == 15
    with pytest.raises(DecodeError):
        img.replay_value(b"\x02\x02\x00", 16)
    with pytest.raises(DecodeError):
        decode_metadata_record(b"\x01\x7f\x00")


def test_copy_is_independent() -> None:
    img = image_with_topic()
    img.replay(4, 0, rec(4, resource_type=2, resource_name="t", name="retention.ms", value="1"), 4)
    twin = img.copy()
    twin.replay(5, 2, rec(5, partition_id=0, topic_id=TID, leader=2), 5)
    twin.replay(4, 0, rec(4, resource_type=2, resource_name="t", name="retention.ms", value="2"), 6)
    twin.replay(17, 2, rec(17, broker_id=1, broker_epoch=0, fenced=-1), 7)
    assert img.partition("t", 0).leader == 1 and twin.partition("t", 0).leader == 2
    assert img.configs[(2, "t")]["retention.ms"] == "1" and img.brokers[1].fenced
    assert twin.topics_by_id[TID] is twin.topics["t"]
    assert isinstance(twin.partition("t", 0), PartitionInfo)
