"""The fault injection of :class:`kproto.broker.Cluster` as a client sees it (issue 17): a
client cut from a broker, a slow broker, a slow link between a leader and its follower."""
from __future__ import annotations

import time

import pytest

from kproto.testing import ClusterThread

ck = pytest.importorskip("confluent_kafka")


def deliveries(producer, topic: str, values: list[bytes], partition: int) -> list:
    """Send and collect each delivery's (error, seconds since its send)."""
    out: list = []
    for v in values:
        sent = time.monotonic()
        producer.produce(topic, v, partition=partition,
                         on_delivery=lambda err, msg, sent=sent: out.append((err, time.monotonic() - sent)))
    return out


def test_a_client_cut_from_the_leader_waits_until_healed(kafka_cluster: ClusterThread) -> None:
    kafka_cluster.create_topic("cut", 1, 3)
    leader = kafka_cluster.leader("cut", 0)
    assert leader is not None
    p = ck.Producer({"bootstrap.servers": kafka_cluster.bootstrap, "acks": "all",
                     "enable.idempotence": True, "message.timeout.ms": 60000})
    warm = deliveries(p, "cut", [b"warm"], 0)
    assert p.flush(10) == 0 and warm[0][0] is None
    kafka_cluster.cut_clients(leader)
    got = deliveries(p, "cut", [b"during-%d" % i for i in range(5)], 0)
    p.flush(2.0)
    assert got == [], "delivered through a cut"
    # the brokers still reach each other: the leader keeps its place and its followers
    assert kafka_cluster.leader("cut", 0) == leader and len(kafka_cluster.isr("cut", 0)) == 3
    kafka_cluster.heal()
    assert p.flush(30) == 0
    assert [err for err, _ in got] == [None] * 5


def test_a_slow_broker_answers_late(kafka_cluster: ClusterThread) -> None:
    kafka_cluster.create_topic("slow", 1, 3)
    leader = kafka_cluster.leader("slow", 0)
    assert leader is not None
    p = ck.Producer({"bootstrap.servers": kafka_cluster.bootstrap, "acks": "all", "linger.ms": 0})
    # the first delivery also waits for the metadata and the connections (a second on a loaded
    # machine): the time of a delivery is the fastest of three after it
    warm = deliveries(p, "slow", [b"warm"], 0)
    assert p.flush(10) == 0 and warm[0][0] is None
    fast = []  # each delivery's list, filled by its callback in flush()
    for i in range(3):
        fast.append(deliveries(p, "slow", [b"a%d" % i], 0))
        assert p.flush(10) == 0
    kafka_cluster.slow_disk(leader, 400)
    slow = deliveries(p, "slow", [b"b"], 0)
    assert p.flush(10) == 0
    kafka_cluster.slow_disk(leader, 0)
    assert slow[0][0] is None and slow[0][1] >= 0.4 > min(d[0][1] for d in fast)


def test_a_slow_follower_link_delays_acks_all_but_not_acks_1(kafka_cluster: ClusterThread) -> None:
    kafka_cluster.create_topic("lag", 1, 3, {"min.insync.replicas": "3"})
    leader = kafka_cluster.leader("lag", 0)
    assert leader is not None
    for follower in kafka_cluster.isr("lag", 0):
        if follower != leader:
            kafka_cluster.slow(leader, follower, 300)
    try:
        p_all = ck.Producer({"bootstrap.servers": kafka_cluster.bootstrap, "acks": "all", "linger.ms": 0})
        p_one = ck.Producer({"bootstrap.servers": kafka_cluster.bootstrap, "acks": 1, "linger.ms": 0})
        for p in (p_all, p_one):  # connections and metadata first
            deliveries(p, "lag", [b"warm"], 0)
            assert p.flush(20) == 0
        # (a delivery is reported at the producer's next poll: each is flushed on its own)
        acked_one = deliveries(p_one, "lag", [b"one"], 0)
        assert p_one.flush(20) == 0
        acked_all = deliveries(p_all, "lag", [b"all"], 0)
        assert p_all.flush(20) == 0
    finally:
        kafka_cluster.heal()
    # acks=all waits for both followers' fetches across the slowed links (a round trip each)
    assert acked_all[0][0] is None and acked_all[0][1] >= 0.3
    assert acked_one[0][0] is None and acked_one[0][1] < 0.3


def test_secured_listeners_need_inter_broker_credentials() -> None:
    from kproto.broker import Cluster
    with pytest.raises(ValueError, match="inter_broker_sasl"):
        Cluster(brokers=1, sasl_enabled_mechanisms=("PLAIN",), sasl_users={"a": "b"})
