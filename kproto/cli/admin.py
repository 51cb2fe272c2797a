"""``kproto topics | groups | offsets | configs --bootstrap host:port``: cluster administration."""
from __future__ import annotations

import argparse
import json
from typing import Any, Optional

from kproto.cli.client import _add_common, _cluster, _run

__all__ = ["register"]


def _admin(cluster: Any) -> Any:
    from kproto.client.admin import Admin

    return Admin(cluster)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"{what} expects KEY=VALUE, not {item!r}")
        out[k] = v
    return out


def _spec(text: str) -> Any:
    if text.isdigit():
        return int(text)
    if text not in ("earliest", "latest", "max_timestamp"):
        raise SystemExit(f"expected earliest, latest, max_timestamp or a time in ms, not {text!r}")
    return text


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


def _partitions(admin: Any, topic: str, partition: Optional[int]) -> list[tuple[str, int]]:
    parts = admin.cluster.metadata.partitions(topic)
    if partition is None:
        return [(topic, p) for p in parts]
    if partition not in parts:
        raise SystemExit(f"{topic} has no partition {partition} (it has {len(parts)})")
    return [(topic, partition)]


# -- topics --------------------------------------------------------------------------------------
async def _topics(args: argparse.Namespace) -> int:
    async with _cluster(args) as cluster:
        admin = _admin(cluster)
        if args.action == "list":
            names = await admin.list_topics(internal=args.internal)
            if args.json:
                _print_json(names)
            else:
                print("\n".join(names))
        elif args.action == "describe":
            topics = await admin.describe_topics(args.topics)
            configs = await admin.describe_configs([("topic", t) for t in args.topics])
            doc = [{"name": t.name, "topic_id": str(t.topic_id), "internal": t.is_internal,
                    "partitions": [{"partition": p.partition, "leader": p.leader, "replicas": p.replicas,
                                    "isr": p.isr} for _, p in sorted(t.partitions.items())],
                    "configs": {c.name: c.value for c in configs[("topic", t.name)].values()
                                if args.all_configs or not c.is_default}}
                   for t in topics.values()]
            if args.json:
                _print_json(doc)
            for t in [] if args.json else doc:
                conf = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
                print(f"topic {t['name']} id {t['topic_id']} partitions {len(t['partitions'])}"
                      + (f" configs {conf}" if conf else ""))
                for p in t["partitions"]:
                    print(f"  partition {p['partition']} leader {p['leader']} replicas {p['replicas']} isr {p['isr']}")
        elif args.action == "create":
            configs = _pairs(args.config, "--config")
            await admin.create_topics({t: args.partitions for t in args.topics}, args.replication_factor,
                                      configs={t: configs for t in args.topics},
                                      validate_only=args.validate_only, exist_ok=args.if_not_exists)
            if not args.validate_only:
                await cluster.wait_for_leaders(args.topics)
            if args.json:
                _print_json({"created": [] if args.validate_only else args.topics,
                             "validated": args.topics if args.validate_only else [],
                             "partitions": args.partitions,
                             "replication_factor": args.replication_factor, "configs": configs})
        elif args.action == "delete":
            await admin.delete_topics(args.topics, missing_ok=args.if_exists)
            if args.json:
                _print_json({"deleted": args.topics})
        elif args.action == "alter":
            if args.partitions is None and not args.config and not args.delete_config:
                raise SystemExit("kproto topics alter: nothing to change (--partitions, --config, --delete-config)")
            if args.partitions is not None:
                await admin.create_partitions({args.topic: args.partitions})
            changes: dict[str, Optional[str]] = dict(_pairs(args.config, "--config"))
            changes.update({k: None for k in args.delete_config})
            if changes:
                await admin.alter_configs({("topic", args.topic): changes})
            if args.json:  # a removed config is null
                _print_json({"topic": args.topic, "partitions": args.partitions, "configs": changes})
        elif args.action == "delete-records":
            await cluster.refresh_metadata([args.topic])
            result = await admin.delete_records({tp: args.before for tp in _partitions(admin, args.topic, args.partition)})
            if args.json:
                _print_json([{"topic": t, "partition": p, "low_watermark": low}
                             for (t, p), low in sorted(result.items())])
            for (t, p), low in [] if args.json else sorted(result.items()):
                print(f"{t} {p} low_watermark {low}")
    return 0


