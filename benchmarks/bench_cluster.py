"""kproto's multi-broker cluster under confluent-kafka: how long produce stalls when a leader
dies abruptly, and what replication costs produce throughput.

    python benchmarks/bench_cluster.py [--records 200000] [--size 110] [--rounds 3] [--trials 3]
                                       [--peers kproto,mock] [--skip failover|throughput]

Failover: a fresh in-process :class:`kproto.broker.Cluster` per trial (3 brokers, 1
controller), a topic of ``--partitions`` partitions with RF=3; an idempotent acks=all producer
keeps sending to the partitions led by one broker (explicit partition), which is then
stopped as kill -9 would. Measured: from the stop to the first delivery report without error
of a record sent after it to one of those partitions; also when the controller had moved
their leadership. Run with Kafka's broker.session.timeout.ms/broker.heartbeat.interval.ms
(9000/2000) and with a short setting (``--short-session``, default 2000/250); median and max.

Throughput: ``kproto cluster --brokers 3`` in its own process (its Python does not share a
GIL with the client), a topic with RF=1 and one with RF=3 (each after its own warm-up, the
order alternating between rounds); records/s, p50 and p99 delivery latency, the cluster's CPU
per million records, and RF=3/RF=1. As in bench_broker.py the latency runs from produce() to
the delivery report, so it includes the wait in the client's queue while the cluster falls
behind; on a shared machine the CPU figure is the steadiest of the three. Peer: librdkafka's
mock cluster of 3 brokers, whose auto-created topics have RF=3 (an in-memory C mock that
does not replicate between brokers over the network: a floor for the client's own cost, not
a like-for-like cluster).
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import math
import signal
import statistics
import subprocess
import tempfile
import time
from typing import Callable

from _bench_support import bench_produce, percentile, start

FAILOVER_TOPIC = "failover"


async def failover_trial(session_ms: int, heartbeat_ms: int, partitions: int,
                         timeout: float) -> tuple[float, float]:
    """One abrupt leader death on a fresh cluster: seconds from the stop to the controller's
    new leaders of the dead broker's partitions, and to the first successful delivery."""
    import confluent_kafka as ck

    from kproto.broker import Cluster
    from kproto.client.protocol import KafkaConnectionError

    loop = asyncio.get_running_loop()
    # the surviving nodes' connects to the dead broker fail, as they should; asyncio would
    # print every such failure of a task nobody awaited
    loop.set_exception_handler(
        lambda loop, ctx: None if isinstance(ctx.get("exception"), KafkaConnectionError)
        else loop.default_exception_handler(ctx))
    with tempfile.TemporaryDirectory() as tmp:
        async with Cluster(brokers=3, controllers=1, data_dir=tmp, broker_session_timeout_ms=session_ms,
                           broker_heartbeat_interval_ms=heartbeat_ms) as cluster:
            await cluster.create_topic(FAILOVER_TOPIC, partitions, 3)
            victim = cluster.leader(FAILOVER_TOPIC, 0)
            orphaned = [p for p in range(partitions) if cluster.leader(FAILOVER_TOPIC, p) == victim]
            # log_level 2: librdkafka's connection-refused errors about the dead broker are expected
            producer = ck.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True,
                                    "acks": "all", "linger.ms": 5, "log_level": 2})
            stopped_at = 0.0
            delivered: list[float] = []

            def on_delivery(err: object, msg: object, sent: float) -> None:
                if err is None and sent >= stopped_at:
                    delivered.append(time.perf_counter())

            async def send_until(done: Callable[[], bool], deadline: float) -> None:
                while not done() and time.perf_counter() < deadline:
                    sent = time.perf_counter()
                    for p in orphaned:
                        producer.produce(FAILOVER_TOPIC, b"f" * 110, partition=p,
                                         on_delivery=functools.partial(on_delivery, sent=sent))
                    producer.poll(0)
                    # the cluster runs on this loop: yield to it, never block in flush()
                    await asyncio.sleep(0.005)

            # steady state first: connections, producer id and metadata in place
            await send_until(lambda: bool(delivered), time.perf_counter() + 30)
            await send_until(lambda: False, time.perf_counter() + 0.5)

            delivered.clear()
            stopped_at = time.perf_counter()
            await cluster.stop(victim, abrupt=True)
            moved_at = float("nan")

            def first_delivery() -> bool:
                nonlocal moved_at
                if math.isnan(moved_at) and all(cluster.leader(FAILOVER_TOPIC, p) not in (None, victim)
                                                for p in orphaned):
                    moved_at = time.perf_counter()
                return bool(delivered)

            await send_until(first_delivery, stopped_at + timeout)
            producer.purge()
            producer.flush(0)
            if not delivered:
                raise TimeoutError(f"no delivery within {timeout} s of the leader's death")
            return moved_at - stopped_at, delivered[0] - stopped_at


