"""``kafka-segments`` with ``.option("decode", "internal")``: the internal topics of a log
directory as one typed row per record. Checked against the fixtures' ``.log.decoded.jsonl``
(Kafka's own decoding of the same segments), against a plain read of the same records, and
against the offsets a kafka-python client committed to kproto's broker."""
from __future__ import annotations

import json
import os
import re

import pytest

from kproto.spark import internal_spark_schema, parse_options
from kproto.testing import TEST_DEFAULTS, BrokerThread

from spark_expected import LOGDIRS

import storage_fixtures as sf  # on sys.path through spark_expected

INTERNAL = ("__consumer_offsets", "__transaction_state", "__cluster_metadata")


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def test_fixture_internal_topics_equal_kafkas_decoding(spark):
    decoded = [rel for rel in sf.expected_files("*/*/*.log.decoded.jsonl")]
    brokers = sorted({rel.split("/")[0] for rel in decoded})
    paths = [os.path.join(LOGDIRS, b) for b in brokers]
    df = spark.read.format("kafka-segments").option("decode", "internal").load(paths)
    assert df.schema == internal_spark_schema()
    rows = df.toArrow().to_pylist()
    got = {(r["topic"], r["partition"], r["offset"]): r for r in rows}
    assert len(got) == len(rows)
    # only internal topics, and the same records (place and time) as a plain read
    plain = spark.read.format("kafka-segments").load(paths).where(
        "topic like '\\_\\_%'").select("topic", "partition", "offset", "timestamp").toArrow()
    assert sorted((r["topic"], r["partition"], r["offset"], r["timestamp"]) for r in rows) == \
        sorted(tuple(r.values()) for r in plain.to_pylist())
    seen_topics, commits, metadata_types = set(), 0, set()
    for rel in decoded:
        folder = rel.split("/")[1]
        topic, partition = folder.rsplit("-", 1)
        want = [w for w in sf.load_expected(rel) if not w["is_control"]]
        mine = sorted((r for r in rows if (r["topic"], r["partition"]) == (topic, int(partition))),
                      key=lambda r: r["offset"])
        assert [r["offset"] for r in mine] == [w["offset"] for w in want], rel
        for r, w in zip(mine, want):
            assert r["decode_error"] is None and not r["is_control"]
            if topic == "__cluster_metadata":
                assert _upper_snake(r["record_type"]) == w["type"]
                assert (r["key"], r["key_version"], r["value_version"]) == (None, None, w["version"])
                assert json.loads(r["value"]) == w["data"]
                assert _metadata_facts(r) == _expected_metadata_facts(r["record_type"], w["data"])
                metadata_types.add(r["record_type"])
                continue
            key, value = w["key"], w["value"]
            assert r["record_type"] + "Key" == key["type"]
            assert (r["key_version"], json.loads(r["key"])) == (key["version"], key["data"])
            if value is None:
                assert (r["value"], r["value_version"]) == (None, None)
            else:
                assert (r["value_version"], json.loads(r["value"])) == \
                    (value["version"], value["data"])
            kd, vd = key["data"], (value or {}).get("data", {})
            if r["record_type"] == "OffsetCommit":
                commits += 1
                ts = r["commit_timestamp"]  # a tombstone has no value facts
                assert (r["group_id"], r["committed_topic"], r["committed_partition"],
                        r["committed_offset"], r["committed_leader_epoch"], r["commit_metadata"],
                        None if ts is None else round(ts.timestamp() * 1000)) == \
                    (kd["group"], kd["topic"], kd["partition"], vd.get("offset"),
                     vd.get("leaderEpoch"), vd.get("metadata"), vd.get("commitTimestamp"))
            elif r["record_type"] == "TransactionLog":
                assert (r["transactional_id"], r["producer_id"], r["producer_epoch"],
                        r["transaction_status"]) == (kd["transactionalId"], vd.get("producerId"),
                                                     vd.get("producerEpoch"),
                                                     vd.get("transactionStatus"))
            elif r["record_type"] == "GroupMetadata":
                assert r["group_id"] == kd["group"]
        seen_topics.add(topic)
    assert seen_topics == set(INTERNAL) and commits > 100
    assert {"RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "TopicRecord", "PartitionRecord",
            "PartitionChangeRecord", "ConfigRecord"} <= metadata_types
    assert {t for t, _, _ in got} <= set(INTERNAL)


METADATA_COLUMNS = ("broker_id", "broker_epoch", "fenced", "rack", "topic_id", "topic_name",
                    "partition_id", "leader", "leader_epoch", "partition_epoch", "replicas", "isr",
                    "config_resource_type", "config_resource_name", "config_name", "config_value")


def _metadata_facts(row: dict) -> dict:
    return {c: row[c] for c in METADATA_COLUMNS if row[c] is not None}


