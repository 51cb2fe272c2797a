"""Issue 17's acceptance run with confluent-kafka: an idempotent acks=all producer writes while
leaders are killed, isolated and cut from a follower, and a leader is shut down; every
acknowledged record must then be on every in-sync replica exactly once and in order, and a
consumer group must read each exactly once (the history checker's findings are printed).
The Java client (``java/KprotoChaosProducer.java``, see ``java_interop``) writes alongside a
confluent-kafka producer through the same faults and a failover of the controller quorum."""
from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from typing import IO, Optional

import pytest

import java_interop as jv
from kproto.testing.history_checker import History
from kproto.testing import ClusterThread

from cluster_chaos import TOPIC, controller_failover, run_chaos, unexcused_errors

ck = pytest.importorskip("confluent_kafka")


#: failover times of the runs of this session, by broker and fault
FAILOVERS: dict[str, dict[str, float]] = {}


def failover_table() -> str:
    faults = sorted({f for times in FAILOVERS.values() for f in times})
    rows = [f"{'fault':22}" + "".join(f"{name:>12}" for name in FAILOVERS)]
    for f in faults:
        rows.append(f"{f:22}" + "".join(f"{times[f]:>11.2f}s" if f in times else f"{'-':>12}"
                                        for times in FAILOVERS.values()))
    return "\n".join(rows)



def confluent_producer(name: str, pause: float = 0.001):
    """A producer of :func:`run_chaos`: an idempotent acks=all confluent-kafka producer sending
    unique values, ``pause`` seconds after each send."""
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
            time.sleep(pause)
        left = p.flush(120)
        assert left == 0, f"{left} sends still unanswered"
    return produce


@pytest.mark.kafka_cluster(brokers=3, controllers=1)
def test_confluent_producers_through_chaos(kafka_cluster: ClusterThread) -> None:
    result = run_chaos(kafka_cluster, [confluent_producer("p1"), confluent_producer("p2")],
                       failovers=FAILOVERS.setdefault("kproto", {}))
    assert_consistent(kafka_cluster, result)


def assert_consistent(target, result) -> None:
    """Nothing lost; every value once, but librdkafka's resends under a new producer epoch
    (:func:`cluster_chaos.resent_under_a_new_epoch`); the group read everything in the logs."""
    errors, resent = unexcused_errors(target, result)
    assert not errors, result.summary()
    assert result.acknowledged > 1000 and result.lost == 0 and result.duplicates == len(resent)
    # the group reads every record in the logs: the acknowledged ones, the indeterminate sends
    # that were written after all (a send whose answer the faults cut off) and the copies
    assert result.reads == result.present + result.recovered + result.duplicates
    assert result.duplicate_reads == result.duplicates


class JavaProducer:
    """A producer of :func:`run_chaos`: the Java client's idempotent acks=all producer
    (KprotoChaosProducer) in a JVM, each event it prints recorded into the history in the order
    printed, pausing ``pause_ms`` after each send. Afterwards: its exit code, whether it said
    done, what it acknowledged."""

    def __init__(self, cp: str, workdir: str, name: str, pause_ms: int = 2, limit_s: int = 300) -> None:
        self.cp, self.name, self.pause_ms, self.limit_s = cp, name, pause_ms, limit_s
        self.stop_file = os.path.join(workdir, f"{name}.stop")
        self.stderr_path = os.path.join(workdir, f"{name}.stderr")
        self.exit_code: Optional[int] = None
        self.done = False
        self.acknowledged = 0
        self.started = 0.0
        #: seconds from the JVM's start to its first acknowledgement
        self.first_ack: Optional[float] = None
        self.errors: list[str] = []
        self.problems: list[BaseException] = []

    def __call__(self, cluster: ClusterThread, history: History, stop: threading.Event) -> None:
        self.started = time.monotonic()
        with open(self.stderr_path, "w") as stderr:
            proc = subprocess.Popen(jv.command(self.cp, "KprotoChaosProducer", cluster.bootstrap,
                                               self.stop_file, self.name, str(self.limit_s),
                                               str(self.pause_ms)),
                                    stdout=subprocess.PIPE, stderr=stderr, text=True)
        assert proc.stdout is not None
        reader = threading.Thread(target=self._record, args=(proc.stdout, history))
        reader.start()
        stop.wait()
        open(self.stop_file, "w").close()
        try:
            self.exit_code = proc.wait(self.limit_s)
        except subprocess.TimeoutExpired:  # its watchdog failed: reported by the exit code
            proc.kill()
            self.exit_code = proc.wait()
        reader.join(30)

    def _record(self, stdout: IO[str], history: History) -> None:
        ops: dict[int, int] = {}
        try:
            for line in stdout:
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                kind = event["event"]
                if kind == "send":
                    ops[event["seq"]] = history.invoke_send(self.name, event["key"], event["value"])
                elif kind == "ack":
                    history.ok_send(ops[event["seq"]], event["partition"], event["offset"])
                    self.acknowledged += 1
                    if self.first_ack is None:
                        self.first_ack = time.monotonic() - self.started
                elif kind == "error":
                    # an idempotent producer's failed send may or may not have been written
                    history.info_send(ops[event["seq"]], event["error"])
                    self.errors.append(event["error"])
                elif kind == "done":
                    self.done = True
        except BaseException as exc:  # reported by the test
            self.problems.append(exc)

    def stderr(self) -> str:
        with open(self.stderr_path) as f:
            return f.read()[-8000:]


@pytest.fixture(scope="session")
def java_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return jv.classpath(str(tmp_path_factory.mktemp("java")))


@pytest.mark.kafka_cluster(brokers=3, controllers=3)
def test_java_and_confluent_producers_through_chaos(kafka_cluster: ClusterThread, java_cp: str,
                                                    tmp_path) -> None:
    # a lighter load than the confluent-only run's: the JVM, three controllers and the brokers
    # share two cores, and healing waits for every replica to catch up
    java = JavaProducer(java_cp, str(tmp_path), "j1", pause_ms=4)
    # the JVM takes about two seconds to its first acknowledgement: let it write before the faults
    result = run_chaos(kafka_cluster, [java, confluent_producer("c1", pause=0.004)], warmup=3.0,
                       faults=[controller_failover])
    print(f"the Java producer: first acknowledgement after {java.first_ack} s, "
          f"{java.acknowledged} acknowledged, {len(java.errors)} errors")
    assert not java.problems, java.problems
    assert java.exit_code == 0 and java.done, (java.exit_code, java.stderr())
    assert java.acknowledged > 500, (java.acknowledged, java.errors[:5])
    assert result.acknowledged - java.acknowledged > 500
    assert_consistent(kafka_cluster, result)


@pytest.mark.apache_kafka(nodes=3, controllers=1)
def test_confluent_producers_through_chaos_on_apache_kafka(apache_kafka_cluster) -> None:
    # the same producers, group and history checker as on kproto's cluster, with the faults on
    # processes (kill -9, SIGSTOP/SIGCONT, controlled shutdown)
    times = FAILOVERS.setdefault("apache", {})
    # a lighter load than on kproto's cluster (a send every 4 ms per producer): four JVMs share
    # the two cores with the producers, and each heal waits for the restarted broker to catch up
    result = run_chaos(apache_kafka_cluster, [confluent_producer("p1", pause=0.004),
                                              confluent_producer("p2", pause=0.004)],
                       failovers=times)
    print("failover (fault to the partition's new leader in Metadata):\n" + failover_table())
    assert_consistent(apache_kafka_cluster, result)
    assert set(times) == {"kill -9", "isolated (SIGSTOP)", "controlled shutdown"}
