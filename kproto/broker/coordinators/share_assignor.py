"""Kafka 4.4's share-group assignor (``SimpleAssignor``), sans-I/O.

Balance first, then stickiness: every member gets its share of the partitions (sizes differ by
at most one), a partition is shared by several members only when there are more members than
partitions (``ceil(members / partitions)`` each), and otherwise each member keeps what it has.
When every member subscribes to the same topics all their partitions are balanced together
(Kafka's ``SimpleHomogeneousAssignmentBuilder``), else each topic among its subscribers
(``SimpleHeterogeneousAssignmentBuilder``). Each builder takes the current assignment and:

1. drops the partitions of topics a member no longer subscribes to,
2. takes partitions from members holding more than their desired count,
3. takes members off partitions shared by more members than desired,
4. hands the partitions lacking members to the members lacking partitions, in turn.

Kafka walks its hash maps and sets in their iteration order, which decides who gets what when
several choices are equal; :class:`_JavaOrder` walks keys in the order a Java ``HashMap`` of
the same capacity does (bucket of the spread hash, then insertion), with Java's ``hashCode`` of
member ids (strings), topic ids and topic-partitions, so that the same group gets the same
assignment. Members whose ids fall in one bucket are taken in the order they joined.
"""
from __future__ import annotations

import math
from typing import Callable, Generic, Hashable, Iterable, Iterator, Mapping, Optional, TypeVar

from kproto.codecs.primitives import Uuid

__all__ = ["share_assign", "Assignment"]

#: A member's partitions: topic id -> partition indexes.
Assignment = dict[Uuid, set[int]]
_K = TypeVar("_K", bound=Hashable)
_TP = tuple[Uuid, int]


def _int32(x: int) -> int:
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def _string_hash(s: str) -> int:
    """Java's ``String.hashCode``."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def _uuid_hash(u: Uuid) -> int:
    """Kafka's ``Uuid.hashCode``: the two 64-bit halves xor-ed, then their 32-bit halves."""
    h = int.from_bytes(u[:8], "big") ^ int.from_bytes(u[8:], "big")
    return _int32((h >> 32) ^ h)


def _tp_hash(tp: _TP) -> int:
    """``TopicIdPartition.hashCode`` (a Java record: 31 * topic id's hash + partition)."""
    return _int32(31 * _uuid_hash(tp[0]) + tp[1])


def _table_size(c: int) -> int:
    """Java's ``HashMap.tableSizeFor``: the power of two at least ``c`` (at least 1)."""
    n = 1
    while n < c:
        n <<= 1
    return n


def _sized(n: int) -> int:
    """The table capacity of Kafka's ``AssignorHelpers.newHashMap(n)``/``newHashSet(n)``."""
    return _table_size(int((n + 1) / 0.75 + 1.0))


class _JavaOrder(Generic[_K]):
    """Keys in a Java ``HashMap``'s iteration order: by bucket of the spread hash in a table
    of ``capacity`` (doubled when more than 3/4 full, as Java does), then by insertion."""

    def __init__(self, hash_of: Callable[[_K], int], capacity: int = 16, keys: Iterable[_K] = ()) -> None:
        self._hash, self._cap = hash_of, capacity
        self._seq: dict[_K, int] = {}
        self._next = 0
        for k in keys:
            self.add(k)

    def add(self, key: _K) -> None:
        if key in self._seq:
            return
        self._seq[key] = self._next
        self._next += 1
        while len(self._seq) > self._cap * 3 // 4:
            self._cap *= 2

    def discard(self, key: _K) -> None:
        self._seq.pop(key, None)

    def _bucket(self, key: _K) -> int:
        h = self._hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (self._cap - 1)

    def __iter__(self) -> Iterator[_K]:
        return iter(sorted(self._seq, key=lambda k: (self._bucket(k), self._seq[k])))

    def __contains__(self, key: object) -> bool:
        return key in self._seq

    def __len__(self) -> int:
        return len(self._seq)


def _ints(keys: Iterable[int] = (), capacity: int = 16) -> _JavaOrder[int]:
    return _JavaOrder(lambda i: i, capacity, keys)


def _desired_counts(members: int, partitions: int) -> tuple[int, list[int]]:
    """(desired sharing of each partition, desired partition count of each member)."""
    sharing = 0 if partitions == 0 else (members + partitions - 1) // partitions
    precise = sharing * partitions / members
    return sharing, [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(members)]


