"""kproto's broker against Apache Kafka itself, tansu and librdkafka's mock cluster: produce
and consume throughput, produce latency, the broker's CPU and memory, long-poll latency and
start-up time, in one run (each broker in its own process, 127.0.0.1).

    python benchmarks/bench_broker.py [--peers kproto,apache,tansu,mock] [--rounds 3]
        [--records 200000] [--sizes 110,1024] [--acks 1,all] [--partitions 1,32]
        [--clients confluent,java] [--long-poll 100]

``apache`` is Apache Kafka (kproto.testing.apache's release, 4.4.0) as one combined-mode
node, its JVM run as Kafka's start script runs it (G1, 1 GiB heap), the test harness's
settings (faster group joins and broker fencing: nothing on the produce/fetch path).

Rows: each client x acks x record size x partitions, a fresh topic each. ``confluent``:
confluent-kafka produces ``--records`` records (linger.ms 5; one partition: partition 0
named, more: librdkafka's sticky partitioner), after a warm-up of 20,000 records to another
topic (``--cold``: none); records/s until flush and the p50/p99/p99.9 of produce() to the
delivery report (so the wait in the client's queue while the broker falls behind is in
it), then reads them back (assigned from the beginning), records/s (``--consume-runs``
reads, the median). ``java``: Kafka's own
ProducerPerformance and ConsumerPerformance tools (the Java client 4.4.0 with its defaults,
C2 on), their own figures (the consumer's fetch phase). The broker's CPU seconds per
million records (user + system from /proc, the JVM's for Apache Kafka; with the Java tools
their JVM start-up is inside the window), and the producing client's (confluent-kafka: this
process over the measured records; the Java tool: its process, start-up included): where the
client and the broker share two cores, the client's CPU per record decides the rows it
saturates. Per broker: its peak RSS (VmHWM) over the round,
the seconds from its process start to its first answered ApiVersions, and the long-poll
latency: produce() (acks=1, linger.ms 0) to a waiting consumer's receipt (median, p99).

With ``--rounds N`` the peers take turns N times (each round a fresh broker) and the median
of each figure is reported: the clients and the broker share this machine's cores, so one
run of each moves by 10-20%.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from typing import Callable, Optional

from _bench_support import (bench_consume, bench_produce, java_consume, java_produce, long_poll_latency,
                            percentile, rss_mb, serve)

Row = tuple[str, str, int, int]  # client, acks, size, partitions
ROW_FIGURES = ("produce", "p50", "p99", "p999", "cpu_p", "consume", "cpu_c", "client_p")
PEER_FIGURES = ("start_s", "rss_mb", "poll_p50", "poll_p99")


def run_row(bootstrap: str, pids: list[int], row: Row, n: int, warm: bool,
            consume_runs: int = 1) -> dict[str, float]:
    """One row's figures against the broker at ``bootstrap``; the records are read back
    ``consume_runs`` times (the median of the reads' rates and CPU)."""
    client, acks, size, partitions = row
    topic = f"t-{client}-{acks}-{size}-{partitions}"

    def read_back(read: Callable[[], tuple[float, float]]) -> tuple[float, float]:
        reads = [read() for _ in range(consume_runs)]
        return median([r for r, _ in reads]), median([c for _, c in reads])

    if client == "confluent":
        rate, lat, cpu_p, client_p = bench_produce(bootstrap, n, size, topic, warm, acks=acks,
                                         partitions=partitions, pids=pids)
        consume, cpu_c = read_back(lambda: bench_consume(bootstrap, n, topic, partitions, pids))
        return {"produce": rate, "p50": percentile(lat, 0.5) * 1000, "p99": percentile(lat, 0.99) * 1000,
                "p999": percentile(lat, 0.999) * 1000, "cpu_p": cpu_p, "consume": consume, "cpu_c": cpu_c,
                "client_p": client_p}
    from _bench_support import create_topics

    create_topics(bootstrap, {topic: partitions})
    if warm:
        java_produce(bootstrap, 20_000, size, topic + "-warmup", acks)
    prod = java_produce(bootstrap, n, size, topic, acks, pids)
    def java_read() -> tuple[float, float]:
        got = java_consume(bootstrap, n, topic, pids)
        return got["rate"], got["cpu"]

    consume, cpu_c = read_back(java_read)
    return {"produce": prod["rate"], "p50": prod["p50"], "p99": prod["p99"], "p999": prod["p999"],
            "cpu_p": prod["cpu"], "consume": consume, "cpu_c": cpu_c, "client_p": prod["client_cpu"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--sizes", default="110", help="record value sizes, comma-separated (e.g. 110,1024)")
    ap.add_argument("--size", type=int, help="one record size (the same as --sizes N)")
    ap.add_argument("--acks", default="all", help="acks settings, comma-separated (1,all)")
    ap.add_argument("--partitions", default="1", help="partition counts, comma-separated (1,32)")
    ap.add_argument("--clients", default="confluent", help="confluent and/or java (Kafka's perf tools)")
    ap.add_argument("--peers", default="kproto,tansu,mock", help="kproto, apache, tansu, mock")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--long-poll", type=int, default=100, metavar="N",
                    help="long-poll samples per broker (0: not measured)")
    ap.add_argument("--cold", action="store_true", help="no warm-up produce before measuring")
    ap.add_argument("--consume-runs", type=int, default=3, metavar="N",
                    help="read each row's records back N times, the median (default 3: one read of "
                         "200,000 records lasts under a second, and moves by 20-30%% from run to run)")
    args = ap.parse_args()
    sizes = [args.size] if args.size else [int(s) for s in args.sizes.split(",")]
    rows: list[Row] = list(itertools.product(args.clients.split(","), args.acks.split(","), sizes,
                                             [int(p) for p in args.partitions.split(",")]))
    peers = args.peers.split(",")
    runs: dict[tuple[str, Row], list[dict[str, float]]] = {}
    per_peer: dict[str, list[dict[str, float]]] = {}
    for r in range(args.rounds):
        for peer in peers:
            with tempfile.TemporaryDirectory() as tmp, serve(peer, tmp) as broker:
                figures = {"start_s": broker.first_answer_s}
                print(f"round {r + 1} {peer}: first request answered {broker.first_answer_s:.2f} s "
                      f"after its process started", flush=True)
                for row in rows:
                    try:
                        got = run_row(broker.bootstrap, broker.pids, row, args.records, not args.cold,
                                      args.consume_runs)
                    except Exception as e:  # a peer without groups or CreateTopics, for one
                        print(f"  {row_name(row)}: failed ({type(e).__name__}: {str(e)[:300]})", flush=True)
                        continue
                    runs.setdefault((peer, row), []).append(got)
                    print(f"  {peer:7s} {row_line(row, got)}", flush=True)
                if args.long_poll:
                    try:
                        lat = long_poll_latency(broker.bootstrap, "long-poll", args.long_poll)
                        figures["poll_p50"] = percentile(lat, 0.5) * 1000
                        figures["poll_p99"] = percentile(lat, 0.99) * 1000
                        print(f"  long poll: median {figures['poll_p50']:.2f} ms, p99 {figures['poll_p99']:.2f} ms",
                              flush=True)
                    except Exception as e:
                        print(f"  long poll failed ({type(e).__name__}: {e})", flush=True)
                figures["rss_mb"] = rss_mb(broker.pids, peak=True)
                print(f"  peak RSS {figures['rss_mb']:.0f} MB", flush=True)
                per_peer.setdefault(peer, []).append(figures)
    report(runs, per_peer, rows, peers, args)


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def report(runs: dict[tuple[str, Row], list[dict[str, float]]], per_peer: dict[str, list[dict[str, float]]],
           rows: list[Row], peers: list[str], args: argparse.Namespace) -> None:
    med = {key: {f: median([r[f] for r in rs]) for f in ROW_FIGURES} for key, rs in runs.items()}
    peer_med = {p: {f: median([r.get(f, float("nan")) for r in rs]) for f in PEER_FIGURES}
                for p, rs in per_peer.items()}
    print(f"\n{args.records:,} records per row, median of {args.rounds} interleaved round(s):")
    for row in rows:
        for peer in peers:
            if (peer, row) in med:
                print(f"  {peer:7s} {row_line(row, med[(peer, row)])}")
    for peer in peers:
        if peer in peer_med:
            f = peer_med[peer]
            print(f"  {peer:7s} first answer {f['start_s']:6.2f} s  peak RSS {f['rss_mb']:6.0f} MB  "
                  f"long poll median {f['poll_p50']:6.2f} ms p99 {f['poll_p99']:6.2f} ms")
    base = "apache" if "apache" in peers else None
    for other in [p for p in peers if p != "kproto"]:
        if "kproto" not in peers:
            break
        print(f"\nkproto / {other}" + (" (targets: throughput >= 1, p99 <= 1, CPU < 1)" if other == base else ""))
        for row in rows:
            k, o = med.get(("kproto", row)), med.get((other, row))
            if k and o:
                print(f"  {row_name(row):28s} produce x{ratio(k['produce'], o['produce'])}  "
                      f"p99 x{ratio(k['p99'], o['p99'])}  consume x{ratio(k['consume'], o['consume'])}  "
                      f"CPU produce x{ratio(k['cpu_p'], o['cpu_p'])}  consume x{ratio(k['cpu_c'], o['cpu_c'])}")
        k2, o2 = peer_med.get("kproto"), peer_med.get(other)
        if k2 and o2:
            print(f"  first answer x{ratio(k2['start_s'], o2['start_s'])}  peak RSS x{ratio(k2['rss_mb'], o2['rss_mb'])}"
                  f"  long poll median x{ratio(k2['poll_p50'], o2['poll_p50'])}")


def ratio(a: float, b: Optional[float]) -> str:
    return f"{a / b:.2f}" if b else "-"


def row_name(row: Row) -> str:
    client, acks, size, partitions = row
    return f"{client:9s} acks={acks:3s} {size:5d} B {partitions:2d} p"


def row_line(row: Row, f: dict[str, float]) -> str:
    return (f"{row_name(row)}  produce {f['produce']:9,.0f} rec/s  p50/p99/p999 {f['p50']:6.1f} "
            f"{f['p99']:6.1f} {f['p999']:6.1f} ms  consume {f['consume']:9,.0f} rec/s  "
            f"broker CPU s/M rec: produce {f['cpu_p']:5.2f} consume {f['cpu_c']:5.2f}  "
            f"client CPU s/M produce {f['client_p']:5.2f}")


if __name__ == "__main__":
    main()
