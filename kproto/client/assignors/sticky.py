"""The sticky assignors (``StickyAssignor``, ``CooperativeStickyAssignor``), both on
``AbstractStickyAssignor`` with its constrained and general paths and their rack-aware variants,
and the sticky user data their members send."""
from __future__ import annotations

import bisect
import struct
from typing import Callable, Iterable, Mapping

from kproto.client.assignors.base import (DEFAULT_GENERATION, AssignmentError, ClusterTopics,
                                          Subscription, _jstr, _member_sort_key,
                                          _partition_racks, _subscribed_topics, _use_rack_aware)
from kproto.javahash import JavaHashSet, java_hash_order
from kproto.topic_partition import TopicPartitionKey

# ---- sticky user data (StickyAssignor's STICKY_ASSIGNOR_USER_DATA_V0/V1 Struct) ---------------

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def encode_sticky_user_data(partitions: Iterable[TopicPartitionKey], generation: int | None) -> bytes:
    """``StickyAssignor.serializeTopicPartitionAssignment`` (V1 layout; generation -1 if None).
    Partitions are grouped by topic in first-appearance order (``CollectionUtils.groupPartitionsByTopic``)."""
    grouped: dict[str, list[int]] = {}
    for t, p in partitions:
        grouped.setdefault(t, []).append(p)
    out = [_I32.pack(len(grouped))]
    for t, ps in grouped.items():
        tb = t.encode("utf-8")
        out += [_I16.pack(len(tb)), tb, _I32.pack(len(ps)), struct.pack(f">{len(ps)}i", *ps)]
    out.append(_I32.pack(DEFAULT_GENERATION if generation is None else generation))
    return b"".join(out)


def _read_topic_partitions(buf: memoryview, pos: int) -> tuple[list, int]:
    n = _I32.unpack_from(buf, pos)[0]
    pos += 4
    if n < 0:
        raise ValueError("negative array size")
    parts: list[TopicPartitionKey] = []
    for _ in range(n):
        ln = _I16.unpack_from(buf, pos)[0]
        pos += 2
        if ln < 0 or pos + ln > len(buf):
            raise ValueError("bad string length")
        topic = bytes(buf[pos:pos + ln]).decode("utf-8", "replace")
        pos += ln
        k = _I32.unpack_from(buf, pos)[0]
        pos += 4
        if k < 0 or pos + 4 * k > len(buf):
            raise ValueError("bad array size")
        parts.extend((topic, p) for p in struct.unpack_from(f">{k}i", buf, pos))
        pos += 4 * k
    return parts, pos


def decode_sticky_user_data(data: bytes | None) -> tuple[list, int | None]:
    """``StickyAssignor.memberData``: (owned partitions, generation or None) from user data, trying
    the V1 layout, then V0, and giving ``([], -1)`` for bytes neither can read (as Kafka does)."""
    if not data:
        return [], None
    buf = memoryview(data)
    try:
        parts, pos = _read_topic_partitions(buf, 0)
        return parts, _I32.unpack_from(buf, pos)[0]
    except (ValueError, struct.error):
        pass
    try:
        return _read_topic_partitions(buf, 0)[0], None
    except (ValueError, struct.error):
        return [], DEFAULT_GENERATION


# ---- AbstractStickyAssignor ------------------------------------------------------------------------

class _SortedMembers:
    """``TreeSet<String>`` ordered by (current assignment size, member id)."""

    __slots__ = ("_keys", "_key_of", "_sizes", "_names")

    def __init__(self, sizes: Callable[[str], int]) -> None:
        self._keys: list[tuple[int, bytes, str]] = []
        self._key_of: dict[str, tuple[int, bytes, str]] = {}
        self._sizes = sizes
        self._names: dict[str, bytes] = {}

    def add(self, m: str) -> None:
        if m in self._key_of:
            return
        name = self._names.get(m)
        if name is None:
            name = self._names[m] = _jstr(m)
        k = (self._sizes(m), name, m)
        self._key_of[m] = k
        bisect.insort(self._keys, k)

    def remove(self, m: str) -> None:
        k = self._key_of.pop(m, None)
        if k is not None:
            del self._keys[bisect.bisect_left(self._keys, k)]

    def first(self) -> str:
        return self._keys[0][2]

    def last(self) -> str:
        return self._keys[-1][2]

    def __iter__(self):
        return iter([m for _, _, m in self._keys])

    def __len__(self) -> int:
        return len(self._keys)