def share_assign(members: Mapping[str, Iterable[Uuid]], assignable: Mapping[Uuid, list[int]],
                 current: Mapping[str, Mapping[Uuid, Iterable[int]]],
                 homogeneous: Optional[bool] = None) -> dict[str, Assignment]:
    """The target assignment of a share group: ``members`` maps each member id (in join
    order) to the ids of the existing topics it subscribes to, ``assignable`` each topic to
    its partitions whose share state is initialized, ``current`` each member to its target
    assignment so far; ``homogeneous``: whether all members subscribe to the same topic names
    (by default: to the same existing topics). Every member gets an entry."""
    order = list(_JavaOrder(_string_hash, 16, members))
    if not order:
        return {}
    subs = {m: set(members[m]) for m in order}
    old = [{t: set(ps) for t, ps in current.get(m, {}).items()} for m in order]
    if homogeneous is None:
        homogeneous = all(s == subs[order[0]] for s in subs.values())
    if homogeneous:
        new = _Homogeneous(order, subs[order[0]], assignable, old).build()
    else:
        new = _Heterogeneous(order, subs, assignable, old).build()
    out: dict[str, Assignment] = {}
    for i, m in enumerate(order):
        a = new[i]
        out[m] = {t: ps for t, ps in (a if a is not None else old[i]).items() if ps}
    return out


def _copy(a: Assignment) -> Assignment:
    return {t: set(ps) for t, ps in a.items()}


class _Builder:
    """What both of Kafka's builders keep: the members' assignments before (``old``) and the
    ones changed so far (``new``, copied from ``old`` at the first change)."""

    old: list[Assignment]
    new: list[Optional[Assignment]]

    def _new(self, i: int) -> Assignment:
        a = self.new[i]
        if a is None:
            a = self.new[i] = _copy(self.old[i])
        return a


