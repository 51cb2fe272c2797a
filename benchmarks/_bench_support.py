"""What the broker benchmarks share: starting a peer broker (or cluster) in its own process
(Apache Kafka through :mod:`kproto.testing.apache`), its CPU time and memory, and timing
confluent-kafka's and the Java client's perf tools' produce and consume against it."""
from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional

from kproto.testing.ports import free_port

PEERS = os.environ.get("KPROTO_PEERS", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "peers"))


#: Apache Kafka's JVM as ``kafka-server-start.sh`` runs it (its KAFKA_HEAP_OPTS and
#: KAFKA_JVM_PERFORMANCE_OPTS), the heap 1 GiB: the test harness's own options (C1 only, a
#: 512 MB serial-collector heap) suit tests, not a throughput comparison.
KAFKA_JVM = ("-Xmx1g", "-Xms1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true")
#: The Java perf tools' JVM as ``kafka-run-class.sh`` runs them (C2 on: they run for seconds).
TOOL_JVM = ("-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true")


@dataclass
class Served:
    """A running peer: its bootstrap list, the pid whose CPU and memory count as the broker's
    (a JVM's for Apache Kafka), the seconds from its process start to the first answered
    request (ApiVersions), and for ``apache`` the :class:`~kproto.testing.apache.ApacheKafka`."""

    bootstrap: str
    pid: int
    first_answer_s: float
    kafka: Any = None
    pids: list[int] = field(default_factory=list)   #: every broker JVM (apache, brokers > 1)


def _answers(host: str, port: int) -> bool:
    """Whether ``host:port`` answers ApiVersions without error now."""
    from kproto.codecs import request as request_codec
    from kproto.errors import DecodeError
    from kproto.testing.apache import _request

    try:
        return _request(host, port, request_codec(18).cls(), 0, timeout=1.0).error_code == 0
    except (OSError, DecodeError):
        return False


def _first_answer(host: str, port: int, t0: float, alive: Callable[[], bool], timeout: float) -> float:
    """Seconds from ``t0`` until ``host:port`` first answers ApiVersions (probed every 5 ms)."""
    deadline = t0 + timeout
    while time.perf_counter() < deadline and alive():
        if _answers(host, port):
            return time.perf_counter() - t0
        time.sleep(0.005)
    raise RuntimeError(f"nothing answered on {host}:{port} within {timeout:.0f} s")