class _PartitionMovements:
    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[str, str], JavaHashSet]] = {}
        self.moves: dict = {}

    def _remove(self, tp) -> tuple[str, str]:
        pair = self.moves.pop(tp)
        for_topic = self.by_topic[tp[0]]
        s = for_topic[pair]
        s.discard(tp)
        if not len(s):
            del for_topic[pair]
        if not for_topic:
            del self.by_topic[tp[0]]
        return pair

    def _add(self, tp, pair) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp[0], {}).setdefault(pair, JavaHashSet()).add(tp)

    def move(self, tp, old: str, new: str) -> None:
        if tp in self.moves:
            src = self._remove(tp)[0]
            if src != new:
                self._add(tp, (src, new))
        else:
            self._add(tp, (old, new))

    def actual_partition_to_move(self, tp, old: str, new: str):
        for_topic = self.by_topic.get(tp[0])
        if for_topic is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        s = for_topic.get((new, old))
        return tp if s is None else s.first()


class _RackInfo:
    def __init__(self, per_topic: dict[str, list[frozenset]], order: list[str],
                 subscriptions: Mapping[str, Subscription]) -> None:
        consumers_by_rack: dict[str, list[str]] = {}
        for m in order:
            rack_id = subscriptions[m].rack_id
            if rack_id:
                consumers_by_rack.setdefault(rack_id, []).append(m)
        partition_racks: dict = {}
        all_racks: set = set()
        if consumers_by_rack:
            for t, racks in per_topic.items():
                for p, r in enumerate(racks):
                    partition_racks[(t, p)] = r
                    all_racks |= r
        if _use_rack_aware(set(consumers_by_rack), all_racks, partition_racks.values()):
            self.consumer_racks = {c: r for r, cs in consumers_by_rack.items() for c in cs}
            self.partition_racks = partition_racks
        else:
            self.consumer_racks, self.partition_racks = {}, {}
        # computed from all partitions whenever some member has a rack, even if rack-aware
        # assignment is off: Kafka then still orders unassigned partitions by it
        self.num_consumers = {tp: sum(len(consumers_by_rack.get(r, ())) for r in racks)
                              for tp, racks in partition_racks.items()}

    def mismatch(self, consumer: str, tp) -> bool:
        rack = self.consumer_racks.get(consumer)
        if rack is None:
            return False
        replica_racks = self.partition_racks.get(tp)
        return replica_racks is None or rack not in replica_racks

    def sort_by_rack_consumers(self, partitions: list) -> list:
        if not self.num_consumers:
            return partitions
        return sorted(partitions, key=lambda tp: self.num_consumers.get(tp, 0))

    def next_rack_consumer(self, tp, consumers: list[str], first: int) -> int:
        racks = self.partition_racks.get(tp)
        if not racks:
            return -1
        n = len(consumers)
        for i in range(n):
            idx = (first + i) % n
            if self.consumer_racks.get(consumers[idx]) in racks:
                return idx
        return -1


def _two_pointer_unassigned(all_sorted: list, assigned_sorted: list) -> list:
    # Kafka's getUnassignedPartitions, literally: an assigned partition missing from the full
    # list (an out-of-range owned partition) makes every later partition count as unassigned
    out = []
    it = iter(assigned_sorted)
    nxt = next(it)
    add_directly = False
    for tp in all_sorted:
        if add_directly or tp != nxt:
            out.append(tp)
        else:
            nxt = next(it, _END)
            if nxt is _END:
                add_directly = True
    return out


_END = object()


