"""Apache Kafka reads what kproto's single broker, a one-node combined KRaft node, wrote:
``kafka-dump-log --cluster-metadata-decoder`` decodes its ``__cluster_metadata-0``, and Apache
Kafka 4.4.0 started as a combined node on its directory (stopped cleanly by SIGTERM), without
formatting it, recovers the topics, their ids and configs, the cluster-wide dynamic config,
the group's committed offsets and serves every acknowledged record."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import kproto
from kproto.schemas.api_keys import ApiKey
from kproto.testing import apache
from kproto.testing.apache import DEFAULT_VERSION

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType  # noqa: E402

TOPICS = {"orders": 3, "audit": 1}
GROUP = "billing"
DYNAMIC_TOPIC, DYNAMIC_DEFAULT_BROKER = 1, 3  # DescribeConfigs' sources


def _kproto_broker(data) -> tuple[dict[tuple[str, int, int], bytes], dict[str, str]]:
    """Run ``kproto broker`` on ``data``: topics (one with a config), a cluster-wide dynamic
    config, records, a group's offsets; stop it with SIGTERM. The acknowledged records and the
    topic ids."""
    proc = subprocess.Popen([sys.executable, "-m", "kproto", "broker", "--data", str(data)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked: dict[tuple[str, int, int], bytes] = {}
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("listening on 127.0.0.1:"), line
        bootstrap = line.split()[-1]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        new = [NewTopic(t, p, 1, config={"retention.ms": "123456789"} if t == "orders" else {})
               for t, p in TOPICS.items()]
        for f in admin.create_topics(new).values():
            f.result(30)
        # the cluster-wide default (resource name ""), which confluent-kafka cannot name
        req = kproto.request(ApiKey.INCREMENTAL_ALTER_CONFIGS).cls
        host, port = bootstrap.rsplit(":", 1)
        resp = apache._request(host, int(port), req(resources=[req.AlterConfigsResource(
            resource_type=4, resource_name="", configs=[req.AlterableConfig(
                name="log.retention.bytes", config_operation=0, value="987654321")])]), 1)
        assert [r.error_code for r in resp.responses] == [0]
        # confluent-kafka prints ids in standard base64, Kafka (and kproto) in the URL-safe form
        ids = {t: str(d.topic_id).replace("+", "-").replace("/", "_") for t, d in admin.describe_topics(
            ck.TopicCollection(list(TOPICS))).items() for d in [d.result(30)]}

        def ack(err, msg):
            assert err is None, err
            acked[(msg.topic(), msg.partition(), msg.offset())] = msg.value()

        producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(40):
            producer.produce("orders" if i % 4 else "audit", b"v%d" % i, key=b"k%d" % i, on_delivery=ack)
        assert producer.flush(30) == 0 and len(acked) == 40
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
        consumer.commit(offsets=[TopicPartition("orders", p, 1 + p) for p in range(3)], asynchronous=False)
        consumer.close()
        del admin, producer
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    return acked, ids


def _dump(segment) -> list[dict]:
    out = apache.run_tool(DEFAULT_VERSION, "org.apache.kafka.tools.DumpLogSegments",
                          "--cluster-metadata-decoder", "--files", str(segment), timeout=180).stdout
    return [json.loads(ln.split(" payload: ", 1)[1]) for ln in out.splitlines() if " payload: " in ln]


def test_apache_kafka_reads_and_recovers_the_single_brokers_directory(tmp_path) -> None:
    reason = apache.unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Apache Kafka is needed under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    data = tmp_path / "kproto"
    acked, ids = _kproto_broker(data)
    assert not [f for f in os.listdir(data) if f.startswith("kproto-")]

    # Kafka's dump tool decodes every record of the metadata log
    payloads = _dump(data / "__cluster_metadata-0" / "00000000000000000000.log")
    kinds = [p["type"] for p in payloads]
    assert kinds[:3] == ["FEATURE_LEVEL_RECORD"] * 3 and "CONFIG_RECORD" in kinds
    topics = {p["data"]["name"]: p["data"]["topicId"] for p in payloads if p["type"] == "TOPIC_RECORD"}
    assert {t: topics[t] for t in TOPICS} == ids
    parts = [p["data"] for p in payloads if p["type"] == "PARTITION_RECORD" and p["data"]["topicId"] == ids["orders"]]
    assert sorted(p["partitionId"] for p in parts) == [0, 1, 2]
    assert all((p["replicas"], p["isr"], p["leader"]) == ([1], [1], 1) for p in parts)
    configs = {(p["data"]["resourceName"], p["data"]["name"]): p["data"]["value"]
               for p in payloads if p["type"] == "CONFIG_RECORD"}
    assert configs[("orders", "retention.ms")] == "123456789"
    assert configs[("", "log.retention.bytes")] == "987654321"

    # kproto's quorum is static (KRaft version 0): Kafka finds it in controller.quorum.voters
    with apache.ApacheKafka(tmp_path / "apache", brokers=1, log_dirs={1: data}, static_voters=True) as kafka:
        assert (kafka.log_dir(1) / "meta.properties").read_text().count("node.id=1\n") == 1
        kafka.wait_for(lambda: all(kafka._all_leaders(t, p, 1) for t, p in TOPICS.items()), 60,
                       "leaders of every partition")
        md = {t.name: t for t in kafka.metadata(list(TOPICS)).topics}
        assert {t: str(md[t].topic_id) for t in TOPICS} == ids
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "orders"),
                                            ConfigResource(ResourceType.BROKER, "1")])
        got = {r.name: c for r, f in described.items() for c in [f.result(30)]}
        retention = got["orders"]["retention.ms"]
        assert (retention.value, int(retention.source)) == ("123456789", DYNAMIC_TOPIC)
        assert got["orders"]["retention.bytes"].value == "987654321"
        broker_default = got["1"]["log.retention.bytes"]
        assert (broker_default.value, int(broker_default.source)) == ("987654321", DYNAMIC_DEFAULT_BROKER)
        consumer = ck.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": GROUP,
                                "enable.auto.commit": False})
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    committed = consumer.committed([TopicPartition("orders", p) for p in range(3)], timeout=10)
                    break
                except ck.KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            assert [(c.partition, c.offset) for c in committed] == [(p, 1 + p) for p in range(3)]
            consumer.assign([TopicPartition(t, p, 0) for t, n in TOPICS.items() for p in range(n)])
            got_records: dict[tuple[str, int, int], bytes] = {}
            deadline = time.monotonic() + 60
            while len(got_records) < len(acked) and time.monotonic() < deadline:
                for m in consumer.consume(100, 0.5):
                    assert m.error() is None, m.error()
                    got_records[(m.topic(), m.partition(), m.offset())] = m.value()
        finally:
            consumer.close()
        assert got_records == acked
