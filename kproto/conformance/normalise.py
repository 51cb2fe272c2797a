"""Decoded responses as plain trees, and the named normalisation applied before comparing
(sans-I/O).

:func:`to_tree` turns a response object into nested dicts/lists holding only the fields of the
version it was read at (record batches decoded into their header fields and records). A
:class:`Normaliser` then replaces what legitimately differs between two brokers, each by a
named rule of :data:`RULES` (cluster id, node ids, hosts and ports, broker-set timestamps,
throttle, generated ids, error message text, log directory paths); it records every field it
touched so that the report can list them. Identifier rules keep identity: the n-th distinct
topic id a broker hands out becomes ``<topic_id#n>`` on both sides, so "the same id in two
answers" is still checked. Sentinels (-1, "", null, the zero UUID) are never replaced.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Set, Tuple

from kproto.codecs import Uuid, response
from kproto.errors import DecodeError
from kproto.records import RecordBatch, iter_batches

__all__ = ["Rule", "RULES", "NODE_ROLES", "Keyed", "KEY_FIELDS", "Normaliser", "to_tree", "generic_path"]


def _records_tree(data: Any) -> Any:
    if data is None:
        return None
    out: List[Any] = []
    try:
        for b in iter_batches(bytes(data)):
            if not isinstance(b, RecordBatch):
                out.append({"legacy_message": repr(b)})
                continue
            out.append({
                "base_offset": b.base_offset, "partition_leader_epoch": b.partition_leader_epoch,
                "magic": b.magic, "attributes": b.attributes, "last_offset_delta": b.last_offset_delta,
                "first_timestamp": b.first_timestamp, "max_timestamp": b.max_timestamp,
                "producer_id": b.producer_id, "producer_epoch": b.producer_epoch,
                "base_sequence": b.base_sequence, "count": b.count, "is_control": b.is_control,
                "records": [{"offset": r.offset, "timestamp": r.timestamp, "key": _hex(r.key),
                             "value": _hex(r.value),
                             "headers": [[k, _hex(v)] for k, v in r.headers]}
                            for r in b.records()],
            })
    except DecodeError as exc:
        out.append({"undecodable": str(exc)})
    return out


def _hex(v: Any) -> Any:
    return None if v is None else bytes(v).hex()


def _plan_tree(obj: Any, plan: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for f, _tagged, _default, sub in plan.entries:
        v = getattr(obj, f.attr)
        out[f.attr] = _value(f, v, sub)
    return out


class Keyed(dict):
    """An array of structs compared as a map from its key to the entry (see :data:`KEY_FIELDS`):
    paths read ``configs[retention.ms].value``; an entry one side lacks is one difference."""


#: Fields that identify an entry of an array of structs, besides Kafka's own ``mapKey`` ones,
#: first found wins. Arrays keyed so are compared as maps: their order is the broker's choice
#: (Kafka's follows its hash maps), not the protocol's.
KEY_FIELDS = ("name", "group_id", "topic", "resource_name", "transactional_id", "partition_index",
              "partition", "api_key")


def _key_fields(sub: Any) -> List[str]:
    attrs = [g.attr for g, *_ in sub.entries]
    keys = [g.attr for g, *_ in sub.entries if g.map_key]
    if not keys:
        keys = [k for k in KEY_FIELDS if k in attrs][:1]
    # a generated value (a topic id) differs between brokers: no key then
    return [] if any(k in _BY_FIELD for k in keys) else keys


def _value(f: Any, v: Any, sub: Any) -> Any:
    if v is None:
        return None
    if f.is_array:
        items = [_scalar(f.element_type, x, sub) for x in v]
        if sub is not None:
            keys = _key_fields(sub)
            if keys:
                by_key = Keyed((",".join(str(d[k]) for k in keys), d) for d in items)
                if len(by_key) == len(items):
                    return Keyed(sorted(by_key.items()))
        return items
    return _scalar(f.element_type, v, sub)


def _scalar(et: str, v: Any, sub: Any) -> Any:
    if v is None:
        return None
    if sub is not None:
        return _plan_tree(v, sub)
    if et == "records":
        return _records_tree(v)
    if et == "bytes":
        return bytes(v).hex()
    if et == "uuid":
        return str(Uuid(v))
    return v


def to_tree(api_key: int, version: int, obj: Any) -> Dict[str, Any]:
    """A response object of ``api_key`` read at ``version`` as plain values: the version's
    fields only, bytes as hex, UUIDs in Kafka's base64 form, records decoded, arrays that are
    maps in Kafka's schema (``mapKey``) sorted by their key."""
    return _plan_tree(obj, response(api_key).json_plan(version))


