"""kproto's multi-broker cluster under confluent-kafka: how long produce stalls when a leader
dies abruptly, and what replication costs produce throughput.

    python benchmarks/bench_cluster.py [--records 200000] [--size 110] [--rounds 3] [--trials 3]
                                       [--peers kproto,apache,mock] [--failover-peers kproto,apache]
                                       [--modes kill,controlled] [--skip failover|throughput]

With ``apache`` (Apache Kafka 4.4.0 from kproto.testing.apache, its JVMs as Kafka's start
script runs them): throughput on 3 combined-mode brokers, failover on 3 brokers and a
dedicated controller with the same session settings, one cluster per setting whose stopped
broker is started again (and waited for back in every ISR) after each trial. ``--modes
controlled`` stops the leader with a controlled shutdown (kproto's, or SIGTERM to Kafka)
instead of kill -9; each trial also reports the longest gap between deliveries.

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
import contextlib
import functools
import math
import statistics
import tempfile
import threading
import time
from typing import Callable

from _bench_support import KAFKA_JVM, bench_produce, percentile, serve

FAILOVER_TOPIC = "failover"


def stall(stopped_at: float, delivered: list[float]) -> float:
    """The longest wait for a delivery from ``stopped_at`` on: the gaps between successive
    delivery reports (of records sent after the stop) in the time order they came."""
    times = [stopped_at] + sorted(delivered)
    return max(b - a for a, b in zip(times, times[1:]))


async def failover_trial(session_ms: int, heartbeat_ms: int, partitions: int,
                         timeout: float, abrupt: bool = True) -> tuple[float, float, float]:
    """One leader stop on a fresh cluster (``abrupt``: as kill -9; else a controlled
    shutdown): seconds from the stop to the controller's new leaders of the stopped broker's
    partitions, to the first successful delivery, and the longest stall of deliveries until
    the broker is down and deliveries flow (for kill -9 the same as the first delivery)."""
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
            await cluster.create_topic(FAILOVER_TOPIC, partitions, 3, {"min.insync.replicas": "2"})
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
            stopping = asyncio.ensure_future(cluster.stop(victim, abrupt=abrupt))
            moved_at, down_at = float("nan"), float("nan")

            def first_delivery() -> bool:
                nonlocal moved_at, down_at
                if math.isnan(moved_at) and all(cluster.leader(FAILOVER_TOPIC, p) not in (None, victim)
                                                for p in orphaned):
                    moved_at = time.perf_counter()
                if math.isnan(down_at) and stopping.done():
                    down_at = time.perf_counter()
                # a controlled shutdown: the old leader may deliver until it hands over
                return bool(delivered) and delivered[-1] > down_at and not math.isnan(moved_at)

            await send_until(first_delivery, stopped_at + timeout)
            await stopping
            producer.purge()
            producer.flush(0)
            if not delivered:
                raise TimeoutError(f"no delivery within {timeout} s of the leader's stop")
            return moved_at - stopped_at, delivered[0] - stopped_at, stall(stopped_at, delivered)


def apache_failover_trial(kafka, partitions: int, timeout: float, abrupt: bool) -> tuple[float, float, float]:
    """:func:`failover_trial` on a running Apache Kafka cluster (kproto.testing.apache's
    :class:`ApacheKafka`, topic :data:`FAILOVER_TOPIC` in place with every replica in sync):
    the current leader of partition 0 is killed (SIGKILL) or shut down (SIGTERM, Kafka's
    controlled shutdown), then started again and waited for until it is back in every ISR."""
    import confluent_kafka as ck

    victim = kafka.leader(FAILOVER_TOPIC, 0)
    others = [b for b in kafka.broker_ids if b != victim]
    orphaned = [p for p in range(partitions) if kafka.leader(FAILOVER_TOPIC, p) == victim]
    producer = ck.Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True,
                            "acks": "all", "linger.ms": 5, "log_level": 2})
    stopped_at = 0.0
    delivered: list[float] = []

    def on_delivery(err: object, msg: object, sent: float) -> None:
        if err is None and sent >= stopped_at:
            delivered.append(time.perf_counter())

    def send_until(done: Callable[[], bool], deadline: float) -> None:
        while not done() and time.perf_counter() < deadline:
            sent = time.perf_counter()
            for p in orphaned:
                producer.produce(FAILOVER_TOPIC, b"f" * 110, partition=p,
                                 on_delivery=functools.partial(on_delivery, sent=sent))
            producer.poll(0.005)

    send_until(lambda: bool(delivered), time.perf_counter() + 30)
    send_until(lambda: False, time.perf_counter() + 0.5)
    delivered.clear()
    stopped_at = time.perf_counter()
    stopper = threading.Thread(target=kafka.stop, args=(victim,), kwargs={"abrupt": abrupt})
    stopper.start()
    moved_at, down_at, checked = float("nan"), float("nan"), 0.0

    def first_delivery() -> bool:
        nonlocal moved_at, down_at, checked
        now = time.perf_counter()
        if math.isnan(moved_at) and now - checked > 0.05:  # a Metadata request to a survivor
            checked = now
            try:
                if all(kafka.leader(FAILOVER_TOPIC, p, via=others[0]) not in (None, victim) for p in orphaned):
                    moved_at = now
            except OSError:
                pass
        if math.isnan(down_at) and not stopper.is_alive():
            down_at = now
        return bool(delivered) and delivered[-1] > down_at and not math.isnan(moved_at)

    try:
        send_until(first_delivery, stopped_at + timeout)
    finally:
        stopper.join()
        producer.purge()
        producer.flush(0)
    if not delivered:
        raise TimeoutError(f"no delivery within {timeout} s of the leader's stop")
    result = moved_at - stopped_at, delivered[0] - stopped_at, stall(stopped_at, delivered)
    kafka.start(victim, timeout=180)
    kafka.wait_for(lambda: all_in_sync(kafka, partitions), 120, "every replica back in sync", 0.5)
    return result


def all_in_sync(kafka, partitions: int) -> bool:
    """Whether every partition of the failover topic has all its replicas in its ISR."""
    try:
        md = kafka.metadata([FAILOVER_TOPIC])
    except OSError:
        return False
    parts = [p for t in md.topics for p in t.partitions]
    return len(parts) == partitions and all(len(p.isr_nodes) == len(p.replica_nodes) for p in parts)


def failover(args: argparse.Namespace) -> None:
    settings = [(9000, 2000), tuple(int(v) for v in args.short_session.split("/"))]
    modes = args.modes.split(",")
    print(f"failover: a stop of the leader of {FAILOVER_TOPIC}-0 (3 brokers, 1 controller, "
          f"{args.partitions} partitions, RF=3, min.insync.replicas=2), idempotent acks=all producer "
          f"sending to its partitions; modes: {', '.join(modes)} (kill: kill -9; controlled: "
          f"the broker's controlled shutdown)")
    summary = []
    for peer in args.failover_peers.split(","):
        for session_ms, heartbeat_ms in settings:
            figures: dict[str, list[tuple[float, float, float]]] = {m: [] for m in modes}
            with contextlib.ExitStack() as stack:
                kafka = None
                if peer == "apache":
                    tmp = stack.enter_context(tempfile.TemporaryDirectory())
                    kafka = apache_failover_cluster(tmp, session_ms, heartbeat_ms, args.partitions)
                    stack.callback(kafka.close)
                for trial in range(1, args.trials + 1):
                    for mode in modes:
                        if kafka is not None:
                            got = apache_failover_trial(kafka, args.partitions, args.timeout, mode == "kill")
                        else:
                            got = asyncio.run(failover_trial(session_ms, heartbeat_ms, args.partitions,
                                                             args.timeout, abrupt=mode == "kill"))
                        figures[mode].append(got)
                        print(f"  {peer:6s} session {session_ms:5d} ms / heartbeat {heartbeat_ms:4d} ms "
                              f"{mode:10s} trial {trial}: leaders moved after {got[0] * 1000:6.0f} ms, "
                              f"first delivery after {got[1] * 1000:6.0f} ms, longest stall {got[2] * 1000:6.0f} ms",
                              flush=True)
            summary.append((peer, session_ms, heartbeat_ms, figures))
    print(f"failover, median / max of {args.trials} trials (ms):  "
          "leaders moved   first delivery   longest stall")
    for peer, session_ms, heartbeat_ms, figures in summary:
        for mode, got in figures.items():
            print(f"  {peer:6s} {mode:10s} session {session_ms:5d} / heartbeat {heartbeat_ms:4d}  "
                  + "   ".join(f"{statistics.median(v) * 1000:6.0f} /{max(v) * 1000:6.0f}"
                             for v in zip(*got)))
    print("  bound: the controller fences a broker whose last heartbeat is older than\n"
          "  broker.session.timeout.ms, so between (session - heartbeat interval) and session after\n"
          "  its death, and in the same step moves its leaderships to in-sync followers (leaders\n"
          "  moved). The client's share follows: librdkafka re-reads the metadata of topics with an\n"
          "  unavailable leader on a one-second timer, and the idempotent producer drains what was\n"
          "  in flight to the old leader before sending to the new one (seen with debug=metadata,eos).\n"
          "  A controlled shutdown moves the leaderships before the broker stops: no fencing wait.")


def apache_failover_cluster(tmp: str, session_ms: int, heartbeat_ms: int, partitions: int):
    """Apache Kafka with 3 brokers and a dedicated controller, the session settings given,
    the failover topic created (RF=3, min.insync.replicas=2), for :func:`apache_failover_trial`."""
    from kproto.testing.apache import ApacheKafka

    kafka = ApacheKafka(tmp, 3, 1, jvm_options=KAFKA_JVM,
                        config={"broker.session.timeout.ms": session_ms,
                                "broker.heartbeat.interval.ms": heartbeat_ms})
    kafka.start_all(timeout=300)
    kafka.create_topic(FAILOVER_TOPIC, partitions, 3, {"min.insync.replicas": 2})
    kafka.wait_for(lambda: all_in_sync(kafka, partitions), 60, "every replica in sync", 0.5)
    return kafka


def throughput_round(peer: str, n: int, size: int,
                     order: list[int]) -> dict[tuple[str, int], tuple[float, ...]]:
    """One fresh 3-broker ``peer`` (its own processes); produce figures per replication factor
    in ``order`` (RF=3 topics with min.insync.replicas=2)."""
    out: dict[tuple[str, int], tuple[float, ...]] = {}
    with tempfile.TemporaryDirectory() as tmp, serve(peer, tmp, brokers=3) as cluster:
        for rf in order:
            topic = f"rf{rf}"
            rate, lat, cpu, _ = bench_produce(cluster.bootstrap, n, size, topic, pids=cluster.pids,
                                           replication_factor=rf,
                                           topic_config={"min.insync.replicas": "2"} if rf == 3 else None)
            replicas = replication_of(cluster.bootstrap, topic)
            if replicas != rf:
                raise RuntimeError(f"{peer}: {topic} has {replicas} replicas, not {rf}")
            out[(peer, rf)] = (rate, percentile(lat, 0.5) * 1000, percentile(lat, 0.99) * 1000, cpu)
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
            rfs = [3] if peer == "mock" else [1, 3]
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
    for peer in ("apache", "mock"):
        for rf in (1, 3):
            if ("kproto", rf) in results and (peer, rf) in results:
                k, m = results[("kproto", rf)], results[(peer, rf)]
                print(f"kproto / {peer} at RF={rf}: produce {ratio(k[0], m[0])}, p50 {ratio(k[1], m[1])}, "
                      f"p99 {ratio(k[2], m[2])}, cluster CPU {ratio(k[3], m[3])}")


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
    ap.add_argument("--peers", default="kproto,mock", help="throughput: kproto, apache and/or mock")
    ap.add_argument("--failover-peers", default="kproto", help="failover: kproto and/or apache")
    ap.add_argument("--modes", default="kill", help="failover: kill (kill -9) and/or controlled (shutdown)")
    ap.add_argument("--skip", choices=("failover", "throughput"))
    args = ap.parse_args()
    if args.skip != "failover":
        failover(args)
    if args.skip != "throughput":
        throughput(args)


if __name__ == "__main__":
    main()