def _expected_metadata_facts(record_type: str, d: dict) -> dict:
    """What each record type says, written out from Kafka's metadata record specs."""
    if record_type == "RegisterBrokerRecord":
        out = {"broker_id": d["brokerId"], "broker_epoch": d["brokerEpoch"], "fenced": d["fenced"],
               "rack": d.get("rack")}
    elif record_type == "BrokerRegistrationChangeRecord":
        out = {"broker_id": d["brokerId"], "broker_epoch": d["brokerEpoch"],
               "fenced": {1: True, -1: False}.get(d.get("fenced", 0))}
    elif record_type in ("ProducerIdsRecord", "UnregisterBrokerRecord"):
        out = {"broker_id": d["brokerId"], "broker_epoch": d["brokerEpoch"]}
    elif record_type == "TopicRecord":
        out = {"topic_name": d["name"], "topic_id": d["topicId"]}
    elif record_type == "PartitionRecord":
        out = {"topic_id": d["topicId"], "partition_id": d["partitionId"], "leader": d["leader"],
               "leader_epoch": d["leaderEpoch"], "partition_epoch": d["partitionEpoch"],
               "replicas": d["replicas"], "isr": d["isr"]}
    elif record_type == "PartitionChangeRecord":
        out = {"topic_id": d["topicId"], "partition_id": d["partitionId"], "replicas": d.get("replicas"),
               "isr": d.get("isr"), "leader": None if d.get("leader", -2) == -2 else d["leader"]}
    elif record_type == "ConfigRecord":
        out = {"config_resource_type": d["resourceType"], "config_resource_name": d["resourceName"],
               "config_name": d["name"], "config_value": d.get("value")}
    else:
        out = {}
    return {k: v for k, v in out.items() if v is not None}


def _metadata_log(log_dir) -> None:
    """A ``__cluster_metadata-0`` with a topic's life: created, ISR shrinks, leaders move (to
    none, to the same broker again), replicas reassigned, deleted and created again."""
    import kproto
    from kproto.codecs import Uuid
    from kproto.records import RecordBatchBuilder
    from kproto.storage import PartitionWriter
    from kproto.storage.metadata_image import encode_metadata_record

    def rec(record_type, **fields):
        return encode_metadata_record(kproto.message(record_type).cls(**fields), 0)

    a, b = Uuid(bytes(range(16))), Uuid(bytes(range(1, 17)))
    part = "PartitionRecord"
    change = "PartitionChangeRecord"
    values = [
        rec("TopicRecord", name="orders", topic_id=a),
        rec(part, partition_id=0, topic_id=a, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1, leader_epoch=0),
        rec(part, partition_id=1, topic_id=a, replicas=[2, 3, 1], isr=[2, 3, 1], leader=2, leader_epoch=4),
        rec("ConfigRecord", resource_type=2, resource_name="orders", name="retention.ms", value="1000"),
        rec(change, partition_id=0, topic_id=a, isr=[1, 2]),
        rec(change, partition_id=0, topic_id=a, isr=[2], leader=2),
        rec(change, partition_id=1, topic_id=a, isr=[], leader=-1),
        rec(change, partition_id=0, topic_id=a, replicas=[2, 3, 4], isr=[2, 3]),
        rec(change, partition_id=1, topic_id=a, isr=[3], leader=3),
        rec(change, partition_id=0, topic_id=a, leader=2),
        rec("RemoveTopicRecord", topic_id=a),
        rec("TopicRecord", name="orders", topic_id=b),
        rec(part, partition_id=0, topic_id=b, replicas=[3], isr=[3], leader=3, leader_epoch=0),
        rec(change, partition_id=0, topic_id=b, leader=-1, isr=[]),
    ]
    writer = PartitionWriter(str(log_dir), "__cluster_metadata", 0)
    for offset, value in enumerate(values):
        batch = RecordBatchBuilder(base_offset=offset)
        batch.append(1_700_000_000_000 + offset * 1000, None, value)
        writer.append(batch.build())
    writer.close()


def test_partition_history_replays_as_kafkas_metadata_image(spark, tmp_path):
    import pyarrow as pa

    from kproto.spark import partition_history
    from kproto.storage import read_arrow
    from kproto.storage.metadata_image import MetadataImage

    path = str(tmp_path)
    _metadata_log(tmp_path)
    rows = partition_history(spark, path).orderBy("offset").toArrow().to_pylist()
    # the reference: kproto's replay of the same log, record by record (Kafka's merge rules)
    image, expected = MetadataImage(), {}
    log = read_arrow(path, topics=["__cluster_metadata"])
    for rec in pa.Table.from_batches(log.to_batches()).to_pylist():
        if rec["is_control"]:
            continue
        image.replay_value(rec["value"], rec["offset"])
        expected[rec["offset"]] = {(str(p.topic_id), p.partition): p for p in image.all_partitions()}
    assert [r["offset"] for r in rows] == [1, 2, 4, 5, 6, 7, 8, 9, 12, 13]
    for r in rows:
        p = expected[r["offset"]][(r["topic_id"], r["partition"])]
        assert (r["topic"], r["leader"], r["leader_epoch"], r["replicas"], r["isr"]) == \
            (p.topic, p.leader, p.leader_epoch, list(p.replicas), list(p.isr)), r
        assert r["time"].timestamp() == 1_700_000_000 + r["offset"]
    # leader epochs written out: a leader field bumps it, even to no leader or the same leader
    assert [(r["partition"], r["leader"], r["leader_epoch"]) for r in rows] == [
        (0, 1, 0), (1, 2, 4), (0, 1, 0), (0, 2, 1), (1, -1, 5), (0, 2, 1), (1, 3, 6), (0, 2, 2),
        (0, 3, 0), (0, -1, 1)]


