"""Java's ``String.hashCode`` and ``java.util.HashMap`` iteration order, wherever Kafka's bytes
or results depend on them (assignor tie-breaks, SASL extensions, ``meta.properties``)."""
from __future__ import annotations

import struct
from typing import Callable, Iterable, TypeVar, overload

__all__ = ["java_string_hash", "java_long_hash", "java_hash_order", "hashmap_capacity",
           "hashmap_copy_capacity", "concurrent_hashmap_capacity", "bucket",
           "topic_partition_hash", "JavaHashSet"]


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` as an unsigned 32-bit value (over UTF-16 code units)."""
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & 0xFFFFFFFF
        return h
    b = s.encode("utf-16-be", "surrogatepass")
    for (u,) in struct.iter_unpack(">H", b):
        h = (31 * h + u) & 0xFFFFFFFF
    return h


def bucket(h: int, capacity: int) -> int:
    """HashMap's bucket of a key whose ``hashCode()`` is ``h`` (unsigned) in a table of ``capacity``."""
    return (h ^ (h >> 16)) & (capacity - 1)


def hashmap_capacity(n: int) -> int:
    """Table size of a default-constructed HashMap after ``n`` puts (doubles past 3/4 full)."""
    cap = 16
    while n > cap * 3 // 4:
        cap *= 2
    return cap


def concurrent_hashmap_capacity(n: int) -> int:
    """Table size of a ``ConcurrentHashMap(8)`` (what ``java.util.Properties`` holds) after
    ``n`` puts: 16, doubling once 3/4 of it is reached."""
    cap = 16
    while n >= cap * 3 // 4:
        cap *= 2
    return cap


def java_long_hash(v: int) -> int:
    """``Long.hashCode()`` (unsigned): the two 32-bit halves xor-ed."""
    v &= 0xFFFFFFFFFFFFFFFF
    return (v ^ (v >> 32)) & 0xFFFFFFFF


def hashmap_copy_capacity(n: int) -> int:
    """Table size of ``new HashMap<>(m)`` for a map of ``n`` entries: tableSizeFor(n / 0.75 + 1)."""
    t = int(n / 0.75 + 1.0)
    return 1 << max(t - 1, 0).bit_length()


_K = TypeVar("_K")


@overload
def java_hash_order(keys: Iterable[str]) -> list[str]: ...
@overload
def java_hash_order(keys: Iterable[_K], hash_fn: Callable[[_K], int], capacity: int | None = None) -> list[_K]: ...


def java_hash_order(keys: Iterable, hash_fn: Callable = java_string_hash, capacity: int | None = None) -> list:
    """The iteration order of a ``java.util.HashMap`` after putting ``keys`` in order (a
    default-constructed one unless ``capacity`` gives its table size)."""
    keys = list(keys)
    cap = hashmap_capacity(len(keys)) if capacity is None else capacity
    return [k for _, _, k in sorted((bucket(hash_fn(k), cap), i, k) for i, k in enumerate(keys))]


def topic_partition_hash(tp: tuple[str, int]) -> int:
    """``TopicPartition.hashCode()`` (unsigned): ``31 * (31 + partition) + topic.hashCode()``."""
    return (31 * (31 + tp[1]) + java_string_hash(tp[0])) & 0xFFFFFFFF


class JavaHashSet:
    """A ``HashSet<TopicPartition>`` whose :meth:`first` is what ``iterator().next()`` returns.

    Not modelled: Java's extra resize/treeification when one bucket chain exceeds 8 entries
    (needs 9+ colliding partitions moved between the same two members)."""

    __slots__ = ("_seq", "_n", "_cap")

    def __init__(self) -> None:
        self._seq: dict = {}
        self._n = 0
        self._cap = 16

    def add(self, tp) -> None:
        if tp not in self._seq:
            self._seq[tp] = self._n
            self._n += 1
            if len(self._seq) > self._cap * 3 // 4:
                self._cap *= 2  # the table never shrinks on removal

    def discard(self, tp) -> None:
        self._seq.pop(tp, None)

    def __len__(self) -> int:
        return len(self._seq)

    def first(self):
        cap = self._cap
        return min(self._seq, key=lambda tp: (bucket(topic_partition_hash(tp), cap), self._seq[tp]))
