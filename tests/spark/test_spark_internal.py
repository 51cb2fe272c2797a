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
    seen_topics, commits = set(), 0
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
    assert {t for t, _, _ in got} <= set(INTERNAL)


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