class _Homogeneous(_Builder):
    """Kafka's ``SimpleHomogeneousAssignmentBuilder``: members (by index) all subscribed to ``topics``."""

    def __init__(self, members: list[str], topics: set[Uuid], assignable: Mapping[Uuid, list[int]],
                 old: list[Assignment]) -> None:
        self.topics = topics
        topic_order = _JavaOrder(_uuid_hash, _table_size(max(len(topics), 1) * 4 // 3 + 1), sorted(topics))
        self.targets = [(t, p) for t in topic_order for p in assignable.get(t, [])]
        self.m = len(members)
        self.sharing, self.desired = _desired_counts(self.m, len(self.targets))
        self.old = old
        self.new: list[Optional[Assignment]] = [None] * self.m
        self.by_partition: dict[_TP, _JavaOrder[int]] = {}
        self.partition_order: _JavaOrder[_TP] = _JavaOrder(_tp_hash, _sized(len(self.targets)))
        self.by_member: dict[int, _JavaOrder[_TP]] = {}
        self.unfilled = _ints(capacity=_sized(self.m))
        self.overfilled = _ints(capacity=_sized(self.m))

    def _on(self, tp: _TP) -> _JavaOrder[int]:
        if tp not in self.by_partition:
            self.by_partition[tp] = _ints()
            self.partition_order.add(tp)
        return self.by_partition[tp]

    def _mine(self, i: int) -> _JavaOrder[_TP]:
        if i not in self.by_member:
            self.by_member[i] = _JavaOrder(_tp_hash)
        return self.by_member[i]

    def build(self) -> list[Optional[Assignment]]:
        if not self.topics:
            return [{} for _ in range(self.m)]
        self._revoke_unassignable()
        self._revoke_overfilled()
        self._revoke_overshared()
        for tp in self.targets:
            self._on(tp)
        self._assign_remaining()
        return self.new

    def _revoke_unassignable(self) -> None:
        for i in range(self.m):
            held = 0
            for t in _JavaOrder(_uuid_hash, 16, self.old[i]):
                if t in self.topics:
                    for p in _ints(self.old[i][t]):
                        held += 1
                        self._on((t, p)).add(i)
                        self._mine(i).add((t, p))
                        if held >= self.desired[i]:
                            self._new(i)
                else:
                    del self._new(i)[t]
            if held < self.desired[i]:
                self.unfilled.add(i)
            elif held > self.desired[i]:
                self.overfilled.add(i)

    def _revoke_overfilled(self) -> None:
        for i in list(self.overfilled):
            mine = self.by_member[i]
            if len(mine) > self.desired[i]:
                for tp in list(mine):
                    self._new(i)[tp[0]].discard(tp[1])
                    self.by_partition[tp].discard(i)
                    mine.discard(tp)
                    if len(mine) == self.desired[i]:
                        break

    def _revoke_overshared(self) -> None:
        for tp in list(self.partition_order):
            on = self.by_partition[tp]
            count = len(on)
            if count <= self.sharing:
                continue
            for i in list(on):
                ps = self._new(i).get(tp[0])
                if ps is not None and tp[1] in ps:
                    ps.discard(tp[1])
                    count -= 1
                    on.discard(i)
                    self.by_member[i].discard(tp)
                    self.unfilled.add(i)
                if count <= self.sharing:
                    break

    def _assign_remaining(self) -> None:
        if not len(self.unfilled):
            return
        members = iter(list(self.unfilled))
        assigned_this_round = False
        i: Optional[int]
        for tp in list(self.partition_order):
            on = self.by_partition[tp]
            todo = self.sharing - len(on)
            while todo > 0:
                i = next(members, None)
                if i is None:
                    if not assigned_this_round:
                        break
                    members = iter(list(self.unfilled))
                    assigned_this_round = False
                    i = next(members, None)
                    if i is None:
                        break
                if i not in self.unfilled or i in on:
                    continue
                self._new(i).setdefault(tp[0], set()).add(tp[1])
                self._mine(i).add(tp)
                todo -= 1
                assigned_this_round = True
                if len(self.by_member[i]) >= self.desired[i]:
                    self.unfilled.discard(i)
            if not len(self.unfilled):
                break


class _Heterogeneous(_Builder):
    """Kafka's ``SimpleHeterogeneousAssignmentBuilder``: each topic balanced among its subscribers."""

    def __init__(self, members: list[str], subs: Mapping[str, set[Uuid]], assignable: Mapping[Uuid, list[int]],
                 old: list[Assignment]) -> None:
        self.m = len(members)
        self.old = old
        self.new: list[Optional[Assignment]] = [None] * self.m
        self.subscribers: dict[Uuid, list[int]] = {}
        for i, mid in enumerate(members):
            for t in subs[mid]:
                self.subscribers.setdefault(t, []).append(i)
        self.assignable = assignable

    def build(self) -> list[Optional[Assignment]]:
        for t in sorted(self.subscribers):  # topics are independent of each other
            self._topic(t, self.assignable.get(t, []), self.subscribers[t])
        return self.new

    def _topic(self, t: Uuid, partitions: list[int], subscribers: list[int]) -> None:
        sharing, counts = _desired_counts(len(subscribers), len(partitions))
        desired = [0] * self.m
        i: Optional[int]
        for pos, sub in enumerate(subscribers):
            desired[sub] = counts[pos]
        by_partition: dict[int, _JavaOrder[int]] = {}
        partition_order = _ints(capacity=_sized(len(partitions)))
        by_member: dict[int, _JavaOrder[int]] = {}

        def on(p: int) -> _JavaOrder[int]:
            if p not in by_partition:
                by_partition[p] = _ints()
                partition_order.add(p)
            return by_partition[p]

        def mine(i: int) -> _JavaOrder[int]:
            if i not in by_member:
                by_member[i] = _ints()
            return by_member[i]

        # 1. what members hold of the topic: a member that no longer subscribes to it wants
        # none of it (step 2 takes it away), as in Kafka
        for i in range(self.m):
            held = self.old[i].get(t)
            if held is not None:
                for p in _ints(held):
                    on(p).add(i)
                    mine(i).add(p)
        # 2. members holding too many
        for i in sorted(by_member):
            ps = by_member[i]
            if len(ps) > desired[i]:
                for p in list(ps):
                    if len(ps) <= desired[i]:
                        break
                    by_partition[p].discard(i)
                    ps.discard(p)
                    self._new(i)[t].discard(p)
        # 3. partitions shared too much
        for p in list(partition_order):
            holders = by_partition[p]
            count = len(holders)
            if count <= sharing:
                continue
            for i in list(holders):
                cur = self._new(i).get(t)
                if cur is not None and p in cur:
                    cur.discard(p)
                    count -= 1
                    holders.discard(i)
                    by_member[i].discard(p)
                if count <= sharing:
                    break
        for p in partitions:
            on(p)
        # 4. the partitions lacking members to the members lacking partitions
        unfilled = _ints((i for i in subscribers if len(by_member.get(i, ())) < desired[i]), _sized(self.m))
        members = iter(list(unfilled))
        assigned_this_round = False
        for p in list(partition_order):
            holders = by_partition[p]
            todo = sharing - len(holders)
            while todo > 0:
                i = next(members, None)
                if i is None:
                    if not assigned_this_round:
                        break
                    members = iter(list(unfilled))
                    assigned_this_round = False
                    i = next(members, None)
                    if i is None:
                        break
                if i not in unfilled or i in holders:
                    continue
                self._new(i).setdefault(t, set()).add(p)
                mine(i).add(p)
                todo -= 1
                assigned_this_round = True
                if len(by_member[i]) >= desired[i]:
                    unfilled.discard(i)
            if not len(unfilled):
                break