@contextlib.contextmanager
def serve(peer: str, tmp: str, brokers: int = 1,
          config: Optional[Mapping[str, Any]] = None) -> Iterator[Served]:
    """Run ``peer`` (kproto, apache, tansu or mock) for the ``with`` block; stop it after.
    ``apache``: Apache Kafka (:data:`kproto.testing.apache.DEFAULT_VERSION`, combined mode,
    ``brokers`` nodes, the harness's test settings and ``config``) in JVMs run as Kafka's
    start script runs them (:data:`KAFKA_JVM`)."""
    if peer == "apache":
        from kproto.testing.apache import ApacheKafka

        kafka = ApacheKafka(os.path.join(tmp, "kafka"), brokers, config=config, jvm_options=KAFKA_JVM)
        kafka.format()  # Kafka's storage tool, a JVM of its own: not the broker's start-up
        first = kafka.nodes[kafka.broker_ids[0]]
        took: list[float] = []
        t0 = time.perf_counter()
        # the nodes are started from this thread: a JVM dies with the thread that started it
        # (the harness's parent-death signal), so the probe runs beside it in another
        probe = threading.Thread(target=lambda: took.append(
            _first_answer(kafka.host, first.port, t0, lambda: not took, 180)), daemon=True)
        probe.start()
        try:
            kafka.start_all(timeout=180)
            probe.join(180)
            pids = [kafka.nodes[b].proc.pid for b in kafka.broker_ids]  # type: ignore[union-attr]
            yield Served(kafka.bootstrap, pids[0], took[0] if took else float("nan"), kafka, pids)
        finally:
            kafka.close()
        return
    proc, bootstrap, took = start(peer, tmp, brokers, timed=True)
    try:
        yield Served(bootstrap, proc.pid, took, pids=[proc.pid])
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def start(peer: str, tmp: str, brokers: int = 1, timed: bool = False) -> Any:
    """Start ``peer`` (kproto, tansu or mock) and return the process and its bootstrap list
    (with ``timed``, also the seconds from its start to the first answered ApiVersions).
    ``brokers`` > 1: ``kproto cluster`` or a mock cluster of that many brokers."""
    ready: object = None
    port = 0
    t0 = time.perf_counter()
    if peer == "kproto" and brokers > 1:
        # one 'listening on' line per broker once every broker is registered and unfenced
        cmd = [sys.executable, "-m", "kproto", "cluster", "--brokers", str(brokers),
               "--data", os.path.join(tmp, "data")]
        prefix, ready = "listening on ", brokers
    elif peer == "kproto":
        port = free_port()  # known before the start, so the first answer can be awaited
        cmd = [sys.executable, "-m", "kproto", "broker", "--data", os.path.join(tmp, "data"),
               "--port", str(port)]
        prefix = "listening on "
    elif peer == "tansu":
        cmd = [sys.executable, os.path.join(PEERS, "tansu.py"), "run"]
        prefix = "BOOTSTRAP "
    else:
        cmd = [sys.executable, os.path.join(PEERS, "mock_cluster.py"), "--brokers", str(brokers),
               "--lifetime", "300"]
        prefix = "BOOTSTRAP "
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    took = _first_answer("127.0.0.1", port, t0, lambda: proc.poll() is None, 60) if port else 0.0
    deadline = time.monotonic() + 20 + 10 * brokers
    assert proc.stdout is not None
    addresses: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            addresses.append(line[len(prefix):].split()[0])
            if ready is None or (isinstance(ready, int) and len(addresses) == ready):
                break
        elif ready is not None and line.strip() == ready and addresses:
            break
        if not line and proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"{peer} did not start")
    else:
        proc.kill()
        raise RuntimeError(f"{peer} did not start")
    if not port:  # the port is known from its first line only: time to that line and an answer
        host, _, p = addresses[0].split(",")[0].rpartition(":")  # the mock prints a list
        took = _first_answer(host, int(p), t0, lambda: proc.poll() is None, 60)
    bootstrap = ",".join(addresses)
    return (proc, bootstrap, took) if timed else (proc, bootstrap)


def children_cpu_seconds() -> float:
    """User + system CPU time of the child processes this one has waited for (a tool run
    with :func:`run_java_tool` counts once it has exited)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of ``pid`` and the processes it started (tansu.py runs
    the tansu binary as a child), from Linux's /proc."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue  # gone meanwhile
    return total


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of the sorted ``ordered``; NaN when empty."""
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)] if ordered else float("nan")


def rss_mb(pids: list[int], peak: bool = False) -> float:
    """Resident memory (MB) of ``pids`` and the processes they started, now or (``peak``)
    the most each ever had (VmHWM), summed; from Linux's /proc."""
    key = "VmHWM:" if peak else "VmRSS:"
    total, todo = 0, list(pids)
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith(key))
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, StopIteration):
            continue
    return total / 1024