def test_consumer_lag_over_time(spark, tmp_path):
    kafka = pytest.importorskip("kafka")
    import time

    from kafka.structs import OffsetAndMetadata, TopicPartition

    from kproto.spark import consumer_lag

    with BrokerThread(tmp_path / "kafka", **TEST_DEFAULTS) as broker:
        admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([kafka.admin.NewTopic("lag-t", 2, 1)])
        admin.close()
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
        consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="lag-g",
                                       enable_auto_commit=False)

        def produce(n: int, partition: int) -> None:
            for i in range(n):
                producer.send("lag-t", b"v%d" % i, partition=partition)
            producer.flush()
            time.sleep(0.05)   # the next step's timestamps come later

        def commit(partition: int, offset: int) -> None:
            consumer.commit({TopicPartition("lag-t", partition): OffsetAndMetadata(offset, "", -1)})
            time.sleep(0.05)

        commit(0, 0)            # nothing written yet: lag 0
        produce(10, 0)
        commit(0, 3)            # 10 written, 3 consumed
        produce(5, 0)
        produce(4, 1)
        commit(0, 12)           # 15 written, 12 consumed
        commit(1, 4)            # all 4 consumed
        produce(6, 0)
        commit(0, 21)
        producer.close()
        consumer.close(autocommit=False)
        data = str(broker.data_dir)
    rows = consumer_lag(spark, data).where("group_id = 'lag-g'").orderBy("commit_time").toArrow().to_pylist()
    assert [(r["topic"], r["partition"], r["committed_offset"], r["log_end_offset"], r["lag"])
            for r in rows] == [("lag-t", 0, 0, 0, 0), ("lag-t", 0, 3, 10, 7), ("lag-t", 0, 12, 15, 3),
                               ("lag-t", 1, 4, 4, 0), ("lag-t", 0, 21, 21, 0)]
    assert all(r["commit_time"] is not None for r in rows)


def test_decode_option_selects_internal_topics_only():
    spec = parse_options({"path": "x", "decode": "internal"})
    assert spec.topics == frozenset(INTERNAL) | {"__share_group_state"}
    spec = parse_options({"path": "x", "decode": "internal", "topics": "orders,__consumer_offsets"})
    assert spec.topics == {"__consumer_offsets"}
    assert parse_options({"path": "x", "decode": "internal", "topics": "orders"}).empty
    with pytest.raises(ValueError, match="decode"):
        parse_options({"path": "x", "decode": "json"})


def test_offsets_committed_to_kprotos_broker(spark, tmp_path):
    kafka = pytest.importorskip("kafka")
    from kafka.structs import OffsetAndMetadata, TopicPartition

    commits = [(0, 3, "first"), (1, 5, "second"), (0, 4, "third")]
    with BrokerThread(tmp_path / "kafka", **TEST_DEFAULTS) as broker:
        admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        admin.create_topics([kafka.admin.NewTopic("int-t", 2, 1)])
        admin.close()
        consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="int-g",
                                       enable_auto_commit=False)
        consumer.assign([TopicPartition("int-t", 0), TopicPartition("int-t", 1)])
        for partition, offset, meta in commits:
            consumer.commit({TopicPartition("int-t", partition):
                             OffsetAndMetadata(offset, meta, -1)})
        consumer.close(autocommit=False)
        data = broker.data_dir
    df = spark.read.format("kafka-segments").option("decode", "internal").load(str(data)) \
        .where("record_type = 'OffsetCommit' and group_id = 'int-g'").orderBy("offset")
    rows = df.toArrow().to_pylist()
    assert [(r["committed_topic"], r["committed_partition"], r["committed_offset"],
             r["commit_metadata"]) for r in rows] == [("int-t", p, o, m) for p, o, m in commits]
    for r in rows:
        assert r["topic"] == "__consumer_offsets" and r["commit_timestamp"] is not None
        assert json.loads(r["key"]) == {"group": "int-g", "topic": "int-t",
                                        "partition": r["committed_partition"]}
