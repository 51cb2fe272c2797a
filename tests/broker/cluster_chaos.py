"""The chaos run of the cluster tests: producers write while a nemesis kills, partitions and
restarts nodes; afterwards every in-sync replica's log and a consumer group's reads are
checked against the history with :mod:`kproto.testing.history_checker`.

The clients are plugged in as functions: ``produce(cluster, history, stop)`` runs in a thread
until ``stop`` is set and records every send; the readers are confluent-kafka consumers.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterable

from kproto.testing.history_checker import CheckResult, History, check
from kproto.testing import ClusterThread

TOPIC = "chaos"
PARTITIONS = 3


def wait_healthy(cluster: ClusterThread, timeout: float = 60.0) -> None:
    """Every partition led, its ISR all three brokers, and every replica's log as long as the
    leader's and fully committed."""
    def healthy(c: Any) -> bool:
        for p in range(PARTITIONS):
            part = c.image().partition(TOPIC, p)
            if part is None or part.leader < 0 or sorted(part.isr) != sorted(c.broker_ids):
                return False
            ends = set()
            for b in c.brokers.values():
                if b.core is None:
                    return False
                rp = b.core.replicas.partitions.get((TOPIC, p))
                if rp is None:
                    return False
                ends.add((rp.log.log_end_offset, rp.log.high_watermark))
            if len(ends) != 1 or len({e for pair in ends for e in pair}) != 1:
                return False
        return True
    cluster.wait_for(healthy, timeout, "a healthy cluster (full ISRs, replicas caught up)")


def nemesis(cluster: ClusterThread, log: Callable[[str], None]) -> None:
    """Jepsen's nemesis: the faults of the issue, one after another, healing after each."""
    leader = cluster.leader(TOPIC, 0)
    assert leader is not None
    log(f"kill -9 broker {leader} (leader of {TOPIC}-0)")
    cluster.stop(leader, abrupt=True)
    cluster.wait_for(lambda c: c.leader(TOPIC, 0) not in (None, leader), 30, "a new leader of partition 0")
    time.sleep(1.0)
    log(f"restart broker {leader}")
    cluster.start(leader)
    wait_healthy(cluster)

    leader = cluster.leader(TOPIC, 1)
    assert leader is not None
    log(f"isolate broker {leader} (leader of {TOPIC}-1) from every other node")
    cluster.isolate(leader)
    cluster.wait_for(lambda c: c.leader(TOPIC, 1) not in (None, leader), 30, "a new leader of partition 1")
    time.sleep(1.0)
    log("heal")
    cluster.heal()
    wait_healthy(cluster)

    leader = cluster.leader(TOPIC, 2)
    assert leader is not None
    follower = next(r for r in cluster.isr(TOPIC, 2) if r != leader)
    log(f"cut broker {leader} (leader of {TOPIC}-2) from follower {follower}: the ISR shrinks")
    cluster.partition_network(leader, follower)
    cluster.wait_for(lambda c: follower not in c.isr(TOPIC, 2), 30, "the ISR of partition 2 to shrink")
    log("heal")
    cluster.heal()
    wait_healthy(cluster)

    leader = cluster.leader(TOPIC, 0)
    assert leader is not None
    log(f"controlled shutdown of broker {leader} (leader of {TOPIC}-0)")
    cluster.stop(leader)
    time.sleep(0.5)
    log(f"restart broker {leader}")
    cluster.start(leader)
    wait_healthy(cluster)


def controller_failover(cluster: ClusterThread, log: Callable[[str], None]) -> None:
    """A fault for ``run_chaos(faults=...)`` (a quorum of three controllers): kill -9 the active
    controller; another is elected, then the killed one restarts and follows it, caught up."""
    active = cluster.active_controller()
    assert active is not None
    log(f"kill -9 controller {active} (the active controller)")
    cluster.stop(active, abrupt=True)
    cluster.wait_for(lambda c: c.active_controller() not in (None, active), 30,
                     "another controller to become active")
    log(f"controller {cluster.active_controller()} is active")
    time.sleep(1.0)
    log(f"restart controller {active}")
    cluster.start(active)

    def following(c: Any) -> bool:
        leader = c.active_controller()
        node = c.controllers[active]
        return leader is not None and node.running and node.replica.leader_id == leader \
            and node.replica.high_watermark == c.controllers[leader].replica.high_watermark
    cluster.wait_for(following, 30, f"controller {active} to follow the active one, caught up")
    wait_healthy(cluster)


