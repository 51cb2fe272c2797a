"""Apache Kafka 4.4.0 takes over a kproto cluster's directories: ``kproto cluster`` (3 brokers and
a controller) acknowledges records with acks=all on several topics and partitions and a group's
committed offsets, stops cleanly on SIGTERM; Apache Kafka then starts on the same log dirs with the
same node ids, without formatting them, recovers kproto's ``__cluster_metadata`` (topics, their
ids, partitions and replicas) and serves every acknowledged record and the committed offsets."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kproto.testing import apache

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPICS = {"orders": (3, 3), "audit": (2, 2)}   # name: (partitions, replication factor)
GROUP = "billing"


def _kproto_cluster(data) -> dict[tuple[str, int, int], bytes]:
    """Run ``kproto cluster`` on ``data``, produce, commit GROUP's offsets, stop it with SIGTERM;
    the acknowledged records by (topic, partition, offset)."""
    proc = subprocess.Popen([sys.executable, "-m", "kproto", "cluster", "--brokers", "3", "--data", str(data),
                             "--session-timeout-ms", "3000", "--heartbeat-interval-ms", "500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked: dict[tuple[str, int, int], bytes] = {}
    try:
        lines = [proc.stdout.readline().strip() for _ in range(3)]
        assert all(line.startswith("listening on 127.0.0.1:") for line in lines), lines
        bootstrap = ",".join(line.split()[-1] for line in lines)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for name, f in admin.create_topics([NewTopic(t, p, r) for t, (p, r) in TOPICS.items()]).items():
            f.result(30)

        def ack(err, msg):
            assert err is None, err
            acked[(msg.topic(), msg.partition(), msg.offset())] = msg.value()

        producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(60):
            topic = "orders" if i % 3 else "audit"
            producer.produce(topic, b"v%d" % i, key=b"k%d" % i, on_delivery=ack)
        assert producer.flush(30) == 0
        assert len(acked) == 60
        consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
        consumer.commit(offsets=[TopicPartition("orders", p, 1 + p) for p in range(3)], asynchronous=False)
        consumer.close()
        del admin, producer
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    return acked


def _committed(consumer, partitions, timeout: float = 60.0):
    """The group's committed offsets, asked again while its coordinator moves or loads (the
    brokers' preferred leaders come back one after another as they register)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.committed(partitions, timeout=10)
        except ck.KafkaException as exc:
            retriable = exc.args[0].code() in (ck.KafkaError.NOT_COORDINATOR,
                                               ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                                               ck.KafkaError.COORDINATOR_NOT_AVAILABLE)
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_apache_kafka_recovers_a_kproto_clusters_directories(tmp_path) -> None:
    reason = apache.unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"Apache Kafka is needed under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    data = tmp_path / "cluster"
    acked = _kproto_cluster(data)
    log_dirs = {n: data / f"broker-{n}" for n in (1, 2, 3)} | {3001: data / "controller-3001"}
    # kproto's quorum is static (KRaft version 0): Kafka finds it in controller.quorum.voters
    with apache.ApacheKafka(tmp_path / "apache", brokers=3, controllers=1, log_dirs=log_dirs,
                            static_voters=True) as kafka:
        for n in log_dirs:  # started on kproto's directories, not formatted anew
            assert (kafka.log_dir(n) / "meta.properties").read_text().count("node.id=%d\n" % n) == 1
        kafka.wait_for(lambda: all(kafka._all_leaders(t, p, b) for t, (p, _) in TOPICS.items()
                                   for b in kafka.broker_ids), 60, "leaders of every partition")
        md = {t.name: t for t in kafka.metadata(list(TOPICS)).topics}
        for name, (partitions, rf) in TOPICS.items():
            assert md[name].error_code == 0
            assert sorted(p.partition_index for p in md[name].partitions) == list(range(partitions))
            assert all(len(p.replica_nodes) == rf for p in md[name].partitions)
        # kproto's brokers stopped with a controlled shutdown, fenced in the metadata: Kafka's
        # register at once (an unfenced registration would hold them off for a session timeout)
        for b in kafka.broker_ids:
            assert "DUPLICATE_BROKER_REGISTRATION" not in kafka.log_path(b).read_text(errors="replace")
        consumer = ck.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": GROUP,
                                "enable.auto.commit": False})
        try:
            committed = _committed(consumer, [TopicPartition("orders", p) for p in range(3)])
            assert [(c.partition, c.offset) for c in committed] == [(p, 1 + p) for p in range(3)]
            consumer.assign([TopicPartition(t, p, 0) for t, (n, _) in TOPICS.items() for p in range(n)])
            got: dict[tuple[str, int, int], bytes] = {}
            deadline = time.monotonic() + 60
            while len(got) < len(acked) and time.monotonic() < deadline:
                for m in consumer.consume(100, 0.5):
                    assert m.error() is None, m.error()
                    got[(m.topic(), m.partition(), m.offset())] = m.value()
        finally:
            consumer.close()
        assert got == acked
