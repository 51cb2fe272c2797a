"""Transactions on a cluster (issue 17): the coordinator is the leader of the transactional
id's ``__transaction_state`` partition, markers reach each partition's leader through
WriteTxnMarkers, and a transactional producer goes on after its coordinator is killed."""
from __future__ import annotations

import time
from typing import Any

import pytest

from kproto.broker.coordinators.txn import TXN_TOPIC
from kproto.testing import ClusterThread

ck = pytest.importorskip("confluent_kafka")


def read_committed(bootstrap: str, topic: str, want: int, group: str, timeout: float = 20.0) -> list[bytes]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(got) < want:
        got += [m.value() for m in consumer.consume(100, 0.3) if m.error() is None]
    # anything after the wanted count (an aborted record leaking) shows in one more poll
    got += [m.value() for m in consumer.consume(100, 1.0) if m.error() is None]
    consumer.close()
    return got


def coordinator_of(cluster: ClusterThread, transactional_id: str) -> list[int]:
    return cluster.inspect(lambda c: [b.node_id for b in c.brokers.values()
                                      if b.core is not None and transactional_id in b.core.txns.txns])


def test_transactions_across_brokers_and_a_coordinator_kill(kafka_cluster: ClusterThread) -> None:
    kafka_cluster.create_topic("orders", 3, 3)
    p = ck.Producer({"bootstrap.servers": kafka_cluster.bootstrap, "transactional.id": "tx-orders"})
    p.init_transactions(30)
    # the id lives on exactly one broker: the leader of its __transaction_state partition
    (coordinator,) = coordinator_of(kafka_cluster, "tx-orders")
    partition = kafka_cluster.inspect(lambda c: c.brokers[coordinator].core.txns.partition_of("tx-orders"))
    assert kafka_cluster.leader(TXN_TOPIC, partition) == coordinator
    # one transaction over partitions led by every broker
    leaders = {kafka_cluster.leader("orders", i) for i in range(3)}
    assert len(leaders) == 3

    p.begin_transaction()
    for i in range(30):
        p.produce("orders", b"commit-%d" % i, partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(30):
        p.produce("orders", b"abort-%d" % i, partition=i % 3)
    assert p.flush(30) == 0  # written (librdkafka would otherwise drop them unsent at the abort)
    p.abort_transaction(30)

    got = read_committed(kafka_cluster.bootstrap, "orders", 30, "readers")
    assert sorted(got) == sorted(b"commit-%d" % i for i in range(30))

    # every partition holds a COMMIT and an ABORT marker, written by its own leader
    def markers(c: Any) -> dict[int, list[bool]]:
        out = {}
        for i in range(3):
            log = c.brokers[c.leader("orders", i)].core.replicas.partitions[("orders", i)].log
            out[i] = [b.record_list()[0].key[3] == 1 for b in log.batches() if b.is_control]
        return out
    # (written after EndTxn is answered, as Kafka's marker channel does)
    kafka_cluster.wait_for(lambda c: markers(c) == {i: [True, False] for i in range(3)}, 10,
                           "a COMMIT then an ABORT marker on every partition")

    # offsets committed in a transaction reach the group's coordinator with the markers
    consumer = ck.Consumer({"bootstrap.servers": kafka_cluster.bootstrap, "group.id": "txn-group"})
    p.begin_transaction()
    p.produce("orders", b"with-offsets", partition=0)
    p.send_offsets_to_transaction([ck.TopicPartition("orders", i, 7) for i in range(3)],
                                  consumer.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    committed = consumer.committed([ck.TopicPartition("orders", i) for i in range(3)], 10)
    consumer.close()
    assert [tp.offset for tp in committed] == [7, 7, 7]

    # the coordinator dies: its partition's new leader loads the id and the producer goes on
    kafka_cluster.stop(coordinator, abrupt=True)
    kafka_cluster.wait_for(lambda c: c.leader(TXN_TOPIC, partition) not in (None, coordinator), 30,
                           "a new leader of the transactional id's partition")
    p.begin_transaction()
    for i in range(9):
        p.produce("orders", b"after-kill-%d" % i, partition=i % 3)
    p.commit_transaction(60)
    (new_coordinator,) = coordinator_of(kafka_cluster, "tx-orders")
    assert new_coordinator not in (coordinator,)
    got = read_committed(kafka_cluster.bootstrap, "orders", 40, "readers-2")
    assert sorted(got) == sorted([b"commit-%d" % i for i in range(30)] + [b"with-offsets"]
                                 + [b"after-kill-%d" % i for i in range(9)])
    # the new coordinator's epoch is its partition's leader epoch (past the old one's), and the
    # markers it wrote carry it: a partition now fences the old coordinator's markers
    epochs = kafka_cluster.inspect(lambda c: (
        c.brokers[new_coordinator].core.txns.coordinator_epochs[partition],
        c.brokers[new_coordinator].core.replicas.partitions[(TXN_TOPIC, partition)].log.leader_epoch))
    assert epochs[0] == epochs[1] > 0
    pid = kafka_cluster.inspect(lambda c: c.brokers[new_coordinator].core.txns.txns["tx-orders"].producer_id)
    leader = kafka_cluster.leader("orders", 0)
    state = kafka_cluster.inspect(lambda c: c.brokers[leader].core.replicas.partitions[("orders", 0)].log.producers[pid])
    assert state.coordinator_epoch == epochs[0]