def create_topics(bootstrap: str, topics: Mapping[str, int], replication_factor: int = 1,
                  config: Optional[Mapping[str, str]] = None) -> None:
    """Create ``topics`` (name: partitions) with confluent-kafka's admin client, ``config``
    their topic configs, and wait until each partition has a leader; the mock has no
    CreateTopics (it auto-creates)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        for f in admin.create_topics([NewTopic(t, n, replication_factor, config=dict(config or {}))
                                      for t, n in topics.items()]).values():
            f.result(30)
    except Exception:
        pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        if all(t in md.topics and len(md.topics[t].partitions) >= n
               and all(p.leader >= 0 for p in md.topics[t].partitions.values())
               for t, n in topics.items()):
            return
        time.sleep(0.1)


def bench_produce(bootstrap: str, n: int, size: int, topic: str, warm: bool = True, pid: int = 0,
                  replication_factor: int = 1, acks: str = "all", partitions: int = 1,
                  pids: Optional[list[int]] = None,
                  topic_config: Optional[Mapping[str, str]] = None
                  ) -> tuple[float, list[float], float, float]:
    """Produce ``n`` records of ``size`` bytes to ``topic`` (created with ``partitions`` and
    ``replication_factor`` when the broker has CreateTopics), ``acks``, linger.ms 5: one
    partition, partition 0 named; more, librdkafka's partitioner spreads them (no key: sticky
    batches, as the Java client's). Returns records/s until flush, the sorted delivery
    latencies (s), the broker's CPU seconds per million records (``pid`` and the processes
    it started, or all of ``pids``; NaN without either) and the client's (this process:
    librdkafka's threads and the Python loop feeding them)."""
    import confluent_kafka as ck

    pids = pids or ([pid] if pid else [])
    topics = [topic, topic + "-warmup"] if warm else [topic]
    create_topics(bootstrap, {t: partitions for t in topics}, replication_factor, topic_config)
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                     "queue.buffering.max.messages": 1_000_000})
    explicit = {"partition": 0} if partitions == 1 else {}
    if warm:
        # steady state, as JMH measures after warm-up: the first requests of a fresh process
        # cost a Python broker compiles and first-touch work (~100 ms), which would otherwise
        # hold up the first linger batches and set the p99 (--cold measures that)
        for _ in range(20_000):
            p.produce(topic + "-warmup", b"w" * size, **explicit)
        p.flush(30)
    value = b"x" * size
    lat: list[float] = []
    cpu0 = sum(cpu_seconds(q) for q in pids) if pids else float("nan")
    client0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(n):
        sent = time.perf_counter()
        while True:
            try:
                p.produce(topic, value, **explicit,
                          on_delivery=lambda err, msg, sent=sent: lat.append(time.perf_counter() - sent))
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(120)
    produce_s = time.perf_counter() - t0
    client_per_m = (time.process_time() - client0) * 1e6 / n
    # the broker's CPU per million records produced: what it takes from the client on a
    # shared machine, steadier than throughput while other work runs
    cpu_per_m = (sum(cpu_seconds(q) for q in pids) - cpu0) * 1e6 / n if pids else float("nan")
    lat.sort()
    return n / produce_s, lat, cpu_per_m, client_per_m


def bench_consume(bootstrap: str, n: int, topic: str, partitions: int = 1,
                  pids: Optional[list[int]] = None) -> tuple[float, float]:
    """Read the ``n`` records of ``topic`` with confluent-kafka (assigned from the beginning):
    records/s and the broker's CPU seconds per million records (NaN without ``pids``)."""
    import confluent_kafka as ck

    # a local queue big enough for all records: with the default (100,000) librdkafka pauses
    # fetching for fetch.queue.backoff.ms (1 s) whenever a fast broker fills it, which
    # measures the client's backoff, not the broker
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                     "queued.min.messages": max(n, 100_000) + 1})
    c.assign([ck.TopicPartition(topic, i, ck.OFFSET_BEGINNING) for i in range(partitions)])
    got = 0
    cpu0 = sum(cpu_seconds(q) for q in pids) if pids else float("nan")
    t0 = time.perf_counter()
    deadline = time.monotonic() + 120
    while got < n and time.monotonic() < deadline:
        # never more than are left: consume() waits out its timeout for a batch not filled
        got += sum(1 for m in c.consume(min(10000, n - got), 1.0) if m.error() is None)
    consume_s = time.perf_counter() - t0
    cpu_per_m = (sum(cpu_seconds(q) for q in pids) - cpu0) * 1e6 / n if pids else float("nan")
    c.close()
    return got / consume_s, cpu_per_m


def bench(bootstrap: str, n: int, size: int, topic: str, warm: bool = True,
          pid: int = 0) -> tuple[float, float, float, float]:
    """:func:`bench_produce` (acks=all, one partition), then consume the ``n`` records back:
    produce records/s, p99 delivery latency (ms), consume records/s, broker CPU seconds per
    million records produced."""
    produce_rate, lat, cpu_per_m, _ = bench_produce(bootstrap, n, size, topic, warm, pid)
    consume_rate, _ = bench_consume(bootstrap, n, topic)
    return produce_rate, percentile(lat, 0.99) * 1000, consume_rate, cpu_per_m


def run_java_tool(main_class: str, *args: str, timeout: float = 600) -> str:
    """Run one of Apache Kafka's tools (:data:`kproto.testing.apache.DEFAULT_VERSION`'s class
    path, :data:`TOOL_JVM`); its standard output."""
    from kproto.testing import apache

    cmd = apache._command(apache.DEFAULT_VERSION, main_class, args, TOOL_JVM)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{main_class} exited {proc.returncode}:\n{proc.stderr[-3000:]}{proc.stdout[-2000:]}")
    return proc.stdout


