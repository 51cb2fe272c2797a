"""``kproto api-versions | metadata | produce | consume --bootstrap host:port``: a small client."""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import sys
from typing import Any, Callable, Coroutine

__all__ = ["register"]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", required=True, help="host:port[,host:port...]")
    p.add_argument("--client-id", default="kproto")
    p.add_argument("--request-timeout", type=float, default=30.0, metavar="S")
    p.add_argument("--tls", action="store_true", help="connect with TLS (system trust store)")
    p.add_argument("--ca-file", help="CA bundle for --tls")
    p.add_argument("--sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
    p.add_argument("--sasl-username")
    p.add_argument("--sasl-password")
    p.add_argument("--sasl-token", metavar="TOKEN|@FILE", help="OAUTHBEARER: the bearer token")
    p.add_argument("--version-cap", action="append", default=[], metavar="KEY=VERSION",
                   help="never use a version above VERSION for API KEY (broker workarounds)")


def _caps(items: list[str]) -> dict[int, int]:
    caps = {}
    for item in items:
        key, sep, ver = item.partition("=")
        if not sep or not key.strip().isdigit() or not ver.strip().isdigit():
            raise SystemExit(f"--version-cap expects KEY=VERSION, not {item!r}")
        caps[int(key)] = int(ver)
    return caps


def _cluster(args: argparse.Namespace):
    from kproto.client.cluster import Cluster
    from kproto.client.protocol import SaslConfig

    ctx = None
    if args.tls:
        ctx = ssl.create_default_context(cafile=args.ca_file)
    sasl = None
    if args.sasl_mechanism == "OAUTHBEARER":
        if not args.sasl_token:
            raise SystemExit("--sasl-mechanism OAUTHBEARER needs --sasl-token")
        token = args.sasl_token
        if token.startswith("@"):
            with open(token[1:], encoding="utf-8") as f:
                token = f.read().strip()
        try:
            sasl = SaslConfig("OAUTHBEARER", token=token)
        except ValueError as e:
            raise SystemExit(f"--sasl-token: {e}")
    elif args.sasl_mechanism:
        if args.sasl_username is None or args.sasl_password is None:
            raise SystemExit("--sasl-mechanism needs --sasl-username and --sasl-password")
        sasl = SaslConfig(args.sasl_mechanism, args.sasl_username, args.sasl_password)
    return Cluster(args.bootstrap, client_id=args.client_id, ssl=ctx, sasl=sasl,
                   request_timeout=args.request_timeout, version_caps=_caps(args.version_cap))


def _run(coro_fn: Callable[[argparse.Namespace], Coroutine[Any, Any, int]]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        from kproto.errors import KprotoError

        try:
            return asyncio.run(coro_fn(args))
        except KprotoError as e:
            print(f"kproto {args.command}: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return run


def _api_name(key: int) -> str:
    from kproto.codecs import request

    try:
        return request(key).name.removesuffix("Request")
    except KeyError:
        return f"Unknown({key})"


async def _api_versions(args: argparse.Namespace) -> int:
    async with _cluster(args) as cluster:
        conn = await cluster.bootstrap_connection()
        table = conn.versions
        rows = []
        for key in sorted(table.broker):
            theirs = table.broker[key]
            both = table.supported(key)
            rows.append({"api_key": key, "name": _api_name(key), "broker": [theirs.start, theirs[-1]],
                         "usable": both[-1] if both else None})
        if args.json:
            print(json.dumps({"broker": f"{conn.host}:{conn.port}", "apis": rows}, indent=2))
        else:
            print(f"{'key':>4}  {'api':<32} {'broker':>8}  usable")
            for r in rows:
                usable = "-" if r["usable"] is None else str(r["usable"])
                print(f"{r['api_key']:>4}  {r['name']:<32} {r['broker'][0]:>3}-{r['broker'][1]:<4}  {usable}")
    return 0


async def _metadata(args: argparse.Namespace) -> int:
    async with _cluster(args) as cluster:
        md = await cluster.refresh_metadata(args.topic or None)
        doc = {
            "cluster_id": md.cluster_id, "controller_id": md.controller_id,
            "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                        for b in sorted(md.brokers.values(), key=lambda b: b.node_id)],
            "topics": [{"name": t.name, "topic_id": str(t.topic_id), "error_code": t.error_code,
                        "partitions": [{"partition": p.partition, "leader": p.leader,
                                        "leader_epoch": p.leader_epoch, "replicas": p.replicas,
                                        "isr": p.isr, "error_code": p.error_code}
                                       for _, p in sorted(t.partitions.items())]}
                       for t in sorted(md.topics.values(), key=lambda t: t.name)
                       if not args.topic or t.name in args.topic],  # some brokers answer with more
        }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    print(f"cluster {doc['cluster_id']} controller {doc['controller_id']}")
    for b in doc["brokers"]:
        print(f"broker {b['node_id']} {b['host']}:{b['port']}" + (f" rack {b['rack']}" if b["rack"] else ""))
    for t in doc["topics"]:
        err = f" error {t['error_code']}" if t["error_code"] else ""
        print(f"topic {t['name']} id {t['topic_id']} partitions {len(t['partitions'])}{err}")
        for p in t["partitions"]:
            print(f"  partition {p['partition']} leader {p['leader']} epoch {p['leader_epoch']} "
                  f"replicas {p['replicas']} isr {p['isr']}")
    return 1 if any(t["error_code"] for t in doc["topics"]) else 0


async def _produce(args: argparse.Namespace) -> int:
    from kproto.client.admin import Admin
    from kproto.client.producer import Producer

    if args.transactional_id and args.no_idempotence:
        print("kproto produce: --transactional-id needs idempotence", file=sys.stderr)
        return 2
    if args.abort and not args.transactional_id:
        print("kproto produce: --abort needs --transactional-id", file=sys.stderr)
        return 2

    lines = args.values if args.values else [line.rstrip("\n") for line in sys.stdin]
    if args.key_separator:  # KEY<sep>VALUE per line, as the console producer's parse.key
        if args.key is not None:
            print("kproto produce: --key and --key-separator exclude each other", file=sys.stderr)
            return 2
        split = [line.partition(args.key_separator) for line in lines]
        missing = [n for n, (_, sep, _) in enumerate(split, 1) if not sep]
        if missing:
            print(f"kproto produce: no {args.key_separator!r} in line {missing[0]}", file=sys.stderr)
            return 2
        records = [(k.encode("utf-8"), v.encode("utf-8")) for k, _, v in split]
    else:
        key = None if args.key is None else args.key.encode("utf-8")
        records = [(key, line.encode("utf-8")) for line in lines]
    async with _cluster(args) as cluster:
        if args.create_partitions:
            await Admin(cluster).create_topics({args.topic: args.create_partitions}, exist_ok=True)
        producer = await Producer(cluster, compression=args.compression,
                                  idempotent=not args.no_idempotence,
                                  acks=-1 if not args.no_idempotence else args.acks,
                                  transactional_id=args.transactional_id).start()
        if args.transactional_id:
            producer.begin_transaction()
        futures = [await producer.send(args.topic, v, k, partition=args.partition) for k, v in records]
        if args.transactional_id:
            if args.abort:
                await producer.flush()  # written, then aborted: what read_committed must skip
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
        await producer.close()
        failed = 0
        rows: list[dict[str, Any]] = []
        for f in futures:
            exc = f.exception()
            if exc is not None:
                failed += 1
                rows.append({"error": str(exc)})
                if not args.json:
                    print(f"error: {exc}", file=sys.stderr)
            else:
                m = f.result()
                rows.append({"topic": m.topic, "partition": m.partition, "offset": m.offset})
                if args.verbose and not args.json:
                    print(f"{m.topic} {m.partition} {m.offset}")
    if args.json:  # one document: every record's place or error, in input order
        print(json.dumps({"topic": args.topic, "produced": len(records) - failed, "failed": failed,
                          "aborted": bool(args.abort), "records": rows}))
    else:
        print(f"produced {len(records) - failed} of {len(records)} records to {args.topic}",
              file=sys.stderr)
    return 1 if failed else 0


async def _consume(args: argparse.Namespace) -> int:
    import time

    from kproto.client.consumer import Consumer

    async with _cluster(args) as cluster:
        consumer = await Consumer(cluster, [args.topic], group_id=args.group,
                                  assignors=[args.assignor],
                                  auto_offset_reset="earliest" if args.from_beginning else "latest",
                                  isolation_level=args.isolation).start()
        count = 0
        idle_since = None  # set after the first round: joining a group may take seconds
        try:
            while args.max_messages is None or count < args.max_messages:
                records = await consumer.getmany(timeout=0.5)
                now = time.monotonic()
                if records or idle_since is None or consumer.rebalance_needed:  # joining is not idle
                    idle_since = now
                elif args.idle_timeout is not None and now - idle_since > args.idle_timeout:
                    break
                unprinted: set[tuple[str, int]] = set()
                for r in records:
                    if args.max_messages is not None and count >= args.max_messages:
                        if (r.topic, r.partition) not in unprinted:  # commit only what was printed
                            unprinted.add((r.topic, r.partition))
                            consumer.seek(r.topic, r.partition, r.offset)
                        continue
                    if args.format == "jsonl":
                        print(json.dumps(_record_json(r), ensure_ascii=False))
                        count += 1
                        continue
                    value = "" if r.value is None else r.value.decode("utf-8", "replace")
                    if args.print_key:
                        key = "" if r.key is None else r.key.decode("utf-8", "replace")
                        print(f"{key}\t{value}")
                    else:
                        print(value)
                    count += 1
            sys.stdout.flush()
            if args.group:
                await consumer.commit()
        finally:
            await consumer.close()
    return 0


def _text_or_base64(doc: dict, name: str, data: bytes | None) -> None:
    """``name``: the UTF-8 text, or ``name_base64`` when the bytes are not UTF-8 (None: null)."""
    if data is None:
        doc[name] = None
        return
    try:
        doc[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        doc[name + "_base64"] = base64.b64encode(data).decode("ascii")


def _record_json(r: Any) -> dict:
    doc: dict = {"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp}
    _text_or_base64(doc, "key", r.key)
    _text_or_base64(doc, "value", r.value)
    headers = []
    for hk, hv in r.headers:
        h: dict = {"key": hk}
        _text_or_base64(h, "value", hv)
        headers.append(h)
    doc["headers"] = headers
    return doc


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("api-versions", help="the API versions a broker supports and kproto would use")
    _add_common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run(_api_versions))

    p = subparsers.add_parser("metadata", help="brokers, topics, partitions and leaders")
    _add_common(p)
    p.add_argument("--topic", action="append", help="only this topic (repeatable); default all")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run(_metadata))

    p = subparsers.add_parser("produce", help="produce values (arguments, or stdin lines)")
    _add_common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    p.add_argument("--key", help="key of every record (default: none, sticky partitioning)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="each line (or value) is KEY SEP VALUE, as the console producer's parse.key")
    p.add_argument("--partition", type=int, help="partition (default: the partitioner's choice)")
    p.add_argument("--no-idempotence", action="store_true")
    p.add_argument("--acks", type=int, default=-1, choices=[-1, 0, 1], help="with --no-idempotence")
    p.add_argument("--transactional-id", metavar="ID",
                   help="produce every value in one transaction of this transactional id")
    p.add_argument("--abort", action="store_true", help="with --transactional-id: abort, not commit")
    p.add_argument("--create-partitions", type=int, metavar="N",
                   help="create the topic with N partitions first (CreateTopics)")
    p.add_argument("-v", "--verbose", action="store_true", help="print topic partition offset per record")
    p.add_argument("values", nargs="*")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: counts and each record's partition and offset or error")
    p.set_defaults(func=_run(_produce))

    p = subparsers.add_parser("consume", help="print the values of a topic, one per line")
    _add_common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", help="consumer group (commits offsets when done)")
    p.add_argument("--assignor", default="range", choices=["range", "roundrobin", "sticky", "cooperative-sticky"])
    p.add_argument("--from-beginning", action="store_true")
    p.add_argument("--isolation", default="read_uncommitted",
                   choices=["read_uncommitted", "read_committed"],
                   help="read_committed: leave out aborted transactions, stop at the last stable offset")
    p.add_argument("--max-messages", type=int)
    p.add_argument("--idle-timeout", type=float, default=5.0, metavar="S",
                   help="stop after S seconds without records (default 5)")
    p.add_argument("--print-key", action="store_true")
    p.add_argument("--format", choices=["values", "jsonl"], default="values",
                   help="jsonl: one object per record (topic, partition, offset, timestamp, key, value, "
                        "headers; *_base64 where the bytes are not UTF-8)")
    p.set_defaults(func=_run(_consume))
