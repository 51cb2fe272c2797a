"""``kproto partition`` (default partitioner) and ``kproto assign`` (consumer-group assignors)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from dataclasses import replace

from kproto.client.assignors import ASSIGNORS, Subscription, encode_sticky_user_data
from kproto.client.consumer_protocol import encode_assignment
from kproto.client.partitioner import murmur2, partition_for_key, to_positive


def cmd_partition(args: argparse.Namespace) -> int:
    for key in args.keys:
        try:
            raw = bytes.fromhex(key) if args.hex else key.encode("utf-8")
        except ValueError:
            print(f"kproto partition: not hex: {key!r}", file=sys.stderr)
            return 2
        h = murmur2(raw)
        doc = {"key": key, "murmur2": h, "to_positive": to_positive(h),
               "partition": partition_for_key(raw, args.partitions)}
        print(json.dumps(doc, ensure_ascii=False) if args.json else
              f"{doc['partition']}\t{key}")
    return 0


def _group(doc: Any) -> tuple[dict, dict]:
    """``{"topics": {name: count | [[rack, ...], ...]}, "members": {id: {...}}}``."""
    cluster = doc["topics"]
    subs = {}
    for member, m in doc["members"].items():
        subs[member] = Subscription(
            topics=list(m["topics"]),
            owned_partitions=[tuple(tp) for tp in m.get("owned_partitions", [])],
            generation_id=m.get("generation"), rack_id=m.get("rack"),
            group_instance_id=m.get("group_instance_id"))
    return cluster, subs


def cmd_assign(args: argparse.Namespace) -> int:
    try:
        with (sys.stdin if args.group == "-" else open(args.group, encoding="utf-8")) as f:
            cluster, subs = _group(json.load(f))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"kproto assign: bad group file: {e}", file=sys.stderr)
        return 2
    names = list(ASSIGNORS) if args.assignor == "all" else [args.assignor]
    out: dict[str, dict[str, Any]] = {}  # assignor -> member -> hex or [topic, partition] list
    for name in names:
        group = subs
        if name == "sticky":
            # the eager StickyAssignor reads history from the user data its members send
            group = {m: replace(s, user_data=encode_sticky_user_data(s.owned_partitions, s.generation_id))
                     if s.owned_partitions or s.generation_id is not None else s for m, s in subs.items()}
        result = ASSIGNORS[name](cluster, group)
        if args.bytes is not None:
            out[name] = {m: encode_assignment(sorted(p), args.bytes).hex() for m, p in result.items()}
        else:
            out[name] = {m: [list(tp) for tp in sorted(p)] for m, p in result.items()}
    if args.format == "json":
        print(json.dumps(out if len(names) > 1 else out[names[0]], ensure_ascii=False, indent=2))
        return 0
    for name, members in out.items():
        for member, assigned in members.items():
            shown = assigned if isinstance(assigned, str) else \
                " ".join(f"{t}-{p}" for t, p in assigned)
            print(f"{name}\t{member}\t{shown or '-'}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("partition", help="the partition Kafka's default partitioner picks for keys",
                              description="murmur2 of each key and toPositive(murmur2) %% partitions, "
                                          "as Kafka's Java producer computes them.")
    p.add_argument("keys", nargs="+", metavar="KEY", help="record keys (UTF-8 text, or hex with --hex)")
    p.add_argument("-p", "--partitions", type=int, required=True, help="partition count of the topic")
    p.add_argument("--hex", action="store_true", help="keys are hex-encoded bytes")
    p.add_argument("--json", action="store_true", help="one JSON object per key")
    p.set_defaults(func=cmd_partition)

    a = subparsers.add_parser("assign", help="run Kafka's consumer-group assignors on a group",
                              description='Group file (JSON): {"topics": {"t": 6 | [[racks of p0], ...]}, '
                                          '"members": {"m1": {"topics": ["t"], "owned_partitions": [["t", 0]], '
                                          '"generation": 3, "rack": "r1", "group_instance_id": null}}}. '
                                          "Members are taken in file order.")
    a.add_argument("group", help="group JSON file, or - for stdin")
    a.add_argument("-a", "--assignor", default="all", choices=["all", *ASSIGNORS])
    a.add_argument("--bytes", type=int, metavar="VERSION", choices=range(4),
                   help="print ConsumerProtocol assignment bytes (hex) at this version instead")
    a.add_argument("--format", choices=("json", "text"), default="json",
                   help="json (default): assignor -> member -> assignment; text: one line per "
                        "member")
    a.set_defaults(func=cmd_assign)
