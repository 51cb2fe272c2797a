"""Transactions through leader kills on kproto's cluster: the Java 4.4 client
(``java/KprotoTxnChaos.java``) and librdkafka (confluent-kafka) each run TRANSACTIONS
transactions, the even ones committed and the odd ones aborted, while the leader of a partition
they write and then the leader of their transaction coordinator's partition are killed (kill -9)
and restarted. Afterwards the history checker judges every in-sync replica's read_committed view
of the log (built here from the records and the transaction markers) and what a read_committed
consumer group read: every committed transaction's records exactly once where they were
acknowledged, no aborted one's.

``KPROTO_TXN_ACCEPTANCE=1000`` runs 1,000 transactions per producer (the issue's acceptance run,
a few minutes); the default is a small count that keeps the test within CI's budget.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from typing import IO, Any, Callable, Iterable, Optional

import pytest

import java_interop as jv
from cluster_chaos import read_group, wait_healthy
from kproto.broker.coordinators.offsets_topic import partition_for
from kproto.broker.coordinators.txn import TXN_TOPIC
from kproto.records import RecordBatch
from kproto.records.control import decode_control
from kproto.testing import ClusterThread
from kproto.testing.history_checker import History, check

ck = pytest.importorskip("confluent_kafka")

TOPIC = "txn-chaos"
PARTITIONS = 3
#: transactions per producer
TRANSACTIONS = int(os.environ.get("KPROTO_TXN_ACCEPTANCE", "40"))
#: the Java producer's pause after each transaction (the other keeps pace with it): the short
#: CI run still spans both faults (a fault and its healing take several seconds, in which an
#: unpaced producer could finish all 40); the full run needs none
PACE_MS = 0 if TRANSACTIONS >= 200 else 300
#: records per transaction, spread over the partitions
RECORDS = 3
JAVA_ID = "txn-java"


def same_coordinator(txn_id: str, partitions: int) -> str:
    """A transactional id for librdkafka whose coordinator is ``txn_id``'s (the same
    ``__transaction_state`` partition): one kill then moves both producers' coordinator."""
    want = partition_for(txn_id, partitions)
    return next(f"txn-rdkafka-{i}" for i in range(10_000)
                if partition_for(f"txn-rdkafka-{i}", partitions) == want)


def committed_view(batches: Iterable[RecordBatch]) -> tuple[list[tuple[int, bytes]], int]:
    """What a read_committed consumer can read of a log, judged from its own records: each
    transactional batch is held until its producer's next COMMIT or ABORT marker; (offset,
    value) of the visible records, and how many records are still in open transactions."""
    out: list[tuple[int, bytes]] = []
    open_txns: dict[int, list[tuple[int, bytes]]] = {}
    for batch in batches:
        if batch.is_control:
            held = open_txns.pop(batch.producer_id, [])
            records = batch.record_list()
            if records and decode_control(records[0].key, records[0].value).type == "COMMIT":
                out += held
            continue
        records = [(r.offset, bytes(r.value)) for r in batch.record_list()]
        if batch.is_transactional:
            open_txns.setdefault(batch.producer_id, []).extend(records)
        else:
            out += records
    return sorted(out), sum(len(held) for held in open_txns.values())