_PERF_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec .*?, ([\d.]+) ms avg latency, "
                        r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def java_produce(bootstrap: str, n: int, size: int, topic: str, acks: str = "all",
                 pids: Optional[list[int]] = None, props: tuple[str, ...] = ()) -> dict[str, float]:
    """Kafka's ProducerPerformance (the Java client, its defaults but ``acks``; unthrottled)
    sending ``n`` records of ``size`` bytes to ``topic``: its records/s and p50/p99/p99.9
    latency (ms, send to callback, as it measures them), the broker's CPU seconds per million
    records over the tool's run and the tool's own (``client_cpu``; both with its JVM start-up:
    upper bounds)."""
    cpu0 = sum(cpu_seconds(q) for q in pids) if pids else float("nan")
    client0 = children_cpu_seconds()
    out = run_java_tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                        "--num-records", str(n), "--record-size", str(size), "--throughput", "-1",
                        "--command-property", f"bootstrap.servers={bootstrap}", f"acks={acks}", *props)
    cpu = (sum(cpu_seconds(q) for q in pids) - cpu0) * 1e6 / n if pids else float("nan")
    client_cpu = (children_cpu_seconds() - client0) * 1e6 / n
    m = _PERF_LINE.findall(out)
    if not m:
        raise RuntimeError(f"ProducerPerformance printed no summary:\n{out[-2000:]}")
    sent, rate, _avg, _max, p50, _p95, p99, p999 = m[-1]
    if int(sent) != n:
        raise RuntimeError(f"ProducerPerformance sent {sent} of {n}")
    return {"rate": float(rate), "p50": float(p50), "p99": float(p99), "p999": float(p999), "cpu": cpu,
            "client_cpu": client_cpu}


def java_consume(bootstrap: str, n: int, topic: str, pids: Optional[list[int]] = None) -> dict[str, float]:
    """Kafka's ConsumerPerformance (the Java consumer in a group of its own) reading the ``n``
    records of ``topic``: records/s of its fetch phase (its ``fetch.nMsg.sec``: the group's
    join left out) and the broker's CPU seconds per million records over the tool's run."""
    cpu0 = sum(cpu_seconds(q) for q in pids) if pids else float("nan")
    out = run_java_tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
                        "--topic", topic, "--num-records", str(n), "--timeout", "30000")
    cpu = (sum(cpu_seconds(q) for q in pids) - cpu0) * 1e6 / n if pids else float("nan")
    lines = [line for line in out.splitlines() if line and line[0].isdigit()]
    if not lines:
        raise RuntimeError(f"ConsumerPerformance printed no figures:\n{out[-2000:]}")
    cols = [c.strip() for c in lines[-1].split(",")]
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    if int(cols[4]) < n:
        raise RuntimeError(f"ConsumerPerformance read {cols[4]} of {n}")
    return {"rate": float(cols[9]), "cpu": cpu}


def long_poll_latency(bootstrap: str, topic: str, samples: int = 100) -> list[float]:
    """Sorted seconds from a produce() (acks=1, linger.ms 0) to a consumer's receipt of that
    record, the consumer's Fetch waiting at the end of the log (fetch.wait.max.ms 1000,
    fetch.min.bytes 1) when the record is sent: the broker's answer to a waiting Fetch once
    a record arrives, plus one produce and both clients' own hand-offs (an upper bound)."""
    import random

    import confluent_kafka as ck

    create_topics(bootstrap, {topic: 1})
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-poll", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 1000, "fetch.min.bytes": 1})
    out: list[float] = []
    rng = random.Random(1)
    try:
        # one record first, read from the beginning: the consumer is then at the log's end
        p.produce(topic, b"p", partition=0)
        p.flush(30)
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                break
        for i in range(samples + 5):  # the first 5: connections settle
            time.sleep(rng.uniform(0.02, 0.05))  # a Fetch is parked at the broker meanwhile
            t = time.perf_counter()
            p.produce(topic, b"p" * 100, partition=0)
            p.poll(0)
            while True:
                m = c.poll(5.0)
                if m is None:
                    raise RuntimeError("long poll: no record within 5 s")
                if m.error() is None:
                    break
            if i >= 5:
                out.append(time.perf_counter() - t)
            p.poll(0)
    finally:
        p.flush(10)
        c.close()
    return sorted(out)