class _StickyRun:
    """One ``AbstractStickyAssignor.assignPartitions`` call."""

    def __init__(self, cluster: ClusterTopics, subscriptions: Mapping[str, Subscription],
                 member_data: Callable[[Subscription], tuple[list, int | None]]) -> None:
        self.subs = subscriptions
        self.member_data = member_data
        self.order = java_hash_order(subscriptions)
        self.per_topic = _partition_racks(cluster, _subscribed_topics(subscriptions))
        self.counts = {t: len(r) for t, r in self.per_topic.items()}
        self.total = sum(self.counts.values())
        self.rack = _RackInfo(self.per_topic, self.order, subscriptions)
        self.max_generation = DEFAULT_GENERATION
        self.transferring: dict | None = None

    def run(self) -> dict[str, list]:
        owned: dict[str, list] = {}
        multi: set = set()
        if self._all_subscriptions_equal(owned, multi):
            self.transferring = {}
            return self._constrained(owned, multi)
        self.transferring = None
        return self._general(owned)

    def _all_subscriptions_equal(self, owned: dict[str, list], multi: set) -> bool:
        equal = True
        subscribed: set = set()
        prev_owner: dict = {}
        for m in self.order:
            sub = self.subs[m]
            if not subscribed:
                subscribed.update(sub.topics)
            elif equal and not (len(sub.topics) == len(subscribed) and subscribed.issuperset(sub.topics)):
                equal = False
            parts, gen = self.member_data(sub)
            gen = DEFAULT_GENERATION if gen is None else gen
            self.max_generation = max(self.max_generation, gen)
            mine = owned[m] = []
            for tp in parts:
                if tp[0] not in self.counts:
                    continue
                other = prev_owner.get(tp)
                if other is None:
                    mine.append(tp)
                    prev_owner[tp] = m
                    continue
                other_gen = self.subs[other].generation_id
                other_gen = DEFAULT_GENERATION if other_gen is None else other_gen
                if gen == other_gen:
                    multi.add(tp)
                    _remove_first(owned[other], tp)
                    prev_owner[tp] = m
                elif gen > other_gen:
                    mine.append(tp)
                    _remove_first(owned[other], tp)
                    prev_owner[tp] = m
        return equal

    def _all_sorted_by_topic(self) -> list:
        return [(t, p) for t in sorted(self.counts) for p in range(self.counts[t])]

    # -- constrained path --------------------------------------------------------------------
    def _constrained(self, current: dict[str, list], multi: set) -> dict[str, list]:
        rack, transferring = self.rack, self.transferring
        assert transferring is not None  # run() sets it before taking the constrained path
        n = len(current)
        min_q, max_q = self.total // n, -(-self.total // n)
        expected_over = self.total % n
        over = 0
        maybe_revoked: dict = {}  # owned partition not kept -> its previous owner
        under: list[str] = []
        exact: list[str] = []
        assignment: dict[str, list] = {m: [] for m in current}
        assigned: list = []
        c: str | None  # None: the rack-aware round robin found no consumer for a partition
        for c, parts in current.items():
            mine = []
            for tp in parts:
                if rack.mismatch(c, tp):
                    maybe_revoked[tp] = c
                else:
                    mine.append(tp)
            mine.sort(key=lambda tp: (tp[1], tp[0]))
            for tp in multi:
                if tp in mine:
                    mine.remove(tp)
            if len(mine) < min_q:
                assignment[c].extend(mine)
                assigned.extend(mine)
                under.append(c)
            elif len(mine) >= max_q and over < expected_over:
                over += 1
                if over == expected_over:
                    exact.clear()
                assignment[c].extend(mine[:max_q])
                assigned.extend(mine[:max_q])
                maybe_revoked.update(dict.fromkeys(mine[max_q:], c))
            else:
                assignment[c].extend(mine[:min_q])
                assigned.extend(mine[:min_q])
                maybe_revoked.update(dict.fromkeys(mine[min_q:], c))
                if over < expected_over:
                    exact.append(c)

        all_sorted = self._all_sorted_by_topic()
        unassigned = _two_pointer_unassigned(all_sorted, sorted(assigned)) if assigned else all_sorted
        under.sort(key=_jstr)
        exact.sort(key=_jstr)
        unassigned = rack.sort_by_rack_consumers(unassigned)

        def give(tp, c) -> int:
            lst = assignment[c]
            lst.append(tp)
            if maybe_revoked.get(tp, c) != c or tp in multi:
                transferring[tp] = c
            return len(lst)

        if rack.consumer_racks:  # assignRackAwareRoundRobin
            nxt = 0
            left: list[TopicPartitionKey] = []
            for tp in unassigned:
                c = None
                idx = rack.next_rack_consumer(tp, under, nxt)
                if idx >= 0:
                    c = under[idx]
                    count = len(assignment[c]) + 1
                    if count >= min_q:
                        under.remove(c)
                        if count < max_q and over < expected_over:
                            exact.append(c)
                    else:
                        idx += 1
                    nxt = idx % len(under) if under else 0
                elif exact:
                    first = rack.next_rack_consumer(tp, exact, 0)
                    if first >= 0:
                        c = exact[first]
                        if len(assignment[c]) + 1 == max_q:
                            del exact[first]
                            over += 1
                            if over == expected_over:
                                exact.clear()
                if c is None:
                    left.append(tp)
                else:
                    give(tp, c)
            unassigned = left

        pos, last = 0, -1  # a Java iterator over `under`
        for tp in unassigned:
            if pos < len(under):
                c, last = under[pos], pos
                pos += 1
            elif not under and not exact:
                raise AssignmentError("No more unfilled consumers to be assigned.")
            elif not under:
                c = exact.pop(0)
            else:
                c, last, pos = under[0], 0, 1
            count = give(tp, c)
            if count == min_q:
                del under[last]
                pos = last
                exact.append(c)
            elif count == max_q:
                over += 1

        if under:
            if over != expected_over:
                raise AssignmentError("We haven't reached the expected number of members with more than "
                                      "the minQuota partitions, but no more partitions to be assigned")
            for c in under:
                if len(assignment[c]) != min_q:
                    raise AssignmentError(f"Consumer: [{c}] doesn't reach minQuota partitions, "
                                          "and no more partitions to be assigned")
        return assignment

    # -- general path --------------------------------------------------------------------------
    def _general(self, current: dict[str, list]) -> dict[str, list]:
        subs, rack, counts = self.subs, self.rack, self.counts
        topic_consumers: dict[str, list[str]] = {t: [] for t in counts}
        consumer_topics: dict[str, list[str]] = {}
        for m in self.order:
            mine = consumer_topics[m] = []
            for t in subs[m].topics:
                if t in counts:
                    mine.append(t)
                    topic_consumers[t].append(m)
            current.setdefault(m, [])
        owner: dict = {}
        for c, parts in current.items():
            for tp in parts:
                owner[tp] = c
        sorted_topics = sorted(topic_consumers, key=lambda t: (len(topic_consumers[t]), t))
        all_partitions = [(t, p) for t in sorted_topics for p in range(counts[t])]
        members = _SortedMembers(lambda m: len(current[m]))

        # prepopulateCurrentAssignments: the previous owner from an older generation
        prev: dict = {}
        for m in self.order:
            parts, gen = self.member_data(subs[m])
            if gen is not None and gen < self.max_generation:
                g = gen
            elif gen is None and self.max_generation > DEFAULT_GENERATION:
                g = DEFAULT_GENERATION
            else:
                continue
            for tp in parts:
                if tp not in prev or g > prev[tp][1]:
                    prev[tp] = (m, g)

        # assignOwnedPartitions
        revocation_required = False
        assigned: list = []
        for c, parts in current.items():
            topics = subs[c].topics
            keep = []
            for tp in parts:
                if tp[0] not in topic_consumers:
                    owner.pop(tp, None)
                elif tp[0] not in topics or rack.mismatch(c, tp):
                    revocation_required = True
                else:
                    keep.append(tp)
                    assigned.append(tp)
            parts[:] = keep

        if assigned:
            assigned.sort(key=lambda tp: (len(topic_consumers[tp[0]]), tp[0], tp[1]))
            unassigned = _two_pointer_unassigned(all_partitions, assigned)
        else:
            unassigned = all_partitions
        for m in current:
            members.add(m)

        # getMaxAssignmentSize per member: all its subscribed partitions
        max_size = {c: self.total if len(ts) == len(counts) else sum(counts[t] for t in ts)
                    for c, ts in consumer_topics.items()}

        def assign_one(tp, use_racks: bool) -> bool:
            for c in members:
                if tp[0] in consumer_topics[c] and not (use_racks and rack.mismatch(c, tp)):
                    members.remove(c)
                    current[c].append(tp)
                    owner[tp] = c
                    members.add(c)
                    return True
            return False

        # balance()
        initializing = not current[members.last()]
        to_assign = unassigned
        if rack.consumer_racks:
            to_assign = [tp for tp in unassigned
                         if not (topic_consumers[tp[0]] and assign_one(tp, True))]
        for tp in to_assign:
            if topic_consumers[tp[0]]:
                assign_one(tp, False)

        fixed_topics = {t for t, cs in topic_consumers.items() if len(cs) < 2}
        all_partitions = [tp for tp in all_partitions if tp[0] not in fixed_topics]
        unassigned = [tp for tp in unassigned if tp[0] not in fixed_topics]

        def can_participate(c: str) -> bool:
            parts = current[c]
            if len(parts) < max_size[c]:
                return True
            return any(len(topic_consumers[tp[0]]) >= 2 for tp in parts)

        fixed: dict[str, list] = {}
        for c in consumer_topics:
            if not can_participate(c):
                members.remove(c)
                fixed[c] = current.pop(c)

        pre_balance = {c: list(p) for c, p in current.items()}
        pre_owner = dict(owner)
        movements = _PartitionMovements()

        def is_balanced() -> bool:
            if len(current[members.first()]) >= len(current[members.last()]) - 1:
                return True
            # `owner` maps every partition in `current` to its holder (Java rebuilds this map)
            for c in members:
                parts = current[c]
                n = len(parts)
                topics = consumer_topics[c]
                if n == max_size[c]:
                    continue
                have = set(parts)
                for t in topics:
                    for p in range(counts[t]):
                        tp = (t, p)
                        if tp not in have and n + 1 < len(current[owner[tp]]):
                            return False
            return True

        def process_move(tp, new: str) -> None:
            old = owner[tp]
            members.remove(old)
            members.remove(new)
            movements.move(tp, old, new)
            current[old].remove(tp)
            current[new].append(tp)
            owner[tp] = new
            members.add(new)
            members.add(old)

        def reassign(tp, new: str | None = None) -> None:
            if new is None:
                new = next(c for c in members if tp[0] in consumer_topics[c])
            process_move(movements.actual_partition_to_move(tp, owner[tp], new), new)

        def perform(partitions: list) -> bool:
            performed = False
            modified = True
            while modified:
                modified = False
                for tp in partitions:
                    if is_balanced():
                        break
                    c = owner[tp]
                    size = len(current[c])
                    before = prev.get(tp)
                    # Java dereferences the previous owner's assignment even when that member
                    # was set aside as fixed (NullPointerException); we skip such owners instead
                    if before is not None and before[0] in current and \
                            size > len(current[before[0]]) + 1:
                        reassign(tp, before[0])
                        performed = modified = True
                        continue
                    found = False
                    c_rack = rack.consumer_racks.get(c)
                    p_racks = rack.partition_racks.get(tp)
                    if c_rack is not None and p_racks and c_rack in p_racks:
                        for other in topic_consumers[tp[0]]:
                            o_rack = rack.consumer_racks.get(other)
                            if o_rack is None or o_rack not in p_racks:
                                continue
                            if size > len(current[other]) + 1:
                                reassign(tp)
                                performed = modified = found = True
                                break
                    if not found:
                        for other in topic_consumers[tp[0]]:
                            if size > len(current[other]) + 1:
                                reassign(tp)
                                performed = modified = True
                                break
            return performed

        if not revocation_required:
            perform(unassigned)
        performed = perform(all_partitions)
        if not initializing and performed and _balance_score(current) >= _balance_score(pre_balance):
            current.clear()
            current.update(pre_balance)
            owner.clear()
            owner.update(pre_owner)
        current.update(fixed)
        return current


