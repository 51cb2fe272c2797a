"""``kproto cluster``: run a Kafka cluster (KRaft controllers and brokers) in one process
until SIGTERM or SIGINT; ``kproto cluster ctl DIR ...`` stops, starts, isolates and heals its
nodes from another shell."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("cluster", help="run a multi-broker Kafka cluster (for tests and tools)",
                       description="Run kproto's KRaft controller quorum and brokers over a data "
                                   "directory (broker-<id>/ and controller-<id>/ below it). One "
                                   "line 'listening on HOST:PORT' per broker on stdout once every "
                                   "broker is registered and unfenced; SIGTERM stops every node "
                                   "cleanly (each broker's controlled shutdown first, as Kafka's), "
                                   "and a later start on the same directory recovers "
                                   "the cluster.")
    p.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    p.add_argument("--controllers", type=int, choices=(1, 3), default=1,
                   help="controllers in the quorum (default 1)")
    p.add_argument("--data", metavar="DIR", help="data directory of the cluster (required)")
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
    p.add_argument("--json", action="store_true",
                   help='each broker\'s line as a JSON object: {"listening": "HOST:PORT", '
                        '"node_id": N}')
    from kproto.cli import security
    security.add_arguments(p, cluster=True)
    p.set_defaults(func=run)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    ctl = actions.add_parser(
        "ctl", help="control a running cluster: stop, start, isolate, heal nodes, status",
        description="Send one command to the 'kproto cluster' running over DIR (through the "
                    "control port named in DIR/kproto-control.json). Exit 0 when done, 2 on "
                    "bad use (no running cluster in DIR, an unknown node), 1 when the cluster "
                    "could not do it.")
    ctl.add_argument("dir", metavar="DIR", help="the cluster's data directory (its --data)")
    ctl.add_argument("--timeout", type=float, default=60.0,
                     help="seconds to wait for the answer (default 60)")
    commands = ctl.add_subparsers(dest="command", metavar="COMMAND", required=True)
    status = commands.add_parser("status", help="every node: role, address, state, cut links")
    status.add_argument("--json", action="store_true", help="the answer as one JSON object")
    stop = commands.add_parser("stop", help="stop a node: gracefully (a broker's controlled "
                                            "shutdown), or --abrupt as kill -9")
    stop.add_argument("node", type=int)
    stop.add_argument("--abrupt", action="store_true", help="as kill -9: nothing more written")
    start = commands.add_parser("start", help="start a stopped node over its data (recovered)")
    start.add_argument("node", type=int)
    isolate = commands.add_parser("isolate", help="cut a node from every other node")
    isolate.add_argument("node", type=int)
    partition = commands.add_parser("partition", help="cut the link between two nodes")
    partition.add_argument("node", type=int)
    partition.add_argument("peer", type=int)
    heal = commands.add_parser("heal", help="mend a node's cut links and delays (every node's "
                                            "when NODE is left out)")
    heal.add_argument("node", type=int, nargs="?")
    for command in (stop, start, isolate, partition, heal):
        command.add_argument("--json", action="store_true",
                             help="the answer as one JSON object (with the text line as done)")
    ctl.set_defaults(func=run_ctl)


async def _serve(args: argparse.Namespace) -> int:
    from kproto.broker.cluster import Cluster
    from kproto.broker.cluster.control import ControlError, ControlServer, control
    from kproto.cli.broker import listening_line, until_signalled

    if args.data is None:
        print("kproto cluster: --data DIR is required", file=sys.stderr)
        return 2
    try:
        control(args.data, "status", timeout=5)
    except ControlError:
        pass  # no cluster answers there: the directory is free
    else:
        print(f"kproto cluster: a cluster already runs over {args.data}", file=sys.stderr)
        return 2
    if args.brokers < 1:
        print("kproto cluster: --brokers must be at least 1", file=sys.stderr)
        return 2
    from kproto.cli import security
    try:
        secured = security.settings(args, cluster=True)
    except (OSError, ValueError) as exc:
        print(f"kproto cluster: {exc}", file=sys.stderr)
        return 2
    cluster = Cluster(args.brokers, args.controllers, args.data, host=args.host, port=args.port,
                      broker_session_timeout_ms=args.session_timeout_ms,
                      broker_heartbeat_interval_ms=args.heartbeat_interval_ms,
                      default_replication_factor=args.replication_factor,
                      num_partitions=args.partitions, min_insync_replicas=args.min_insync_replicas,
                      auto_create_topics=not args.no_auto_create, **secured)
    try:
        await cluster.start_all()
    except (OSError, ValueError, TimeoutError, RuntimeError) as exc:
        print(f"kproto cluster: {exc}", file=sys.stderr)
        await cluster.close()
        return 2
    for problem in cluster.migration_problems:  # old state files partly unreadable
        print(f"kproto cluster: not migrated: {problem}", file=sys.stderr)
    async with ControlServer(cluster):
        for broker in cluster.brokers.values():
            broker.warm_up()
            print(listening_line(broker, args.json), flush=True)
        await until_signalled()
    await cluster.close(controlled=True)
    return 0


def run(args: argparse.Namespace) -> int:
    from kproto.cli.broker import keep_freed_memory

    keep_freed_memory()
    return asyncio.run(_serve(args))


def run_ctl(args: argparse.Namespace) -> int:
    from kproto.broker.cluster.control import ControlError, control

    target = {k: getattr(args, k) for k in ("node", "peer") if getattr(args, k, None) is not None}
    if args.command == "stop" and args.abrupt:
        target["abrupt"] = True
    try:
        reply = control(args.dir, args.command, timeout=args.timeout, **target)
    except ControlError as exc:
        print(f"kproto cluster ctl: {exc}", file=sys.stderr)
        return 2 if exc.usage else 1
    if args.command == "status":
        if args.json:
            print(json.dumps({k: v for k, v in reply.items() if k != "ok"}))
        else:
            _print_status(reply)
    elif args.json:
        print(json.dumps({"command": args.command, **target,
                          **{k: v for k, v in reply.items() if k != "ok"}, "done": _done(args, reply)}))
    else:
        print(_done(args, reply))
    return 0


def _print_status(reply: dict[str, Any]) -> None:
    """One line per node: id, role, address, state, then what is notable."""
    print(f"cluster {reply['cluster_id']}  bootstrap {reply['bootstrap'] or '-'}")
    for n in reply["nodes"]:
        notes = []
        if n.get("active"):
            notes.append("active controller")
        if n.get("fenced"):
            notes.append("fenced")
        if n["cut_from"]:
            notes.append("cut from " + ",".join(map(str, n["cut_from"])))
        state = "running" if n["running"] else "stopped"
        print(f"{n['node']:>5}  {n['role']:<10}  {n['address']:<21}  {state:<7}  {'; '.join(notes)}".rstrip())


def _done(args: argparse.Namespace, reply: dict[str, Any]) -> str:
    """What the command did, in one line."""
    if args.command == "stop":
        how = "killed (abrupt)" if args.abrupt else "stopped"
        return f"node {args.node} {how}" if reply.get("was_running") else f"node {args.node} was not running"
    if args.command == "start":
        return f"node {args.node} was running" if reply.get("was_running") else f"node {args.node} started"
    if args.command == "isolate":
        return f"node {args.node} cut from every other node"
    if args.command == "partition":
        return f"link {args.node} <-> {args.peer} cut"
    return f"node {args.node}'s links healed" if args.node is not None else "every link healed"