def failover(args: argparse.Namespace) -> None:
    settings = [(9000, 2000), tuple(int(v) for v in args.short_session.split("/"))]
    print(f"failover: kill -9 of the leader of {FAILOVER_TOPIC}-0 (3 brokers, 1 controller, "
          f"{args.partitions} partitions, RF=3), idempotent acks=all producer sending to its partitions")
    summary = []
    for session_ms, heartbeat_ms in settings:
        moved, first = [], []
        for trial in range(1, args.trials + 1):
            m, f = asyncio.run(failover_trial(session_ms, heartbeat_ms, args.partitions, args.timeout))
            moved.append(m)
            first.append(f)
            print(f"  session {session_ms:5d} ms / heartbeat {heartbeat_ms:4d} ms  trial {trial}: "
                  f"leaders moved after {m * 1000:6.0f} ms, first delivery after {f * 1000:6.0f} ms",
                  flush=True)
        summary.append((session_ms, heartbeat_ms, moved, first))
    print(f"failover, median / max of {args.trials} trials (ms):  "
          "leaders moved   first delivery   the client's share")
    for session_ms, heartbeat_ms, moved, first in summary:
        share = [f - m for m, f in zip(moved, first)]
        print(f"  session {session_ms:5d} / heartbeat {heartbeat_ms:4d}        "
              + "   ".join(f"{statistics.median(v) * 1000:6.0f} /{max(v) * 1000:6.0f}"
                         for v in (moved, first, share)))
    print("  bound: the controller fences a broker whose last heartbeat is older than\n"
          "  broker.session.timeout.ms, so between (session - heartbeat interval) and session after\n"
          "  its death, and in the same step moves its leaderships to in-sync followers (leaders\n"
          "  moved). The client's share follows: librdkafka re-reads the metadata of topics with an\n"
          "  unavailable leader on a one-second timer, and the idempotent producer drains what was\n"
          "  in flight to the old leader before sending to the new one (seen with debug=metadata,eos).")


def throughput_round(peer: str, n: int, size: int,
                     order: list[int]) -> dict[tuple[str, int], tuple[float, ...]]:
    """One fresh 3-broker ``peer`` process; produce figures per replication factor in ``order``."""
    out: dict[tuple[str, int], tuple[float, ...]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        proc, bootstrap = start(peer, tmp, brokers=3)
        try:
            for rf in order:
                topic = f"rf{rf}"
                rate, lat, cpu = bench_produce(bootstrap, n, size, topic, pid=proc.pid, replication_factor=rf)
                replicas = replication_of(bootstrap, topic)
                if replicas != rf:
                    raise RuntimeError(f"{peer}: {topic} has {replicas} replicas, not {rf}")
                out[(peer, rf)] = (rate, percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000, cpu)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
    return out


def replication_of(bootstrap: str, topic: str) -> int:
    """Replicas of partition 0 of ``topic`` in the broker's metadata."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return len(md.topics[topic].partitions[0].replicas)


def throughput(args: argparse.Namespace) -> None:
    runs: dict[tuple[str, int], list[tuple[float, ...]]] = {}
    for r in range(args.rounds):
        for peer in args.peers.split(","):
            # the mock's auto-created topics are RF=3 with 3 brokers: no RF=1 topic there
            rfs = [1, 3] if peer == "kproto" else [3]
            for key, figures in throughput_round(peer, args.records, args.size,
                                                 rfs if r % 2 == 0 else rfs[::-1]).items():
                runs.setdefault(key, []).append(figures)
                print(line(key, figures), flush=True)
    results = {key: tuple(statistics.median(f[i] for f in fs) for i in range(4)) for key, fs in runs.items()}
    print(f"produce, acks=all, {args.size}-byte values, {args.records:,} records, 3 brokers"
          + (f", median of {args.rounds} rounds" if args.rounds > 1 else "") + ":")
    for key, figures in results.items():
        print(line(key, figures))
    if ("kproto", 1) in results and ("kproto", 3) in results:
        one, three = results[("kproto", 1)], results[("kproto", 3)]
        print(f"kproto RF=3 / RF=1: produce {ratio(three[0], one[0])}, p50 {ratio(three[1], one[1])}, "
              f"p99 {ratio(three[2], one[2])}, cluster CPU {ratio(three[3], one[3])}")
    if ("kproto", 3) in results and ("mock", 3) in results:
        k, m = results[("kproto", 3)], results[("mock", 3)]
        print(f"kproto / mock at RF=3: produce {ratio(k[0], m[0])}, p50 {ratio(k[1], m[1])}, "
              f"p99 {ratio(k[2], m[2])}")


def ratio(a: float, b: float) -> str:
    """``a / b`` as ``x1.23``; ``x-`` when ``b`` is 0 (CPU under one clock tick at small --records)."""
    return f"x{a / b:.2f}" if b else "x-"


def line(key: tuple[str, int], figures: tuple[float, ...]) -> str:
    (peer, rf), (rate, p50, p99, cpu) = key, figures
    return (f"{peer:6s} RF={rf}  produce {rate:9,.0f} rec/s  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms"
            f"  cluster CPU {cpu:5.2f} s per M records")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=110)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--trials", type=int, default=3, help="failover trials per setting, each a fresh cluster")
    ap.add_argument("--partitions", type=int, default=6, help="partitions of the failover topic")
    ap.add_argument("--short-session", default="2000/250", metavar="SESSION/HEARTBEAT",
                    help="the short broker.session.timeout.ms/broker.heartbeat.interval.ms (ms)")
    ap.add_argument("--timeout", type=float, default=60.0, help="give up a failover trial after this (s)")
    ap.add_argument("--peers", default="kproto,mock", help="throughput: kproto and/or mock")
    ap.add_argument("--skip", choices=("failover", "throughput"))
    args = ap.parse_args()
    if args.skip != "failover":
        failover(args)
    if args.skip != "throughput":
        throughput(args)


if __name__ == "__main__":
    main()
