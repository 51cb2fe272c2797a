"""What every assignor shares: the inputs (cluster topics, member subscriptions), the error, and
the handling of racks and member order that Kafka's assignors have in common."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence, Union

from kproto.errors import KprotoError
from kproto.javahash import java_hash_order
from kproto.topic_partition import TopicPartitionKey

#: topic -> partition count, or topic -> per-partition list of replica racks (None: no rack)
ClusterTopics = Mapping[str, Union[int, Sequence[Sequence[Union[str, None]]]]]

DEFAULT_GENERATION = -1


class AssignmentError(KprotoError):
    """The assignor reached a state Kafka's assignor reports as IllegalStateException."""


@dataclass
class Subscription:
    """What a member sent (``ConsumerPartitionAssignor.Subscription``).

    ``generation_id`` None means absent (-1 on the wire); ``group_instance_id`` comes from the
    JoinGroup member entry, not from the subscription bytes.
    """

    topics: Sequence[str]
    user_data: bytes | None = None
    owned_partitions: Sequence[TopicPartitionKey] = ()
    generation_id: int | None = None
    rack_id: str | None = None
    group_instance_id: str | None = None


# ---- shared input handling -------------------------------------------------------------------

def _partition_racks(cluster: ClusterTopics, topics: Iterable[str]) -> dict[str, list[frozenset]]:
    """``partitionsPerTopic``: subscribed topics with metadata and at least one partition, each
    with the set of non-null replica racks per partition, in Java's iteration order."""
    out: dict[str, list[frozenset]] = {}
    for t in java_hash_order(topics):
        meta = cluster.get(t)
        if meta is None:
            continue
        racks: list[frozenset]
        if isinstance(meta, int):
            racks = [frozenset()] * meta
        else:
            racks = [frozenset(r for r in replicas if r is not None) for replicas in meta]
        if racks:
            out[t] = racks
    return {t: out[t] for t in java_hash_order(out)}


def _subscribed_topics(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """``allSubscribedTopics``: every subscribed topic once, in first-seen order."""
    topics: dict[str, None] = {}
    for m in java_hash_order(subscriptions):
        topics.update(dict.fromkeys(subscriptions[m].topics))
    return list(topics)


def _jstr(s: str) -> bytes:
    """Sort key giving Java's ``String.compareTo`` order (UTF-16 code units), which differs from
    Python's code-point order for characters beyond U+FFFF. Member ids embed the client id, which
    may be any text; topic names and instance ids are ASCII by Kafka's rules."""
    return s.encode("utf-16-be", "surrogatepass")


def _member_sort_key(member_id: str, sub: Subscription) -> tuple[int, bytes]:
    # AbstractPartitionAssignor.MemberInfo.compareTo: static members first, by instance id
    gid = sub.group_instance_id
    return (0, _jstr(gid)) if gid is not None else (1, _jstr(member_id))


def _use_rack_aware(consumer_racks: set, partition_racks_all: set, racks_per_partition) -> bool:
    if not consumer_racks or consumer_racks.isdisjoint(partition_racks_all):
        return False
    return not all(r == partition_racks_all for r in racks_per_partition)
