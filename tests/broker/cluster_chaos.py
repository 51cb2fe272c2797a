"""The chaos run of the cluster tests: producers write while a nemesis kills, partitions and
restarts nodes; afterwards every in-sync replica's log and a consumer group's reads are
checked against the history with :mod:`kproto.testing.history_checker`.

The clients are plugged in as functions: ``produce(cluster, history, stop)`` runs in a thread
until ``stop`` is set and records every send; the readers are confluent-kafka consumers.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from kproto.records import iter_batches
from kproto.testing.history_checker import CheckResult, History, check
from kproto.testing import ClusterThread
from kproto.testing.apache import ApacheKafka

TOPIC = "chaos"
PARTITIONS = 3


def wait_healthy(cluster: ClusterThread, timeout: float = 120.0, *, caught_up: bool = True,
                 topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    """Every partition led and its ISR all three brokers; ``caught_up``: every replica's log
    as long as the leader's and fully committed too, which holds for good only once the
    producers stopped (while they write, at about 1 instant in 100: waiting for it took
    15-30 s on a loaded machine where the ISRs were full again within a second)."""
    def healthy(c: Any) -> bool:
        for p in range(partitions):
            part = c.image().partition(topic, p)
            if part is None or part.leader < 0 or sorted(part.isr) != sorted(c.broker_ids):
                return False
            if not caught_up:
                continue
            ends = set()
            for b in c.brokers.values():
                if b.core is None:
                    return False
                rp = b.core.replicas.partitions.get((topic, p))
                if rp is None:
                    return False
                ends.add((rp.log.log_end_offset, rp.log.high_watermark))
            if len(ends) != 1 or len({e for pair in ends for e in pair}) != 1:
                return False
        return True
    what = "full ISRs" + (", replicas caught up" if caught_up else "")
    cluster.wait_for(healthy, timeout, f"a healthy cluster ({what})")


def wait_isrs(cluster: ClusterThread, log: Callable[[str], None]) -> None:
    """:func:`wait_healthy` without waiting for the replicas to catch up (the producers still
    write), logging how long the ISRs took to be full again."""
    t = time.monotonic()
    wait_healthy(cluster, caught_up=False)
    log(f"every ISR full again after {time.monotonic() - t:.2f} s")


def nemesis(cluster: ClusterThread, log: Callable[[str], None],
            failovers: Optional[dict[str, float]] = None) -> None:
    """Jepsen's nemesis: the faults of the issue, one after another, healing after each.
    ``failovers``: seconds from each fault to the partition's new leader, by fault."""
    failovers = {} if failovers is None else failovers
    leader = cluster.leader(TOPIC, 0)
    assert leader is not None
    log(f"kill -9 broker {leader} (leader of {TOPIC}-0)")
    t = time.monotonic()
    cluster.stop(leader, abrupt=True)
    cluster.wait_for(lambda c: c.leader(TOPIC, 0) not in (None, leader), 30, "a new leader of partition 0")
    failovers["kill -9"] = time.monotonic() - t
    time.sleep(1.0)
    log(f"restart broker {leader}")
    cluster.start(leader)
    wait_isrs(cluster, log)

    leader = cluster.leader(TOPIC, 1)
    assert leader is not None
    log(f"isolate broker {leader} (leader of {TOPIC}-1) from every other node")
    t = time.monotonic()
    cluster.isolate(leader)
    cluster.wait_for(lambda c: c.leader(TOPIC, 1) not in (None, leader), 30, "a new leader of partition 1")
    failovers["isolated (SIGSTOP)"] = time.monotonic() - t
    time.sleep(1.0)
    log("heal")
    cluster.heal()
    wait_isrs(cluster, log)

    leader = cluster.leader(TOPIC, 2)
    assert leader is not None
    follower = next(r for r in cluster.isr(TOPIC, 2) if r != leader)
    log(f"cut broker {leader} (leader of {TOPIC}-2) from follower {follower}: the ISR shrinks")
    cluster.partition_network(leader, follower)
    cluster.wait_for(lambda c: follower not in c.isr(TOPIC, 2), 30, "the ISR of partition 2 to shrink")
    log("heal")
    cluster.heal()
    wait_isrs(cluster, log)

    leader = cluster.leader(TOPIC, 0)
    assert leader is not None
    log(f"controlled shutdown of broker {leader} (leader of {TOPIC}-0)")
    t = time.monotonic()
    stopping = threading.Thread(target=cluster.stop, args=(leader,))  # returns once it stopped
    stopping.start()
    cluster.wait_for(lambda c: c.leader(TOPIC, 0) not in (None, leader), 30, "a new leader of partition 0")
    failovers["controlled shutdown"] = time.monotonic() - t
    stopping.join(90)
    time.sleep(0.5)
    log(f"restart broker {leader}")
    cluster.start(leader)
    wait_isrs(cluster, log)


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
    wait_isrs(cluster, log)