@dataclass(frozen=True)
class Rule:
    """A named normalisation: fields called one of ``fields`` (their last path component) are
    replaced. ``kind``: ``id`` keeps identity (n-th distinct value -> ``<name#n>``), ``constant``
    replaces every non-sentinel value with ``<name>``, ``zero`` with 0."""

    name: str
    fields: FrozenSet[str]
    kind: str
    why: str


def _r(name: str, fields: str, kind: str, why: str) -> Rule:
    return Rule(name, frozenset(fields.split()), kind, why)


#: The normalisation, in the order applied (a field matches the first rule naming it).
RULES: Tuple[Rule, ...] = (
    _r("cluster_id", "cluster_id", "constant", "each cluster has its own id"),
    _r("node_ids", "node_id leader_id controller_id broker_id replica_nodes isr_nodes "
       "offline_replicas eligible_leader_replicas last_known_elr preferred_replica "
       "coordinator_id replica_id", "id", "node ids are the deployment's choice"),
    _r("hosts_ports", "host port", "constant", "listeners differ"),
    _r("timestamps", "log_append_time_ms last_timestamp transaction_start_time_ms "
       "last_heartbeat_timestamp last_caught_up_timestamp last_fetch_timestamp",
       "constant", "set from the broker's clock (also: the timestamps of control batches)"),
    _r("throttle", "throttle_time_ms", "zero", "depends on load and quotas"),
    _r("topic_ids", "topic_id", "id", "generated by the broker"),
    _r("member_ids", "member_id leader", "id", "generated by the coordinator (client id + random UUID)"),
    _r("producer_ids", "producer_id", "id", "allocated by the broker"),
    _r("session_ids", "session_id", "id", "fetch session ids are random"),
    _r("error_messages", "error_message", "constant", "free text, not protocol: null vs set is kept"),
    _r("log_dirs", "log_dir", "constant", "file system paths"),
    _r("directory_ids", "directory_id", "id", "generated per log directory"),
    _r("incarnation_ids", "incarnation_id", "id", "generated per broker start"),
    _r("feature_epochs", "finalized_features_epoch", "constant",
       "the metadata log offset of the broker's feature levels: the node's history"),
)

#: In cluster mode this replaces ``node_ids``: a node id becomes the node's role in the answer
#: (``<leader>`` / ``<follower>`` beside a partition's ``leader_id``, ``<coordinator>`` in
#: FindCoordinator, else ``<broker>``) and replica lists become sorted lists of roles (sets),
#: as two clusters number and place their nodes differently.
NODE_ROLES = Rule("node_roles", RULES[1].fields, "role",
                  "in a cluster, node ids are compared by role (leader, follower, coordinator, broker)")

_BY_FIELD: Dict[str, Rule] = {}
for _rule in RULES:
    for _f in _rule.fields:
        _BY_FIELD.setdefault(_f, _rule)

_SENTINELS = (None, -1, "", str(Uuid.ZERO))


def generic_path(path: str) -> str:
    """``topics[3].partitions[0].error_code`` -> ``topics[].partitions[].error_code``."""
    out, depth = [], 0
    for ch in path:
        if ch == "[":
            depth += 1
            out.append("[]")
        elif ch == "]":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


