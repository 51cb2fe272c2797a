"""What the broker benchmarks share: starting a peer broker (or cluster) in its own process,
its CPU time, and timing confluent-kafka's produce and consume against it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

PEERS = os.environ.get("KPROTO_PEERS", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "peers"))


def start(peer: str, tmp: str, brokers: int = 1) -> tuple[subprocess.Popen, str]:
    """Start ``peer`` (kproto, tansu or mock) and return the process and its bootstrap list.
    ``brokers`` > 1: ``kproto cluster`` or a mock cluster of that many brokers."""
    ready = None
    if peer == "kproto" and brokers > 1:
        cmd = [sys.executable, "-m", "kproto", "cluster", "--brokers", str(brokers),
               "--data", os.path.join(tmp, "data")]
        prefix, ready = "listening on ", "ready"
    elif peer == "kproto":
        cmd = [sys.executable, "-m", "kproto", "broker", "--data", os.path.join(tmp, "data")]
        prefix = "listening on "
    elif peer == "tansu":
        cmd = [sys.executable, os.path.join(PEERS, "tansu.py"), "run"]
        prefix = "BOOTSTRAP "
    else:
        cmd = [sys.executable, os.path.join(PEERS, "mock_cluster.py"), "--brokers", str(brokers),
               "--lifetime", "300"]
        prefix = "BOOTSTRAP "
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20 + 10 * brokers
    assert proc.stdout is not None
    addresses: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            addresses.append(line[len(prefix):].split()[0])
            if ready is None:
                return proc, addresses[0]
        elif ready is not None and line.strip() == ready and addresses:
            return proc, ",".join(addresses)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"{peer} did not start")


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


def bench_produce(bootstrap: str, n: int, size: int, topic: str, warm: bool = True, pid: int = 0,
                  replication_factor: int = 1) -> tuple[float, list[float], float]:
    """Produce ``n`` records of ``size`` bytes to partition 0 of ``topic`` (created with
    ``replication_factor`` when the broker has CreateTopics), acks=all, linger.ms 5.
    Returns records/s until flush, the sorted delivery latencies (s) and the broker's CPU
    seconds per million records (NaN without ``pid``)."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    topics = [topic, topic + "-warmup"] if warm else [topic]
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(t, 1, replication_factor) for t in topics]).values():
            f.result(10)
    except Exception:
        pass  # the mock has no CreateTopics: it auto-creates
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "queue.buffering.max.messages": 1_000_000})
    if warm:
        # steady state, as JMH measures after warm-up: the first requests of a fresh process
        # cost a Python broker compiles and first-touch work (~100 ms), which would otherwise
        # hold up the first linger batches and set the p99 (--cold measures that)
        for _ in range(20_000):
            p.produce(topic + "-warmup", b"w" * size, partition=0)
        p.flush(30)
    value = b"x" * size
    lat: list[float] = []
    cpu0 = cpu_seconds(pid) if pid else float("nan")
    t0 = time.perf_counter()
    for i in range(n):
        sent = time.perf_counter()
        while True:
            try:
                p.produce(topic, value, partition=0,
                          on_delivery=lambda err, msg, sent=sent: lat.append(time.perf_counter() - sent))
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush(60)
    produce_s = time.perf_counter() - t0
    # the broker's CPU per million records produced: what it takes from the client on a
    # shared machine, steadier than throughput while other work runs
    cpu_per_m = (cpu_seconds(pid) - cpu0) * 1e6 / n if pid else float("nan")
    lat.sort()
    return n / produce_s, lat, cpu_per_m


def bench(bootstrap: str, n: int, size: int, topic: str, warm: bool = True,
          pid: int = 0) -> tuple[float, float, float, float]:
    """:func:`bench_produce`, then consume the ``n`` records back: produce records/s, p99
    delivery latency (ms), consume records/s, broker CPU seconds per million records."""
    import confluent_kafka as ck

    produce_rate, lat, cpu_per_m = bench_produce(bootstrap, n, size, topic, warm, pid)
    p99 = percentile(lat, 0.99) * 1000
    # a local queue big enough for all records: with the default (100,000) librdkafka pauses
    # fetching for fetch.queue.backoff.ms (1 s) whenever a fast broker fills it, which
    # measures the client's backoff, not the broker
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                     "queued.min.messages": max(n, 100_000) + 1})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got = 0
    t0 = time.perf_counter()
    deadline = time.monotonic() + 60
    while got < n and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(10000, 1.0) if m.error() is None)
    consume_s = time.perf_counter() - t0
    c.close()
    return produce_rate, p99, got / consume_s, cpu_per_m