ReplicaLogs = tuple[dict[int, set[int]], list[tuple[int, int, list[tuple[int, bytes]]]]]


def replica_logs(cluster: ClusterThread) -> ReplicaLogs:
    """The ISR of each partition, and each broker's log of it: (node, partition, [(offset,
    value)])."""
    def collect(c: Any) -> ReplicaLogs:
        isr = {p: set(c.isr(TOPIC, p)) for p in range(PARTITIONS)}
        out = []
        for b in c.brokers.values():
            for p in range(PARTITIONS):
                part = b.core.replicas.partitions[(TOPIC, p)]
                records = [(r.offset, bytes(r.value)) for batch in part.log.batches()
                           if not batch.is_control for r in batch.records()]
                out.append((b.node_id, p, records))
        return isr, out
    return cluster.inspect(collect)


def read_group(bootstrap: str, history: History, expected: int, members: int = 2,
               timeout: float = 60.0, *, topic: str = TOPIC, group: str = "chaos-readers") -> None:
    """A consumer group of ``members`` reads ``topic`` until it has seen ``expected`` records,
    committing synchronously after each batch it processed (so a rebalance hands partitions
    over exactly where the previous owner stopped). librdkafka's consumers read committed:
    the records of aborted transactions are not delivered."""
    import confluent_kafka as ck

    seen = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + timeout
    errors: list[BaseException] = []

    def member(name: str) -> None:
        try:
            consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                    "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                    "isolation.level": "read_committed",
                                    "session.timeout.ms": 10000})
            consumer.subscribe([topic])
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


def run_chaos(target: Any, producers: Iterable[Callable[[Any, History, threading.Event], None]],
              log: Callable[[str], None] = print, *, warmup: float = 1.5,
              faults: Iterable[Callable[[Any, Callable[[str], None]], None]] = (),
              failovers: Optional[dict[str, float]] = None) -> CheckResult:
    """Produce through the chaos, then check the logs and a group's reads; the result (also
    printed). ``target``: kproto's cluster (a :class:`ClusterThread`: :func:`nemesis`) or
    Apache Kafka's (an :class:`ApacheKafka` of three brokers: :func:`apache_nemesis`, the
    faults that apply to processes); the same producers, group and history checker for both.

    ``warmup``: seconds the producers write before the first fault (a JVM takes a while to
    start). ``faults``: more faults, ``fault(target, log)`` one after another after the
    nemesis, the producers still writing (e.g. :func:`controller_failover`). ``failovers``:
    filled with the nemesis's failover times."""
    apache = isinstance(target, ApacheKafka)
    t0 = time.monotonic()
    say = log
    log = lambda what: say(f"{time.monotonic() - t0:6.1f} s  {what}")  # noqa: E731
    target.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    history = History()
    stop = threading.Event()
    threads = [threading.Thread(target=p, args=(target, history, stop)) for p in producers]
    for t in threads:
        t.start()
    try:
        time.sleep(warmup)
        (apache_nemesis if apache else nemesis)(target, log, {} if failovers is None else failovers)
        for fault in faults:
            fault(target, log)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    if apache:
        apache_wait_healthy(target, caught_up=True)
    else:
        wait_healthy(target)
    log("producers stopped, replicas caught up")
    isr, logs = (apache_replica_logs if apache else replica_logs)(target)
    for node, p, records in logs:
        history.replica_log(node, p, records)
    # every replica is caught up: any one's logs hold what is there to read
    first = logs[0][0]
    present = sum(len(records) for node, _, records in logs if node == first)
    read_group(target.bootstrap, history, present)
    log(f"the group read {present} records")
    result = check(history, isr=isr)
    log(result.summary())
    return result


