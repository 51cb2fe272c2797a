"""``kproto cluster``: run a Kafka cluster (KRaft controllers and brokers) in one process
until SIGTERM or SIGINT."""
from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("cluster", help="run a multi-broker Kafka cluster (for tests and tools)",
                       description="Run kproto's KRaft controller quorum and brokers over a data "
                                   "directory (broker-<id>/ and controller-<id>/ below it). One "
                                   "line 'listening on HOST:PORT' per broker on stdout once every "
                                   "broker is registered and unfenced; SIGTERM stops every node "
                                   "cleanly, and a later start on the same directory recovers "
                                   "the cluster.")
    p.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--controllers", type=int, choices=(1, 3), default=1,
                   help="controllers in the quorum (default 1)")
    p.add_argument("--data", required=True, metavar="DIR", help="data directory of the cluster")
    p.add_argument("--port", type=int, default=0,
                   help="first broker's port, the others follow it (default 0: free ports)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise")
    p.add_argument("--partitions", type=int, default=1,
                   help="num.partitions of auto-created topics (default 1)")
    p.add_argument("--replication-factor", type=int, default=None,
                   help="default.replication.factor (default: min(3, brokers))")
    p.add_argument("--min-insync-replicas", type=int, default=1, help="min.insync.replicas (default 1)")
    p.add_argument("--session-timeout-ms", type=int, default=9000,
                   help="broker.session.timeout.ms: a broker silent this long is fenced (default 9000)")
    p.add_argument("--heartbeat-interval-ms", type=int, default=2000,
                   help="broker.heartbeat.interval.ms (default 2000)")
    p.add_argument("--no-auto-create", action="store_true", help="auto.create.topics.enable=false")
    p.set_defaults(func=run)


async def _serve(args: argparse.Namespace) -> int:
    from kproto.broker.cluster import Cluster
    from kproto.cli.broker import until_signalled

    if args.brokers < 1:
        print("kproto cluster: --brokers must be at least 1", file=sys.stderr)
        return 2
    cluster = Cluster(args.brokers, args.controllers, args.data, host=args.host, port=args.port,
                      broker_session_timeout_ms=args.session_timeout_ms,
                      broker_heartbeat_interval_ms=args.heartbeat_interval_ms,
                      default_replication_factor=args.replication_factor,
                      num_partitions=args.partitions, min_insync_replicas=args.min_insync_replicas,
                      auto_create_topics=not args.no_auto_create)
    try:
        await cluster.start_all()
    except (OSError, ValueError, TimeoutError) as exc:
        print(f"kproto cluster: {exc}", file=sys.stderr)
        await cluster.close()
        return 2
    for broker in cluster.brokers.values():
        broker.warm_up()
        print(f"listening on {broker.bootstrap}", flush=True)
    await until_signalled()
    await cluster.close()
    return 0


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_serve(args))