# -- groups --------------------------------------------------------------------------------------
async def _describe_share_group(admin: Any, g: Any, as_json: bool) -> int:
    """A share group (KIP-932): members with their assignments, and per partition the share-
    partition start offset and the lag (records not yet delivered for good)."""
    offsets = [{"topic": t, "partition": p, "start_offset": start, "lag": lag}
               for (t, p), (start, lag) in sorted((await admin.list_share_group_offsets(g.group_id)).items())]
    if as_json:
        _print_json({"group_id": g.group_id, "type": "share", "state": g.state, "assignor": g.protocol,
                     "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch, "members": [
                         {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                          "member_epoch": m.member_epoch, "subscribed_topics": m.subscribed_topics,
                          "assignment": [list(tp) for tp in m.assignment or []]} for m in g.members],
                     "offsets": offsets})
        return 0
    print(f"group {g.group_id} type share state {g.state} assignor {g.protocol or '-'} "
          f"epoch {g.group_epoch} assignment epoch {g.assignment_epoch} members {len(g.members)}")
    for m in g.members:
        owned = ",".join(f"{t}-{p}" for t, p in m.assignment or []) or "-"
        print(f"  member {m.member_id} client {m.client_id} host {m.client_host} epoch {m.member_epoch} "
              f"assigned {owned}")
    print(f"  {'topic':<24} {'partition':>9} {'start':>12} {'lag':>8}")
    for o in offsets:
        lag = "-" if o["lag"] is None else o["lag"]
        print(f"  {o['topic']:<24} {o['partition']:>9} {o['start_offset']:>12} {lag:>8}")
    return 0