def replica_logs(cluster: ClusterThread, history: History) -> dict[int, set[int]]:
    """Record each broker's log of every partition into the history; the ISR of each."""
    def collect(c: Any) -> tuple[dict[int, set[int]], list[tuple[int, int, list[tuple[int, bytes]]]]]:
        isr = {p: set(c.isr(TOPIC, p)) for p in range(PARTITIONS)}
        out = []
        for b in c.brokers.values():
            for p in range(PARTITIONS):
                part = b.core.replicas.partitions[(TOPIC, p)]
                records = [(r.offset, bytes(r.value)) for batch in part.log.batches()
                           if not batch.is_control for r in batch.records()]
                out.append((b.node_id, p, records))
        return isr, out
    isr, logs = cluster.inspect(collect)
    for node, p, records in logs:
        history.replica_log(node, p, records)
    return isr


def read_group(bootstrap: str, history: History, expected: int, members: int = 2,
               timeout: float = 60.0) -> None:
    """A consumer group of ``members`` reads the topic until it has seen ``expected`` records,
    committing synchronously after each batch it processed (so a rebalance hands partitions
    over exactly where the previous owner stopped)."""
    import confluent_kafka as ck

    seen = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + timeout
    errors: list[BaseException] = []

    def member(name: str) -> None:
        try:
            consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-readers",
                                    "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                    "session.timeout.ms": 10000})
            consumer.subscribe([TOPIC])
            while time.monotonic() < deadline:
                with lock:
                    if seen[0] >= expected:
                        break
                msgs = consumer.consume(500, 0.5)
                good = [m for m in msgs if m.error() is None]
                for m in good:
                    history.read(name, m.partition(), m.offset(), m.key(), m.value())
                if good:
                    consumer.commit(asynchronous=False)
                    with lock:
                        seen[0] += len(good)
            consumer.close()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=member, args=(f"reader-{i}",)) for i in range(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 30)
    assert not errors, errors


def run_chaos(cluster: ClusterThread, producers: Iterable[Callable[[ClusterThread, History, threading.Event], None]],
              log: Callable[[str], None] = print, *, warmup: float = 1.5,
              faults: Iterable[Callable[[ClusterThread, Callable[[str], None]], None]] = ()
              ) -> CheckResult:
    """Produce through the chaos, then check the logs and a group's reads; the result (also
    printed).

    ``warmup``: seconds the producers write before the first fault (a JVM takes a while to
    start). ``faults``: more faults, ``fault(cluster, log)`` one after another after the
    nemesis, the producers still writing (e.g. :func:`controller_failover`)."""
    t0 = time.monotonic()
    say = log
    log = lambda what: say(f"{time.monotonic() - t0:6.1f} s  {what}")  # noqa: E731
    cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    history = History()
    stop = threading.Event()
    threads = [threading.Thread(target=p, args=(cluster, history, stop)) for p in producers]
    for t in threads:
        t.start()
    try:
        time.sleep(warmup)
        nemesis(cluster, log)
        for fault in faults:
            fault(cluster, log)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    wait_healthy(cluster)
    log("producers stopped, replicas caught up")
    isr = replica_logs(cluster, history)
    present = cluster.inspect(lambda c: sum(
        c.brokers[1].core.replicas.partitions[(TOPIC, p)].log.high_watermark for p in range(PARTITIONS)))
    read_group(cluster.bootstrap, history, present)
    log(f"the group read {present} records")
    result = check(history, isr=isr)
    log(result.summary())
    return result
