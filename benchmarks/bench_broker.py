"""Produce and consume throughput of confluent-kafka against kproto's broker, tansu and
librdkafka's mock cluster, in one run (each broker in its own process, 127.0.0.1).

    python benchmarks/bench_broker.py [--records 200000] [--size 110] [--peers kproto,tansu,mock] [--rounds 3]

Produce: acks=all, linger.ms 5, one partition, after a warm-up of 20,000 records to another
topic (``--cold``: none); records/s until flush, and the p99 of the time from produce() to
the delivery report. Consume: assign from the beginning, records/s
until all are read. With ``--rounds N`` the peers take turns N times (each round a fresh
broker) and the median of each figure is reported: the client and the broker share this
machine's two cores, so one run of each moves by 10-20%.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

PEERS = os.environ.get("KPROTO_PEERS", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "peers"))


def start(peer: str, tmp: str) -> tuple[subprocess.Popen, str]:
    if peer == "kproto":
        cmd = [sys.executable, "-m", "kproto", "broker", "--data", os.path.join(tmp, "data")]
        prefix = "listening on "
    elif peer == "tansu":
        cmd = [sys.executable, os.path.join(PEERS, "tansu.py"), "run"]
        prefix = "BOOTSTRAP "
    else:
        cmd = [sys.executable, os.path.join(PEERS, "mock_cluster.py"), "--brokers", "1", "--lifetime", "300"]
        prefix = "BOOTSTRAP "
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return proc, line[len(prefix):].split()[0]
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


def bench(bootstrap: str, n: int, size: int, topic: str, warm: bool = True,
          pid: int = 0) -> tuple[float, float, float, float]:
    import confluent_kafka as ck

    topics = [topic, topic + "-warmup"] if warm else [topic]
    try:
        admin = ck.admin.AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([ck.admin.NewTopic(t, 1, 1) for t in topics]).values():
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
    p99 = lat[int(len(lat) * 0.99)] * 1000 if lat else float("nan")
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
    return n / produce_s, p99, got / consume_s, cpu_per_m


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=110)
    ap.add_argument("--peers", default="kproto,tansu,mock")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--cold", action="store_true", help="no warm-up produce before measuring")
    args = ap.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {}
    for _ in range(args.rounds):
        for peer in args.peers.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                proc, bootstrap = start(peer, tmp)
                try:
                    runs.setdefault(peer, []).append(bench(bootstrap, args.records, args.size, "bench",
                                                                   warm=not args.cold, pid=proc.pid))
                finally:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
            print(line(peer, runs[peer][-1]), flush=True)
    results = {peer: tuple(statistics.median(r[i] for r in rs) for i in range(4)) for peer, rs in runs.items()}
    if args.rounds > 1:
        print(f"median of {args.rounds} rounds:")
        for peer, figures in results.items():
            print(line(peer, figures))
    if "kproto" in results:
        k = results["kproto"]
        for peer, (prod, p99, cons, cpu) in results.items():
            if peer != "kproto":
                print(f"kproto / {peer}: produce x{k[0] / prod:.2f}, p99 x{k[1] / p99:.2f}, "
                      f"consume x{k[2] / cons:.2f}, broker CPU x{k[3] / cpu:.2f}")


def line(peer: str, figures: tuple[float, ...]) -> str:
    prod, p99, cons, cpu = figures
    return (f"{peer:8s} produce {prod:10,.0f} rec/s  p99 {p99:7.1f} ms  consume {cons:10,.0f} rec/s"
            f"  broker CPU {cpu:5.2f} s per M records produced")


if __name__ == "__main__":
    main()