async def _groups(args: argparse.Namespace) -> int:
    spec = _spec(args.to) if getattr(args, "to", None) is not None else None
    async with _cluster(args) as cluster:
        admin = _admin(cluster)
        if args.action == "list":
            groups = await admin.list_groups()
            if args.json:
                _print_json([{"group_id": g.group_id, "protocol_type": g.protocol_type, "state": g.state,
                              "type": g.type} for g in groups])
            for g in [] if args.json else groups:
                # ListGroups v5 names the group type (classic, consumer (KIP-848) or share (KIP-932))
                print(f"{g.group_id}\t{g.protocol_type or '-'}\t{g.state or '-'}\t{g.type or '-'}")
        elif args.action == "describe":
            g = (await admin.describe_groups([args.group]))[args.group]
            if g.type == "share":
                return await _describe_share_group(admin, g, args.json)
            committed = await admin.list_group_offsets(args.group)
            await cluster.refresh_metadata(sorted({t for t, _ in committed}))
            ends = await admin.list_offsets(list(committed), "latest") if committed else {}
            owner = {tp: m.member_id for m in g.members for tp in (m.assignment or [])}
            offsets = [{"topic": t, "partition": p, "committed": off, "end": ends[(t, p)],
                        "lag": ends[(t, p)] - off if off >= 0 else None, "member": owner.get((t, p))}
                       for (t, p), off in sorted(committed.items())]
            doc = {"group_id": g.group_id, "type": g.type, "state": g.state, "protocol_type": g.protocol_type,
                   "protocol": g.protocol, "members": [
                       {"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                        "group_instance_id": m.group_instance_id,
                        "assignment": None if m.assignment is None else [list(tp) for tp in m.assignment]}
                       | ({} if g.type != "consumer" else {
                           "member_epoch": m.member_epoch, "subscribed_topics": m.subscribed_topics,
                           "subscribed_topic_regex": m.subscribed_topic_regex,
                           "target_assignment": [list(tp) for tp in m.target_assignment or []]})
                       for m in g.members], "offsets": offsets}
            if g.type == "consumer":  # KIP-848: the group's epochs; protocol is the broker's assignor
                doc |= {"group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch}
            if args.json:
                _print_json(doc)
                return 0
            if g.type == "consumer":
                print(f"group {g.group_id} type consumer state {g.state} assignor {g.protocol or '-'} "
                      f"epoch {g.group_epoch} assignment epoch {g.assignment_epoch} members {len(g.members)}")
            else:
                print(f"group {g.group_id} state {g.state} protocol {g.protocol_type}/{g.protocol or '-'} "
                      f"members {len(g.members)}")
            for m in g.members:
                line = f"  member {m.member_id} client {m.client_id} host {m.client_host}"
                if g.type == "consumer":
                    owned = ",".join(f"{t}-{p}" for t, p in m.assignment or []) or "-"
                    line += f" epoch {m.member_epoch} assigned {owned}"
                    if m.target_assignment != m.assignment:
                        line += " target " + (",".join(f"{t}-{p}" for t, p in m.target_assignment or []) or "-")
                print(line)
            print(f"  {'topic':<24} {'partition':>9} {'committed':>12} {'end':>12} {'lag':>8}")
            for o in offsets:
                lag = "-" if o["lag"] is None else o["lag"]
                print(f"  {o['topic']:<24} {o['partition']:>9} {o['committed']:>12} {o['end']:>12} {lag:>8}")
        elif args.action == "delete":
            await admin.delete_groups(args.groups)
            if args.json:
                _print_json({"deleted": args.groups})
        elif args.action == "reset":
            await cluster.refresh_metadata([args.topic])
            parts = _partitions(admin, args.topic, args.partition)
            if args.to_offset is not None:
                target = {tp: args.to_offset for tp in parts}
            else:
                target = await admin.list_offsets(parts, spec)
                if any(v < 0 for v in target.values()):  # no record at or after the time: the end
                    ends = await admin.list_offsets(parts, "latest")
                    target = {tp: v if v >= 0 else ends[tp] for tp, v in target.items()}
            if not args.dry_run:
                await admin.alter_group_offsets(args.group, target)
            if args.json:
                _print_json({"group": args.group, "dry_run": args.dry_run, "offsets": [
                    {"topic": t, "partition": p, "offset": off} for (t, p), off in sorted(target.items())]})
                return 0
            for (t, p), off in sorted(target.items()):
                print(f"{t} {p} {off}" + (" (dry run)" if args.dry_run else ""))
    return 0


# -- offsets and configs -------------------------------------------------------------------------
async def _offsets(args: argparse.Namespace) -> int:
    spec = _spec(args.time)
    async with _cluster(args) as cluster:
        admin = _admin(cluster)
        await cluster.wait_for_leaders([args.topic])
        result = await admin.list_offsets(_partitions(admin, args.topic, args.partition), spec,
                                          isolation=args.isolation)
        if args.json:
            _print_json([{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(result.items())])
        for (t, p), o in [] if args.json else sorted(result.items()):
            print(f"{t} {p} {o}")
    return 0


async def _configs(args: argparse.Namespace) -> int:
    resource = ("topic", args.topic) if args.topic is not None else ("broker", str(args.broker))
    async with _cluster(args) as cluster:
        admin = _admin(cluster)
        changes: dict[str, Optional[str]] = dict(_pairs(args.set, "--set"))
        changes.update({k: None for k in args.delete})
        if changes:
            await admin.alter_configs({resource: changes})
        entries = (await admin.describe_configs([resource]))[resource]
        shown = [e for _, e in sorted(entries.items()) if args.all or not e.is_default]
        if args.json:
            _print_json([{"name": e.name, "value": e.value, "source": e.source_name, "read_only": e.read_only,
                          "sensitive": e.sensitive} for e in shown])
        for e in [] if args.json else shown:
            print(f"{e.name}={'' if e.value is None else e.value}\t({e.source_name})")
    return 0


async def _acls(args: argparse.Namespace) -> int:
    from kproto.client.admin import Acl, AclFilter

    async with _cluster(args) as cluster:
        admin = _admin(cluster)
        if args.action == "create":
            acls = [Acl(args.resource_type, args.resource_name, args.principal, op,
                        "deny" if args.deny else "allow", args.host,
                        "prefixed" if args.prefixed else "literal") for op in args.operation]
            await admin.create_acls(acls)
            if args.json:
                _print_json({"created": [vars(a) for a in acls]})
            return 0
        match = AclFilter(args.resource_type, args.resource_name, args.principal, args.operation,
                          args.permission, args.host, args.pattern_type)
        found = await (admin.describe_acls(match) if args.action == "list" else admin.delete_acls([match]))
        if args.json:
            _print_json([vars(a) for a in found])
        for a in [] if args.json else found:
            print(f"{a.resource_type}:{a.pattern_type}:{a.resource_name}\t{a.principal}@{a.host}\t"
                  f"{a.permission} {a.operation}")
    return 0


def register(subparsers: Any) -> None:
    def sub(parent: Any, name: str, help: str) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help)
        _add_common(p)
        return p

    p = subparsers.add_parser("topics", help="list, describe, create, alter and delete topics")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = sub(actions, "list", "topic names")
    a.add_argument("--internal", action="store_true", help="also internal topics")
    a.add_argument("--json", action="store_true")
    a = sub(actions, "describe", "partitions, leaders, replicas and configs")
    a.add_argument("topics", nargs="+", metavar="TOPIC")
    a.add_argument("--all-configs", action="store_true", help="also configs at their defaults")
    a.add_argument("--json", action="store_true")
    a = sub(actions, "create", "create topics (and wait for their leaders)")
    a.add_argument("topics", nargs="+", metavar="TOPIC")
    a.add_argument("--partitions", type=int, default=1)
    a.add_argument("--replication-factor", type=int, default=1)
    a.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    a.add_argument("--if-not-exists", action="store_true")
    a.add_argument("--validate-only", action="store_true")
    a = sub(actions, "delete", "delete topics")
    a.add_argument("topics", nargs="+", metavar="TOPIC")
    a.add_argument("--if-exists", action="store_true")
    a = sub(actions, "alter", "add partitions, set or remove topic configs")
    a.add_argument("topic")
    a.add_argument("--partitions", type=int, metavar="N", help="new total partition count")
    a.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    a.add_argument("--delete-config", action="append", default=[], metavar="KEY")
    a = sub(actions, "delete-records", "delete the records below an offset")
    a.add_argument("topic")
    a.add_argument("--partition", type=int, help="default: every partition")
    a.add_argument("--before", type=int, required=True, metavar="OFFSET", help="-1: everything (high watermark)")
    for name in ("create", "delete", "alter", "delete-records"):
        actions.choices[name].add_argument("--json", action="store_true", help="the outcome as JSON")
    for a in actions.choices.values():
        a.set_defaults(func=_run(_topics))

    p = subparsers.add_parser("groups", help="list, describe (with lag), reset and delete consumer and share groups")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = sub(actions, "list", "every group of every broker")
    a.add_argument("--json", action="store_true")
    a = sub(actions, "describe", "state, members, committed offsets and lag")
    a.add_argument("group")
    a.add_argument("--json", action="store_true")
    a = sub(actions, "delete", "delete empty groups")
    a.add_argument("groups", nargs="+", metavar="GROUP")
    a = sub(actions, "reset", "set an empty group's offsets of a topic")
    a.add_argument("group")
    a.add_argument("--topic", required=True)
    a.add_argument("--partition", type=int, help="default: every partition")
    to = a.add_mutually_exclusive_group(required=True)
    to.add_argument("--to", metavar="earliest|latest|MS", help="an offset spec: earliest, latest or a time in ms")
    to.add_argument("--to-offset", type=int, metavar="OFFSET")
    a.add_argument("--dry-run", action="store_true", help="print the offsets, commit nothing")
    for name in ("delete", "reset"):
        actions.choices[name].add_argument("--json", action="store_true", help="the outcome as JSON")
    for a in actions.choices.values():
        a.set_defaults(func=_run(_groups))

    from kproto.client.admin import ACL_OPERATIONS, ACL_PATTERN_TYPES, ACL_PERMISSIONS, ACL_RESOURCE_TYPES

    p = subparsers.add_parser("acls", help="list, create and delete ACLs")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = sub(actions, "create", "allow (or --deny) principals operations on a resource")
    a.add_argument("--resource-type", required=True, choices=sorted(set(ACL_RESOURCE_TYPES) - {"any"}))
    a.add_argument("--resource-name", required=True)
    a.add_argument("--principal", required=True, help="e.g. User:alice")
    a.add_argument("--operation", required=True, action="append", choices=sorted(set(ACL_OPERATIONS) - {"any"}))
    a.add_argument("--host", default="*")
    a.add_argument("--deny", action="store_true")
    a.add_argument("--prefixed", action="store_true", help="every resource whose name starts with the name")
    a.add_argument("--json", action="store_true", help="the ACLs created, as JSON")
    for name, what in (("list", "the ACLs matching the filter"), ("delete", "delete the ACLs matching the filter")):
        a = sub(actions, name, what)
        a.add_argument("--resource-type", default="any", choices=sorted(ACL_RESOURCE_TYPES))
        a.add_argument("--resource-name")
        a.add_argument("--pattern-type", default="any", choices=sorted(ACL_PATTERN_TYPES))
        a.add_argument("--principal")
        a.add_argument("--host")
        a.add_argument("--operation", default="any", choices=sorted(ACL_OPERATIONS))
        a.add_argument("--permission", default="any", choices=sorted(ACL_PERMISSIONS))
        a.add_argument("--json", action="store_true")
    for a in actions.choices.values():
        a.set_defaults(func=_run(_acls))

    p = subparsers.add_parser("offsets", help="a topic's offsets: earliest, latest, max timestamp or at a time")
    _add_common(p)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="default: every partition")
    p.add_argument("--time", default="latest", metavar="earliest|latest|max_timestamp|MS")
    p.add_argument("--isolation", default="read_uncommitted", choices=["read_uncommitted", "read_committed"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run(_offsets))

    p = subparsers.add_parser("configs", help="describe (and set or delete) a topic's or broker's configs")
    _add_common(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--broker", type=int, metavar="ID")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--delete", action="append", default=[], metavar="KEY")
    p.add_argument("--all", action="store_true", help="also configs at their defaults")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_run(_configs))
