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
import signal
import statistics
import subprocess
import tempfile

from _bench_support import bench, start


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
