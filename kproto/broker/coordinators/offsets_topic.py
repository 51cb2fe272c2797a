"""``__consumer_offsets``: which partition holds a group, and its records' bytes.

Shared by the classic group coordinator (:mod:`kproto.broker.coordinators.group`) and the KIP-848 one
(:mod:`kproto.broker.coordinators.consumer_group`), which write to the same topic.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kproto.codecs import message
from kproto.javahash import java_string_hash

__all__ = ["OFFSETS_TOPIC", "OffsetAndMetadata", "partition_for", "record_key", "record_value"]

OFFSETS_TOPIC = "__consumer_offsets"
_I16 = struct.Struct(">h")


def partition_for(group_id: str, partitions: int) -> int:
    """``Utils.abs(groupId.hashCode) % partitions`` (Kafka's ``partitionFor``)."""
    h = java_string_hash(group_id)
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    record_offset: int = -1  # where it is in __consumer_offsets (txn commits compare these)


def record_key(record_type: int, obj: Any) -> bytes:
    """A coordinator record's key: its type, then the key message at version 0."""
    return _I16.pack(record_type) + message(type(obj).__name__).encode(obj, 0)


def record_value(version: int, obj: Any) -> bytes:
    """A coordinator record's value: its version, then the value message at that version."""
    return _I16.pack(version) + message(type(obj).__name__).encode(obj, version)
