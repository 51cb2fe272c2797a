"""Apache Kafka's single combined-mode node (the ``apache_kafka`` fixture, shared by these
tests): kproto's client and confluent-kafka produce and consume, Kafka's DumpLogSegments reads
a segment the broker wrote, a stopped node refuses connections and a paused one answers
nothing until resumed."""
from __future__ import annotations

import socket
import uuid

import pytest

import kproto
from apache_support import confluent_consume, confluent_produce, kproto_produce_consume
from kproto.testing import apache


def topic_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def api_versions_answered(kafka: apache.ApacheKafka, node: int, timeout: float) -> bool:
    try:
        resp = apache._request(*kafka.address(node), kproto.request(18).cls(), 0, timeout=timeout)
    except OSError:
        return False
    return bool(resp.error_code == 0)


def test_the_node_is_kafka_4_4_in_combined_mode(apache_kafka):
    assert apache_kafka.version == "4.4.0" and apache_kafka.broker_ids == [1]
    assert apache_kafka.properties(1)["process.roles"] == "broker,controller"
    md = apache_kafka.metadata()
    assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(1, "127.0.0.1", apache_kafka.nodes[1].port)]
    assert md.cluster_id == apache_kafka.cluster_id
    assert "Kafka version: 4.4.0" in apache_kafka.log_path(1).read_text()


def test_kproto_client_produces_and_consumes(apache_kafka):
    topic = topic_name("kp")
    metas, got = kproto_produce_consume(apache_kafka.bootstrap, topic, 50, partitions=2)
    assert sorted((r.partition, r.offset, r.key, r.value) for r in got) == \
        sorted((m.partition, m.offset, b"k%d" % i, b"v%d" % i) for i, m in enumerate(metas))
    assert {m.partition for m in metas} <= {0, 1}


def test_confluent_kafka_produces_and_consumes(apache_kafka):
    pytest.importorskip("confluent_kafka")
    topic = topic_name("ck")
    apache_kafka.create_topic(topic)
    acked = confluent_produce(apache_kafka.bootstrap, topic, 40, **{"compression.codec": "zstd"})
    assert [o for o, _, _ in acked] == list(range(40))
    assert confluent_consume(apache_kafka.bootstrap, topic, 40) == acked


def test_dump_log_segments_reads_the_segment_the_broker_wrote(apache_kafka):
    topic = topic_name("dump")
    kproto_produce_consume(apache_kafka.bootstrap, topic, 7)
    segment = apache_kafka.log_dir(1) / f"{topic}-0" / "00000000000000000000.log"
    out = apache.run_tool(apache_kafka.version, "org.apache.kafka.tools.DumpLogSegments",
                          "--files", str(segment), "--print-data-log").stdout
    assert f"Dumping {segment}" in out
    payloads = [line.split("payload: ")[1] for line in out.splitlines() if "payload: " in line]
    assert payloads == [f"v{i}" for i in range(7)]


def test_run_tool_says_what_failed():
    with pytest.raises(RuntimeError, match="DumpLogSegments .* exited"):
        apache.run_tool(apache.DEFAULT_VERSION, "org.apache.kafka.tools.DumpLogSegments",
                        "--files", "/nonexistent/00000000000000000000.log")


def test_pause_freezes_the_node_and_resume_thaws_it(apache_kafka):
    apache_kafka.pause(1)
    try:
        assert not api_versions_answered(apache_kafka, 1, timeout=1.0)
        assert apache_kafka.running(1)
    finally:
        apache_kafka.resume(1)
    apache_kafka.wait_for(lambda: api_versions_answered(apache_kafka, 1, 2.0), 30, "answers again")


def test_stop_refuses_connections_and_start_keeps_the_data(apache_kafka):
    topic = topic_name("restart")
    metas, _ = kproto_produce_consume(apache_kafka.bootstrap, topic, 5)
    apache_kafka.stop(1)
    assert not apache_kafka.running(1)
    with pytest.raises(OSError):
        socket.create_connection(apache_kafka.address(1), timeout=2).close()
    apache_kafka.start(1)
    pytest.importorskip("confluent_kafka")
    assert confluent_consume(apache_kafka.bootstrap, topic, 5) == \
        [(m.offset, b"k%d" % i, b"v%d" % i) for i, m in enumerate(metas)]
