"""Issue 17's acceptance run with confluent-kafka: an idempotent acks=all producer writes while
leaders are killed, isolated and cut from a follower, and a leader is shut down; every
acknowledged record must then be on every in-sync replica exactly once and in order, and a
consumer group must read each exactly once (the history checker's findings are printed)."""
from __future__ import annotations

import threading
import time

import pytest

from kproto.history_checker import History
from kproto.testing import ClusterThread

from cluster_chaos import TOPIC, run_chaos

ck = pytest.importorskip("confluent_kafka")


def confluent_producer(name: str):
    def produce(cluster: ClusterThread, history: History, stop: threading.Event) -> None:
        p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 2, "message.timeout.ms": 120000,
                         "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 1000})
        seq = 0

        def delivered(op: int):
            def cb(err, msg) -> None:
                if err is None:
                    history.ok_send(op, msg.partition(), msg.offset())
                else:
                    history.info_send(op, str(err))  # may or may not be written
            return cb

        while not stop.is_set():
            value = f"{name}-{seq}".encode()
            op = history.invoke_send(name, None, value)
            try:
                p.produce(TOPIC, value=value, key=str(seq % 17).encode(), on_delivery=delivered(op))
            except BufferError:
                history.fail_send(op, "queue full")
                p.poll(0.05)
                continue
            seq += 1
            p.poll(0)
            time.sleep(0.001)
        left = p.flush(120)
        assert left == 0, f"{left} sends still unanswered"
    return produce


@pytest.mark.kafka_cluster(brokers=3, controllers=1)
def test_confluent_producers_through_chaos(kafka_cluster: ClusterThread) -> None:
    result = run_chaos(kafka_cluster, [confluent_producer("p1"), confluent_producer("p2")])
    assert result.valid, result.summary()
    assert result.acknowledged > 1000 and result.lost == 0 and result.duplicates == 0
    assert result.reads == result.present and result.duplicate_reads == 0
