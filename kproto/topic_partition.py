"""Partitions named as Kafka names them, one definition for the whole package."""
from __future__ import annotations

from typing import NamedTuple, Optional

from kproto.codecs.primitives import Uuid

__all__ = ["TopicPartition", "TopicIdPartition", "TopicPartitionKey"]

#: What the client APIs take and give for a partition: any ``(topic, partition)`` pair (a
#: :class:`TopicPartition` is one).
TopicPartitionKey = tuple[str, int]


class TopicPartition(NamedTuple):
    """A partition named by topic name (Kafka's ``TopicPartition``); a tuple, so ``("t", 0)``
    compares and hashes equal to it."""

    topic: Optional[str]
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class TopicIdPartition(NamedTuple):
    """A partition named by topic id and name (Kafka's ``TopicIdPartition``); the name may be
    None on a broker that cannot resolve the id."""

    topic_id: Uuid
    topic: Optional[str]
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"