class Producer:
    """A transactional producer of the run: how many transactions it ended, by outcome, and
    the problems it met."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ended = 0
        self.outcomes: dict[str, int] = {"commit": 0, "abort": 0}
        #: intended commits that ended aborted, with the error that made them abort
        self.turned: list[str] = []
        self.retries = 0
        self.problems: list[BaseException] = []
        self.seconds = 0.0
        self.finished = False

    def ended_txn(self, history: History, ops: list[int], intended: bool, committed: bool,
                  error: Optional[str]) -> None:
        history.end_txn(ops, committed)
        self.outcomes["commit" if committed else "abort"] += 1
        if intended and not committed:
            self.turned.append(str(error))
        self.ended += 1


class JavaTxnProducer(Producer):
    """KprotoTxnChaos in a JVM, each event it prints recorded into the history in order."""

    def __init__(self, cp: str, workdir: str, count: int, limit_s: int) -> None:
        super().__init__(JAVA_ID)
        self.cp, self.count, self.limit_s = cp, count, limit_s
        self.stderr_path = os.path.join(workdir, "java-txn.stderr")
        self.exit_code: Optional[int] = None
        self.done = False

    def __call__(self, bootstrap: str, history: History) -> None:
        t0 = time.monotonic()
        with open(self.stderr_path, "w") as stderr:
            proc = subprocess.Popen(jv.command(self.cp, "KprotoTxnChaos", bootstrap, TOPIC, str(PARTITIONS),
                                               self.name, str(self.count), str(RECORDS), str(self.limit_s),
                                               str(PACE_MS)),
                                    stdout=subprocess.PIPE, stderr=stderr, text=True)
            assert proc.stdout is not None
            self._record(proc.stdout, history)
            try:
                self.exit_code = proc.wait(self.limit_s + 30)
            except subprocess.TimeoutExpired:  # its watchdog failed: reported by the exit code
                proc.kill()
                self.exit_code = proc.wait()
        self.seconds = time.monotonic() - t0
        self.finished = True

    def _record(self, stdout: IO[str], history: History) -> None:
        ops: dict[int, int] = {}
        try:
            for line in stdout:
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                kind = event["event"]
                if kind == "send":
                    ops[event["seq"]] = history.invoke_send(self.name, None, event["value"])
                elif kind == "ack":
                    history.ok_send(ops[event["seq"]], event["partition"], event["offset"])
                elif kind == "error":
                    history.info_send(ops[event["seq"]], event["error"])
                elif kind == "end":
                    self.retries += event["retries"]
                    self.ended_txn(history, [ops[s] for s in range(event["first"], event["last"] + 1)],
                                   event["txn"] % 2 == 0, event["outcome"] == "commit", event["error"])
                elif kind == "done":
                    self.done = True
        except BaseException as exc:  # reported by the test
            self.problems.append(exc)

    def stderr(self) -> str:
        with open(self.stderr_path) as f:
            return f.read()[-8000:]


class RdkafkaTxnProducer(Producer):
    """confluent-kafka's transactional producer: the same transactions as the Java program's,
    a commit or abort that fails retriably called again, one that requires it aborted. It
    keeps pace with ``other`` (at most two transactions ahead while that one runs), so both
    are mid-run at each fault."""

    def __init__(self, name: str, count: int, other: Producer) -> None:
        super().__init__(name)
        self.count, self.other = count, other

    def __call__(self, bootstrap: str, history: History) -> None:
        t0 = time.monotonic()
        try:
            self._run(bootstrap, history)
        except BaseException as exc:  # reported by the test
            self.problems.append(exc)
        self.seconds = time.monotonic() - t0
        self.finished = True

    def _run(self, bootstrap: str, history: History) -> None:
        p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": self.name,
                         "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
                         "linger.ms": 1, "retry.backoff.ms": 50,
                         "topic.metadata.refresh.interval.ms": 1000})

        def delivered(op: int) -> Callable[[Any, Any], None]:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    history.ok_send(op, msg.partition(), msg.offset())
                else:
                    history.info_send(op, str(err))
            return cb

        p.init_transactions(60)
        for t in range(self.count):
            while self.ended > self.other.ended + 2 and not self.other.finished:
                time.sleep(0.01)
            p.begin_transaction()
            ops = []
            for i in range(RECORDS):
                op = history.invoke_send(self.name, None, f"{self.name}-{t}-{i}")
                p.produce(TOPIC, value=f"{self.name}-{t}-{i}", partition=(t + i) % PARTITIONS,
                          on_delivery=delivered(op))
                ops.append(op)
            p.flush(60)  # written, also those of an abort
            intended = commit = t % 2 == 0
            error: Optional[str] = None
            for _attempt in range(20):
                try:
                    if commit:
                        p.commit_transaction(30)
                    else:
                        p.abort_transaction(30)
                    break
                except ck.KafkaException as exc:
                    err = exc.args[0]
                    if err.txn_requires_abort():
                        commit, error = False, str(err)
                    elif not err.retriable():
                        raise
                    self.retries += 1
            else:
                raise AssertionError(f"transaction {t} never ended: {error}")
            p.poll(0)  # the purged sends' callbacks of an abort
            self.ended_txn(history, ops, intended, commit, error)


def coordinator(cluster: ClusterThread, txn_id: str) -> tuple[int, Optional[int]]:
    """The ``__transaction_state`` partition of ``txn_id`` and its leader."""
    n = cluster.inspect(lambda c: len(c.image().topics[TXN_TOPIC].partitions))
    p = partition_for(txn_id, n)
    return p, cluster.leader(TXN_TOPIC, p)


def kill_and_restart(cluster: ClusterThread, topic: str, partition: int,
                     say: Callable[[str], None]) -> dict[str, float]:
    """kill -9 the leader of the partition; its new leader; restart it; full ISRs again."""
    leader = cluster.leader(topic, partition)
    assert leader is not None
    say(f"kill -9 broker {leader} (leader of {topic}-{partition})")
    t0 = time.monotonic()
    cluster.stop(leader, abrupt=True)
    cluster.wait_for(lambda c: c.leader(topic, partition) not in (None, leader), 30,
                     f"a new leader of {topic}-{partition}")
    failover = time.monotonic() - t0
    say(f"broker {cluster.leader(topic, partition)} leads {topic}-{partition} after {failover:.2f} s")
    time.sleep(1.0)
    say(f"restart broker {leader}")
    t1 = time.monotonic()
    cluster.start(leader)
    wait_healthy(cluster, caught_up=False, topic=TOPIC, partitions=PARTITIONS)
    say(f"broker {leader} back in every ISR of {TOPIC} after {time.monotonic() - t1:.2f} s")
    return {"failover": failover, "isr": time.monotonic() - t1}


def around(cluster: ClusterThread, places: Iterable[tuple[Any, int]], width: int = 12) -> str:
    """Every replica's batches near the places of the findings: what went wrong there."""
    def show(c: Any) -> str:
        lines = []
        for partition, offset in sorted(set(places))[:4]:
            for b in c.brokers.values():
                lines.append(f"broker {b.node_id}, {TOPIC}-{partition} near offset {offset}:")
                for batch in b.core.replicas.partitions[(TOPIC, partition)].log.batches():
                    if batch.last_offset < offset - width or batch.base_offset > offset + width:
                        continue
                    records = batch.record_list()
                    what = (decode_control(records[0].key, records[0].value).type if batch.is_control
                            else [bytes(r.value).decode() for r in records])
                    lines.append(f"  {batch.base_offset}-{batch.last_offset} pid {batch.producer_id} "
                                 f"epoch {batch.producer_epoch} leader epoch {batch.partition_leader_epoch} "
                                 f"txn {batch.is_transactional}: {what}")
        return "\n".join(lines)
    return str(cluster.inspect(show))