def _record_producers(target: Any) -> dict[bytes, list[tuple[int, int]]]:
    """(producer id, producer epoch) of each copy of each value in the first broker's logs."""
    copies: dict[bytes, list[tuple[int, int]]] = {}

    def add(batches: Iterable[Any]) -> None:
        for batch in batches:
            if not batch.is_control:
                for r in batch.record_list():
                    copies.setdefault(bytes(r.value), []).append((batch.producer_id, batch.producer_epoch))

    if isinstance(target, ApacheKafka):
        for p in range(PARTITIONS):
            folder = target.log_dir(target.broker_ids[0]) / f"{TOPIC}-{p}"
            for segment in sorted(folder.glob("*.log"), key=lambda f: int(f.stem)):
                add(iter_batches(segment.read_bytes()))
    else:
        def collect(c: Any) -> None:
            broker = next(iter(c.brokers.values()))
            for p in range(PARTITIONS):
                add(broker.core.replicas.partitions[(TOPIC, p)].log.batches())
        target.inspect(collect)
    return copies


def resent_under_a_new_epoch(target: Any, result: CheckResult) -> set[bytes]:
    """The values the checker found twice in a log whose copies one producer id wrote under
    distinct producer epochs. librdkafka's idempotent producer bumps its epoch when a failover
    leaves a batch's outcome unknown and sends what it had in flight again from sequence 0: no
    broker can tell the copies apart (seen once on Apache Kafka 4.4.0 at a controlled shutdown
    of the leader: the same value at offsets 1482 and 1483, producer 0 epoch 0 sequence 740,
    then epoch 1 sequence 0). Any other duplicate stays an error."""
    values = {f.value for f in result.findings if f.kind == "duplicate"}
    if not values:
        return set()
    copies = _record_producers(target)
    return {v for v in values if len(c := copies.get(v, [])) > 1
            and len({pid for pid, _ in c}) == 1 and len({e for _, e in c}) == len(c)}


def unexcused_errors(target: Any, result: CheckResult) -> tuple[list[Any], set[bytes]]:
    """The checker's error findings but the duplicates :func:`resent_under_a_new_epoch`
    excuses, and those values."""
    resent = resent_under_a_new_epoch(target, result)
    return [f for f in result.findings if f.severity == "error"
            and not (f.kind in ("duplicate", "duplicate-read") and f.value in resent)], resent


# -- the same run against Apache Kafka (kproto.testing.apache): faults on processes only -----------
def apache_disk_log(kafka: ApacheKafka, broker: int, partition: int) -> list[tuple[int, bytes]]:
    """(offset, value) of the data records in ``broker``'s log of the partition, read from its
    segment files (Kafka serves no reads from followers)."""
    folder = kafka.log_dir(broker) / f"{TOPIC}-{partition}"
    out: list[tuple[int, bytes]] = []
    for segment in sorted(folder.glob("*.log"), key=lambda p: int(p.stem)):
        for batch in iter_batches(Path(segment).read_bytes()):
            if not batch.is_control:
                out += [(r.offset, bytes(r.value)) for r in batch.record_list()]
    return out