def _remove_first(lst: list, item) -> None:
    try:
        lst.remove(item)
    except ValueError:
        pass


def _balance_score(assignment: dict[str, list]) -> int:
    sizes = sorted(len(v) for v in assignment.values())
    # sum over pairs of |a - b|, computed on sorted sizes
    return sum(s * (2 * i - len(sizes) + 1) for i, s in enumerate(sizes))


def _sticky_member_data(sub: Subscription) -> tuple[list, int | None]:
    # StickyAssignor: eager protocol, so owned partitions and generation come from user data
    return decode_sticky_user_data(sub.user_data)


def _cooperative_member_data(sub: Subscription) -> tuple[list, int | None]:
    if sub.generation_id is not None:
        return list(sub.owned_partitions), sub.generation_id
    if sub.user_data is None:
        return list(sub.owned_partitions), None
    # COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0: a single INT32 generation
    gen = _I32.unpack_from(sub.user_data)[0] if len(sub.user_data) >= 4 else DEFAULT_GENERATION
    return list(sub.owned_partitions), gen


def sticky_assign(cluster: ClusterTopics, subscriptions: Mapping[str, Subscription]) -> dict[str, list]:
    """``StickyAssignor`` (eager): balanced, keeping previous owners (read from user data)."""
    return _StickyRun(cluster, subscriptions, _sticky_member_data).run()


def cooperative_sticky_assign(cluster: ClusterTopics, subscriptions: Mapping[str, Subscription]) -> dict[str, list]:
    """``CooperativeStickyAssignor``: the sticky result minus partitions that change owner (they
    are revoked first and assigned in the next round)."""
    run = _StickyRun(cluster, subscriptions, _cooperative_member_data)
    assignment = run.run()
    transferring = run.transferring
    if transferring is None:
        added: dict = {}
        revoked: set = set()
        for c, parts in assignment.items():
            owned = list(subscriptions[c].owned_partitions)
            owned_set, parts_set = set(owned), set(parts)
            for tp in parts:
                if tp not in owned_set:
                    added[tp] = c
            revoked.update(tp for tp in owned if tp not in parts_set)
        transferring = {tp: c for tp, c in added.items() if tp in revoked}
    for tp, c in transferring.items():
        _remove_first(assignment[c], tp)
    return assignment