class Normaliser:
    """Applies :data:`RULES` to the answers one broker gave within one scenario run (ids are
    numbered across the whole run). ``touched`` collects ``(rule, api, generic path)``."""

    def __init__(self, rules: Tuple[Rule, ...] = RULES, *, cluster: bool = False) -> None:
        if cluster:
            rules = tuple(NODE_ROLES if r.name == "node_ids" else r for r in rules)
        self._by_field = {f: r for r in reversed(rules) for f in r.fields}
        self._ids: Dict[Tuple[str, Any], str] = {}
        self._count: Dict[str, int] = {}
        self.touched: Set[Tuple[str, str, str]] = set()

    def _id(self, rule: str, value: Any) -> str:
        key = (rule, value)
        if key not in self._ids:
            self._count[rule] = self._count.get(rule, 0) + 1
            self._ids[key] = f"<{rule}#{self._count[rule]}>"
        return self._ids[key]

    def _replace(self, rule: Rule, value: Any, role: Optional[Callable[[Any], str]] = None) -> Any:
        if isinstance(value, list):
            out = [self._replace(rule, x, role) for x in value]
            # replicas as a set of roles: the order is the cluster's placement
            return sorted(out, key=str) if rule.kind == "role" else out
        if value in _SENTINELS:
            return value
        if rule.kind == "role":
            assert role is not None
            return role(value)
        if rule.kind == "zero":
            return 0
        if rule.kind == "constant":
            return f"<{rule.name}>"
        return self._id(rule.name, value)

    def _control_batch(self, api: str, batch: Dict[str, Any], path: str) -> Dict[str, Any]:
        # a transaction marker is written with the broker's clock
        batch = dict(batch)
        for k in ("first_timestamp", "max_timestamp"):
            batch[k] = "<timestamps>"
            self.touched.add(("timestamps", api, generic_path(f"{path}.{k}")))
        batch["records"] = [{**r, "timestamp": "<timestamps>"} for r in batch["records"]]
        self.touched.add(("timestamps", api, generic_path(f"{path}.records[].timestamp")))
        return batch

    @staticmethod
    def _roles(api: str, tree: Dict[str, Any]) -> Callable[[Any], str]:
        """The role of a node id within one struct of an answer (cluster mode)."""
        leader = tree.get("leader_id")
        if isinstance(leader, int) and leader >= 0:
            return lambda n: "<leader>" if n == leader else "<follower>"
        if api == "FindCoordinator":
            return lambda n: "<coordinator>"
        return lambda n: "<broker>"

    def apply(self, api: str, tree: Any, path: str = "") -> Any:
        """A normalised copy of ``tree`` (the answer of API ``api``)."""
        if isinstance(tree, dict) and tree.get("is_control"):
            tree = self._control_batch(api, tree, path)
        if isinstance(tree, Keyed):
            return Keyed((k, self.apply(api, v, f"{path}[{k}]")) for k, v in tree.items())
        if isinstance(tree, dict):
            out = {}
            role = self._roles(api, tree)
            for k, v in tree.items():
                p = f"{path}.{k}" if path else k
                rule = self._by_field.get(k)
                if rule is not None and not isinstance(v, dict) and not (
                        isinstance(v, list) and v and isinstance(v[0], dict)):
                    new = self._replace(rule, v, role)
                    if new != v:
                        self.touched.add((rule.name, api, generic_path(p)))
                    out[k] = new
                else:
                    out[k] = self.apply(api, v, p)
            return out
        if isinstance(tree, list):
            return [self.apply(api, x, f"{path}[{i}]") for i, x in enumerate(tree)]
        return tree


def first_rule(field_name: str) -> Optional[Rule]:
    """The rule that normalises a field of that name, if any."""
    return _BY_FIELD.get(field_name)