def _apache_log_end(kafka: ApacheKafka, broker: int, partition: int) -> int:
    folder = kafka.log_dir(broker) / f"{TOPIC}-{partition}"
    end = 0
    for segment in sorted(folder.glob("*.log"), key=lambda p: int(p.stem)):
        for batch in iter_batches(Path(segment).read_bytes()):
            end = batch.last_offset + 1
    return end


def _apache_isrs(kafka: ApacheKafka) -> dict[int, set[int]]:
    out = {}
    for t in kafka.metadata([TOPIC]).topics:
        for p in t.partitions:
            out[p.partition_index] = set(p.isr_nodes) if p.leader_id >= 0 else set()
    return out


def apache_wait_healthy(kafka: ApacheKafka, caught_up: bool = False, timeout: float = 60.0) -> None:
    """Every partition led with all brokers in its ISR; ``caught_up``: every replica's log as
    long as the others' too (once the producers stopped)."""
    brokers = set(kafka.broker_ids)

    def healthy() -> bool:
        try:
            isrs = _apache_isrs(kafka)
            if len(isrs) != PARTITIONS or any(isr != brokers for isr in isrs.values()):
                return False
            return not caught_up or all(
                len({_apache_log_end(kafka, b, p) for b in brokers}) == 1 for p in range(PARTITIONS))
        except OSError:
            return False
    kafka.wait_for(healthy, timeout, "a healthy cluster (full ISRs" + (", replicas caught up)" if caught_up else ")"))


def apache_nemesis(kafka: ApacheKafka, log: Callable[[str], None], failovers: dict[str, float]) -> None:
    """The nemesis's faults that apply to processes: kill -9 a leader, SIGSTOP one (its session
    with the controller expires) then SIGCONT, a controlled shutdown; healing after each."""
    def new_leader(partition: int, old: int, fault: str, started: float) -> None:
        via = next(b for b in kafka.broker_ids if b != old and kafka.running(b))

        def moved() -> bool:
            try:
                return kafka.leader(TOPIC, partition, via) not in (None, old)
            except OSError:
                return False
        kafka.wait_for(moved, 30, f"a new leader of partition {partition}", interval=0.05)
        failovers[fault] = time.monotonic() - started
        log(f"broker {kafka.leader(TOPIC, partition, via)} leads {TOPIC}-{partition} after "
            f"{failovers[fault]:.2f} s")

    leader = kafka.leader(TOPIC, 0)
    assert leader is not None
    log(f"kill -9 broker {leader} (leader of {TOPIC}-0)")
    started = time.monotonic()
    kafka.stop(leader, abrupt=True)
    new_leader(0, leader, "kill -9", started)
    time.sleep(1.0)
    log(f"restart broker {leader}")
    kafka.start(leader)
    apache_wait_healthy(kafka)

    leader = kafka.leader(TOPIC, 1)
    assert leader is not None
    log(f"SIGSTOP broker {leader} (leader of {TOPIC}-1)")
    started = time.monotonic()
    kafka.pause(leader)
    new_leader(1, leader, "isolated (SIGSTOP)", started)
    time.sleep(1.0)
    log(f"SIGCONT broker {leader}")
    kafka.resume(leader)
    apache_wait_healthy(kafka)

    leader = kafka.leader(TOPIC, 2)
    assert leader is not None
    log(f"controlled shutdown of broker {leader} (leader of {TOPIC}-2)")
    started = time.monotonic()
    stopping = threading.Thread(target=kafka.stop, args=(leader,))  # returns once the JVM exited
    stopping.start()
    new_leader(2, leader, "controlled shutdown", started)
    stopping.join(90)
    time.sleep(0.5)
    log(f"restart broker {leader}")
    kafka.start(leader)
    apache_wait_healthy(kafka)


def apache_replica_logs(kafka: ApacheKafka) -> ReplicaLogs:
    """:func:`replica_logs` of an Apache Kafka cluster, read from the brokers' segment files."""
    return (_apache_isrs(kafka), [(b, p, apache_disk_log(kafka, b, p))
                                  for b in kafka.broker_ids for p in range(PARTITIONS)])
