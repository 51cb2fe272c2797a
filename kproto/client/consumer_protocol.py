"""The consumer protocol: subscription and assignment bytes exchanged through JoinGroup/SyncGroup.

Kafka's ``ConsumerProtocol``: an int16 version followed by a ``ConsumerProtocolSubscription`` or
``ConsumerProtocolAssignment`` body (encoded by kproto's schema codec). Like Kafka:

- subscriptions are written with topics sorted and owned partitions sorted by (topic, partition),
  grouped per topic; assignments group partitions per topic in first-appearance order;
- a version above the highest known (3 for subscriptions, 3 for assignments) is read and written
  as the highest known one, and bytes after the known fields are ignored (newer members append
  fields there);
- fields a version lacks (owned partitions before v1, generation before v2, rack before v3) are
  silently dropped when writing, since they are ignorable.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from kproto.client.assignors import Subscription
from kproto.topic_partition import TopicPartitionKey
from kproto.errors import DecodeError, EncodeError

__all__ = ["Subscription", "Assignment", "encode_subscription", "decode_subscription",
           "encode_assignment", "decode_assignment", "SUBSCRIPTION_VERSIONS", "ASSIGNMENT_VERSIONS"]

SUBSCRIPTION_VERSIONS = range(0, 4)
ASSIGNMENT_VERSIONS = range(0, 4)
_VERSION = struct.Struct(">h")
_codecs: dict[str, object] = {}


def _codec(name: str):
    c = _codecs.get(name)
    if c is None:
        from kproto.codecs import message  # imported lazily to keep this module cheap

        c = _codecs[name] = message(name)
    return c


@dataclass
class Assignment:
    """What the leader gives one member (``ConsumerPartitionAssignor.Assignment``)."""

    partitions: list = field(default_factory=list)
    user_data: bytes | None = None


def _clamp(version: int, versions: range, what: str) -> int:
    if version < 0:
        raise EncodeError(f"{what} version must be >= 0, got {version}")
    return min(version, versions[-1])


def _group(partitions: Iterable[TopicPartitionKey]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for topic, p in partitions:
        grouped.setdefault(topic, []).append(p)
    return grouped


def encode_subscription(sub: Subscription, version: int = 3) -> bytes:
    """``ConsumerProtocol.serializeSubscription``: version prefix + subscription body."""
    version = _clamp(version, SUBSCRIPTION_VERSIONS, "subscription")
    codec = _codec("ConsumerProtocolSubscription")
    tp_cls = codec.cls.TopicPartition
    owned = [tp_cls(topic=t, partitions=ps) for t, ps in _group(sorted(sub.owned_partitions)).items()]
    obj = codec.cls(topics=sorted(sub.topics), user_data=sub.user_data, owned_partitions=owned,
                    generation_id=-1 if sub.generation_id is None else sub.generation_id,
                    rack_id=sub.rack_id)
    return _VERSION.pack(version) + codec.encode(obj, version)


def _read_version(data, what: str) -> int:
    if len(data) < 2:
        raise DecodeError("no version prefix", what=what, offset=0)
    version = _VERSION.unpack_from(data)[0]
    if version < 0:
        raise DecodeError(f"negative version {version}", what=what, offset=0)
    return version


def decode_subscription(data: bytes | bytearray | memoryview) -> tuple[Subscription, int]:
    """``ConsumerProtocol.deserializeSubscription``: (subscription, version on the wire).

    A generation of -1 and an empty rack read as None, as Kafka reads them as absent."""
    version = _read_version(data, "ConsumerProtocolSubscription")
    obj, _ = _codec("ConsumerProtocolSubscription").decode_from(
        data, 2, min(version, SUBSCRIPTION_VERSIONS[-1]))
    owned = [(tp.topic, p) for tp in obj.owned_partitions for p in tp.partitions]
    user_data = None if obj.user_data is None else bytes(obj.user_data)
    sub = Subscription(topics=list(obj.topics), user_data=user_data, owned_partitions=owned,
                       generation_id=None if obj.generation_id == -1 else obj.generation_id,
                       rack_id=obj.rack_id or None)
    return sub, version


def encode_assignment(assignment: Assignment | Sequence[TopicPartitionKey], version: int = 3) -> bytes:
    """``ConsumerProtocol.serializeAssignment``: version prefix + assignment body."""
    if not isinstance(assignment, Assignment):
        assignment = Assignment(list(assignment))
    version = _clamp(version, ASSIGNMENT_VERSIONS, "assignment")
    codec = _codec("ConsumerProtocolAssignment")
    tp_cls = codec.cls.TopicPartition
    parts = [tp_cls(topic=t, partitions=ps) for t, ps in _group(assignment.partitions).items()]
    obj = codec.cls(assigned_partitions=parts, user_data=assignment.user_data)
    return _VERSION.pack(version) + codec.encode(obj, version)


def decode_assignment(data: bytes | bytearray | memoryview) -> tuple[Assignment, int]:
    """``ConsumerProtocol.deserializeAssignment``: (assignment, version on the wire)."""
    version = _read_version(data, "ConsumerProtocolAssignment")
    obj, _ = _codec("ConsumerProtocolAssignment").decode_from(
        data, 2, min(version, ASSIGNMENT_VERSIONS[-1]))
    parts = [(tp.topic, p) for tp in obj.assigned_partitions for p in tp.partitions]
    user_data = None if obj.user_data is None else bytes(obj.user_data)
    return Assignment(parts, user_data), version
