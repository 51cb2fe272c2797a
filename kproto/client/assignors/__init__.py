"""Consumer-group partition assignors, giving the same answers as Kafka 3.9's Java assignors.

``range`` (``RangeAssignor``, rack-aware), ``roundrobin`` (``RoundRobinAssignor``), ``sticky``
(``StickyAssignor``) and ``cooperative-sticky`` (``CooperativeStickyAssignor``), both sticky ones
built on ``AbstractStickyAssignor`` with its constrained (all members subscribe to the same topics)
and general paths and its rack-aware variants.

Inputs are plain data: the cluster is a mapping ``topic -> partition count`` or
``topic -> [replica racks of partition 0, of partition 1, ...]`` (a rack may be None), and the
group is a mapping ``member_id -> Subscription`` in the order the members were put into Java's
``GroupSubscription`` map. Partitions are ``(topic, partition)`` tuples.

Java iterates several ``HashMap``/``HashSet`` instances whose order leaks into the result (which
member keeps its owned partitions first, which moved partition is moved back). Those iteration
orders are reproduced from Java's ``String.hashCode``/``TopicPartition.hashCode`` and HashMap's
bucket layout (:func:`java_hash_order`); Kafka's result itself depends on insertion order only
when two keys share a bucket.

The package: :mod:`~kproto.client.assignors.base` (inputs, shared rules),
:mod:`~kproto.client.assignors.eager` (range, round robin), :mod:`~kproto.client.assignors.sticky`
(sticky, cooperative-sticky, sticky user data); Java's hash orders are in :mod:`kproto.javahash`.
"""
from __future__ import annotations

from typing import Callable, Mapping

from kproto.client.assignors.base import (DEFAULT_GENERATION, AssignmentError, ClusterTopics,
                                          Subscription)
from kproto.client.assignors.eager import range_assign, roundrobin_assign
from kproto.client.assignors.sticky import (cooperative_sticky_assign, decode_sticky_user_data,
                                            encode_sticky_user_data, sticky_assign)
from kproto.javahash import java_hash_order, java_string_hash

__all__ = [
    "Subscription", "ClusterTopics", "AssignmentError", "ASSIGNORS", "assign",
    "range_assign", "roundrobin_assign", "sticky_assign", "cooperative_sticky_assign",
    "encode_sticky_user_data", "decode_sticky_user_data", "java_string_hash", "java_hash_order",
]


ASSIGNORS: dict[str, Callable[[ClusterTopics, Mapping[str, Subscription]], dict[str, list]]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": cooperative_sticky_assign,
}


def assign(name: str, cluster: ClusterTopics, subscriptions: Mapping[str, Subscription]) -> dict[str, list]:
    """Run the assignor Kafka calls ``name`` (``range``, ``roundrobin``, ``sticky``,
    ``cooperative-sticky``); returns ``member_id -> [(topic, partition), ...]`` for every member."""
    try:
        fn = ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown assignor {name!r}; known: {', '.join(ASSIGNORS)}") from None
    return fn(cluster, subscriptions)