@pytest.fixture(scope="module")
def java_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return jv.classpath(str(tmp_path_factory.mktemp("java")), "4.4.0")


@pytest.mark.kafka_cluster(brokers=3, controllers=1)
def test_transactions_through_leader_kills(kafka_cluster: ClusterThread, java_cp: str, tmp_path) -> None:
    cluster = kafka_cluster
    t0 = time.monotonic()

    def say(what: str) -> None:
        print(f"{time.monotonic() - t0:6.1f} s  {what}", flush=True)

    cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    # the coordinator's partition exists once a producer looked for it: the Java producer's
    # FindCoordinator creates __transaction_state, librdkafka's id is chosen to share its partition
    history = History()
    java = JavaTxnProducer(java_cp, str(tmp_path), TRANSACTIONS, limit_s=60 + TRANSACTIONS)
    bootstrap = cluster.bootstrap
    threads = [threading.Thread(target=java, args=(bootstrap, history))]
    threads[0].start()
    cluster.wait_for(lambda c: c.image().topics.get(TXN_TOPIC) is not None and java.ended > 0
                     or not threads[0].is_alive(), 60, "the Java producer's first transaction")
    assert java.ended > 0, (java.exit_code, java.problems, java.stderr())
    n = cluster.inspect(lambda c: len(c.image().topics[TXN_TOPIC].partitions))
    rdkafka = RdkafkaTxnProducer(same_coordinator(JAVA_ID, n), TRANSACTIONS, java)
    threads.append(threading.Thread(target=rdkafka, args=(bootstrap, history)))
    threads[1].start()
    producers: list[Producer] = [java, rdkafka]
    say(f"producers {java.name} and {rdkafka.name} started ({TRANSACTIONS} transactions each)")

    def progress(share: float) -> Callable[[Any], bool]:
        return lambda c: all(p.ended >= share * TRANSACTIONS for p in producers) \
            or not all(t.is_alive() for t in threads)

    faults: dict[str, dict[str, float]] = {}
    during: dict[str, list[int]] = {}
    timeout = 60 + TRANSACTIONS
    # the leader of a partition the transactions write
    cluster.wait_for(progress(0.2), timeout, "a fifth of the transactions")
    during["partition leader"] = [p.ended for p in producers]
    faults["partition leader"] = kill_and_restart(cluster, TOPIC, 0, say)
    # the leader of the coordinator's partition (both producers' coordinator)
    cluster.wait_for(progress(0.5), timeout, "half of the transactions")
    txn_partition, _ = coordinator(cluster, JAVA_ID)
    during["coordinator leader"] = [p.ended for p in producers]
    faults["coordinator leader"] = kill_and_restart(cluster, TXN_TOPIC, txn_partition, say)
    for t in threads:
        t.join(timeout + 60)
    say("producers done: " + "; ".join(
        f"{p.name}: {p.outcomes['commit']} committed, {p.outcomes['abort']} aborted "
        f"({len(p.turned)} meant to commit), {p.retries} retried ends, {p.seconds:.1f} s" for p in producers))
    assert not java.problems and not rdkafka.problems, (java.problems, rdkafka.problems)
    assert java.exit_code == 0 and java.done, (java.exit_code, java.stderr())
    # each fault struck while both producers were still running
    assert all(0 < ended < TRANSACTIONS for ends in during.values() for ended in ends), during

    wait_healthy(cluster, topic=TOPIC, partitions=PARTITIONS)  # every replica caught up

    def views(c: Any) -> tuple[dict[int, set[int]], list[tuple[int, int, list[tuple[int, bytes]], int]]]:
        isr = {p: set(c.isr(TOPIC, p)) for p in range(PARTITIONS)}
        return isr, [(b.node_id, p, *committed_view(b.core.replicas.partitions[(TOPIC, p)].log.batches()))
                     for b in c.brokers.values() for p in range(PARTITIONS)]
    isr, logs = cluster.inspect(views)
    for node, p, records, still_open in logs:
        assert still_open == 0, f"broker {node}'s log of {TOPIC}-{p} has {still_open} records in open transactions"
        history.replica_log(node, p, records)
    visible = sum(len(records) for node, _, records, _ in logs if node == logs[0][0])
    read_group(bootstrap, history, visible, topic=TOPIC, group="txn-readers")
    result = check(history, isr=isr)
    say(result.summary())
    if not result.valid:
        say(around(cluster, [(f.partition, f.offset) for f in result.findings if f.offset is not None]))
    for fault, times in faults.items():
        say(f"{fault}: new leader after {times['failover']:.2f} s, back in every ISR "
            f"{times['isr']:.2f} s after its restart; transactions ended when it struck: {during[fault]}")
    assert result.valid, result.summary()
    committed = sum(p.outcomes["commit"] for p in producers)
    assert result.committed_txns == committed and result.aborted_txns == 2 * TRANSACTIONS - committed
    assert result.unknown_txns == 0 and result.aborted_visible == 0
    assert result.present == result.acknowledged == committed * RECORDS == visible
    assert result.reads == visible and result.duplicate_reads == 0 and result.unread == 0
    # most transactions end as meant: the faults turn only a few commits into aborts
    assert committed >= 0.4 * TRANSACTIONS * 2, [p.turned for p in producers]
