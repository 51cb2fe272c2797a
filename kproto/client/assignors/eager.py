"""The eager assignors without memory of earlier assignments: ``range`` (``RangeAssignor``,
rack-aware) and ``roundrobin`` (``RoundRobinAssignor``)."""
from __future__ import annotations

from typing import Mapping

from kproto.javahash import java_hash_order

from kproto.client.assignors.base import (ClusterTopics, Subscription, _member_sort_key,
                                          _partition_racks, _subscribed_topics, _use_rack_aware)

# ---- range -------------------------------------------------------------------------------------

class _RangeTopic:
    __slots__ = ("topic", "consumers", "partition_racks", "unassigned", "assigned", "per_consumer",
                 "extra", "needs_rack_aware")

    def __init__(self, topic: str, racks: list[frozenset], members: list[tuple[str, tuple[int, bytes]]],
                 consumer_racks: dict[str, str]) -> None:
        self.topic = topic
        self.consumers: dict[str, str | None] = {}
        for m, _ in sorted(members, key=lambda x: x[1]):
            self.consumers.setdefault(m, consumer_racks.get(m))
        n = len(racks)
        self.unassigned = dict.fromkeys((topic, p) for p in range(n))  # ordered set
        self.assigned = dict.fromkeys(self.consumers, 0)
        self.per_consumer = n // len(self.consumers) if self.consumers else 0
        self.extra = n % len(self.consumers) if self.consumers else 0
        all_consumer_racks = {consumer_racks[m] for m, _ in members if m in consumer_racks}
        if all_consumer_racks:
            self.partition_racks = {(topic, p): r for p, r in enumerate(racks)}
            all_partition_racks = set().union(*racks)
        else:
            self.partition_racks = {}
            all_partition_racks = set()
        self.needs_rack_aware = _use_rack_aware(all_consumer_racks, all_partition_racks,
                                                self.partition_racks.values())

    def racks_match(self, consumer: str, tp) -> bool:
        rack = self.consumers[consumer]
        if rack is None:
            return True
        replica_racks = self.partition_racks.get(tp)
        return replica_racks is not None and rack in replica_racks

    def max_assignable(self, consumer: str) -> int:
        return max(0, self.per_consumer + (1 if self.extra > 0 else 0) - self.assigned[consumer])

    def on_assigned(self, consumer: str, tps: list) -> None:
        self.assigned[consumer] += len(tps)
        if self.assigned[consumer] > self.per_consumer:
            self.extra -= 1
        for tp in tps:
            self.unassigned.pop(tp, None)


def range_assign(cluster: ClusterTopics, subscriptions: Mapping[str, Subscription]) -> dict[str, list]:
    """``RangeAssignor``: per topic, contiguous ranges to members in (instance id, member id) order;
    rack-aware when member and replica racks allow it."""
    order = java_hash_order(subscriptions)
    per_topic = _partition_racks(cluster, _subscribed_topics(subscriptions))
    consumer_racks = {m: r for m in order if (r := subscriptions[m].rack_id)}
    members_of: dict[str, list] = {}
    for m in order:
        sub = subscriptions[m]
        for t in sub.topics:
            members_of.setdefault(t, []).append((m, _member_sort_key(m, sub)))
    states = [_RangeTopic(t, racks, members_of.get(t, []), consumer_racks) for t, racks in per_topic.items()]
    assignment: dict[str, list] = {m: [] for m in subscriptions}

    def give(consumer, tps, state):
        assignment[consumer].extend(tps)
        state.on_assigned(consumer, tps)

    def assign_ranges(state, may_assign):
        for c in state.consumers:
            if not state.unassigned:
                break
            limit = state.max_assignable(c)
            tps = [tp for tp in state.unassigned if may_assign(c, tp)][:limit]
            if tps:
                give(c, tps, state)

    use_rack_aware = any(s.needs_rack_aware for s in states)
    if use_rack_aware:
        groups: dict = {}
        for s in states:
            groups.setdefault(tuple(s.consumers.items()), {}).setdefault(len(s.partition_racks), []).append(s)
        for consumers_key, by_count in groups.items():
            for num_partitions, co in by_count.items():
                if len(co) > 1:
                    remaining = [c for c, _ in consumers_key]
                    for p in range(num_partitions):
                        match = next((c for c in remaining if all(
                            t.racks_match(c, (t.topic, p)) and t.max_assignable(c) > 0 for t in co)), None)
                        if match is None:
                            continue
                        for t in co:
                            give(match, [(t.topic, p)], t)
                        if not any(t.max_assignable(match) > 0 for t in co):
                            remaining.remove(match)
                            if not remaining:
                                break
                elif co[0].needs_rack_aware:
                    assign_ranges(co[0], co[0].racks_match)
    for s in states:
        assign_ranges(s, lambda c, tp: True)
    if use_rack_aware:
        for lst in assignment.values():
            lst.sort()
    return assignment


# ---- round robin ---------------------------------------------------------------------------------

def roundrobin_assign(cluster: ClusterTopics, subscriptions: Mapping[str, Subscription]) -> dict[str, list]:
    """``RoundRobinAssignor``: all partitions in (topic, partition) order dealt to members in
    (instance id, member id) order, skipping members not subscribed to the topic."""
    per_topic = _partition_racks(cluster, _subscribed_topics(subscriptions))
    assignment: dict[str, list] = {m: [] for m in subscriptions}
    members = sorted(java_hash_order(subscriptions), key=lambda m: _member_sort_key(m, subscriptions[m]))
    topic_sets = {m: set(subscriptions[m].topics) for m in members}
    i, n = 0, len(members)
    for topic in sorted(_subscribed_topics(subscriptions)):
        if topic not in per_topic:
            continue
        for p in range(len(per_topic[topic])):
            while topic not in topic_sets[members[i]]:
                i = (i + 1) % n
            assignment[members[i]].append((topic, p))
            i = (i + 1) % n
    return assignment
