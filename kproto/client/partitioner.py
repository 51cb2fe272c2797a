"""The Java producer's partitioning, bit for bit.

Keyed records go to ``to_positive(murmur2(key)) % num_partitions`` (``Utils.murmur2``,
``Utils.toPositive``, ``BuiltInPartitioner.partitionForKey``). Keyless records use the sticky
partitioner of KIP-480/KIP-794 (:class:`StickyPartitioner`): stay on one partition until about
``batch.size`` bytes were appended to it, then pick the next one uniformly at random among the
available partitions, or weighted by queue sizes once :meth:`StickyPartitioner.update_load_stats`
was given them (adaptive partitioning).

Everything here is sans-I/O: the caller tells the partitioner what it appended and which
partitions are available.
"""
from __future__ import annotations

import bisect
import random as _random
import struct
from typing import TYPE_CHECKING, Callable, Sequence

from kproto.accelerators import load

if TYPE_CHECKING:
    import numpy as np

__all__ = ["murmur2", "murmur2_batch", "to_positive", "partition_for_key", "partitions_for_keys",
           "StickyPartitioner"]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS: dict[int, struct.Struct] = {}  # word count -> precompiled little-endian uint32 unpacker


def _words(n: int) -> struct.Struct:
    s = _WORDS.get(n)
    if s is None:
        s = _WORDS[n] = struct.Struct(f"<{n}I")
    return s


def _murmur2_py(data: bytes | bytearray | memoryview) -> int:
    """:func:`murmur2` in pure Python (the reference of the C one)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length >> 2
    if n4:
        for k in _words(n4).unpack_from(data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


_speedups = load("kproto.records._speedups")
#: Kafka's ``Utils.murmur2`` (32-bit MurmurHash2, seed 0x9747b28c) as a signed 32-bit int: the
#: records accelerator's when it is built, else the pure Python one.
murmur2: Callable[[bytes | bytearray | memoryview], int] = (
    _speedups.murmur2 if _speedups is not None else _murmur2_py)


def murmur2_batch(keys: Sequence[bytes]) -> "np.ndarray":
    """:func:`murmur2` of many keys at once (int32 array), vectorised over keys of equal length."""
    import numpy as np

    out = np.empty(len(keys), dtype=np.int32)
    by_len: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        by_len.setdefault(len(key), []).append(i)
    m = np.uint32(_M)
    for length, idx in by_len.items():
        if len(idx) < 8:  # numpy's per-call overhead loses on tiny groups
            for i in idx:
                out[i] = murmur2(keys[i])
            continue
        raw = np.frombuffer(b"".join(keys[i] for i in idx), dtype=np.uint8).reshape(len(idx), length)
        h = np.full(len(idx), (_SEED ^ length) & _MASK, dtype=np.uint32)
        n4 = length >> 2
        if n4:
            words = np.ascontiguousarray(raw[:, : n4 * 4]).view("<u4")
            for j in range(n4):
                k = words[:, j] * m
                k ^= k >> np.uint32(24)
                k *= m
                h *= m
                h ^= k
        tail = length & 3
        if tail:
            base = length & ~3
            if tail == 3:
                h ^= raw[:, base + 2].astype(np.uint32) << np.uint32(16)
            if tail >= 2:
                h ^= raw[:, base + 1].astype(np.uint32) << np.uint32(8)
            h ^= raw[:, base].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
        out[np.asarray(idx)] = h.view(np.int32)
    return out


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> "np.ndarray":
    """:func:`partition_for_key` for many keys at once (int64 array)."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return (murmur2_batch(keys).astype("int64") & 0x7FFFFFFF) % num_partitions


def to_positive(n: int) -> int:
    """``Utils.toPositive``: clear the sign bit (``n & 0x7fffffff``), which is not ``abs(n)``."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a record with this serialized key."""
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Per-topic sticky partition choice for keyless records, as ``BuiltInPartitioner`` does it.

    Workflow per record (single-threaded, so Java's compare-and-set races do not arise)::

        p = sp.partition(available, num_partitions)   # current sticky partition
        ... append the record to p's batch ...
        sp.on_append(appended_bytes, available, num_partitions, enable_switch=batch_ready)

    ``random`` returns a non-negative int, like ``Utils.toPositive(ThreadLocalRandom.nextInt())``;
    pass a deterministic one for tests.
    """

    def __init__(self, sticky_batch_size: int, random: Callable[[], int] | None = None) -> None:
        if sticky_batch_size < 1:
            raise ValueError(f"sticky_batch_size must be >= 1 but got {sticky_batch_size}")
        self.sticky_batch_size = sticky_batch_size
        self._random = random or (lambda: _random.getrandbits(31))
        self._current: int | None = None
        self._produced = 0
        # adaptive load stats: cumulative frequency table and partition ids, or None
        self._cft: list[int] | None = None
        self._ids: list[int] | None = None

    @property
    def current(self) -> int | None:
        """The sticky partition, or None before the first record."""
        return self._current

    def _next_partition(self, available: Sequence[int], num_partitions: int) -> int:
        r = self._random()
        if self._cft is None:
            if available:
                return available[r % len(available)]
            return r % num_partitions
        # first index whose cumulative value is strictly greater than r % total
        assert self._ids is not None  # set together with _cft
        return self._ids[bisect.bisect_right(self._cft, r % self._cft[-1])]

    def partition(self, available: Sequence[int], num_partitions: int) -> int:
        """The partition for the next keyless record (``peekCurrentPartitionInfo``).

        ``available`` lists the partitions that have a leader (``Cluster.availablePartitionsForTopic``);
        when it is empty any of ``range(num_partitions)`` may be chosen.
        """
        if self._current is None:
            self._current = self._next_partition(available, num_partitions)
            self._produced = 0
        return self._current

    def on_append(self, appended_bytes: int, available: Sequence[int], num_partitions: int,
                  enable_switch: bool = True) -> None:
        """Account appended bytes; switch partition after ``sticky_batch_size`` bytes
        (``updatePartitionInfo``), or after twice that even when switching is disabled."""
        if self._current is None:
            return
        self._produced += appended_bytes
        if (self._produced >= self.sticky_batch_size and enable_switch) or \
                self._produced >= 2 * self.sticky_batch_size:
            self._current = self._next_partition(available, num_partitions)
            self._produced = 0

    def update_load_stats(self, queue_sizes: Sequence[int] | None, partition_ids: Sequence[int],
                          length: int | None = None) -> None:
        """Feed per-partition queue sizes (``updatePartitionLoadStats``): shorter queues become
        proportionally more likely. ``length`` < ``len(queue_sizes)`` means the tail partitions were
        excluded for high latency. None, fewer than two partitions, or all-equal sizes disable it."""
        if queue_sizes is None:
            self._cft = self._ids = None
            return
        if len(queue_sizes) != len(partition_ids):
            raise ValueError("queue_sizes and partition_ids differ in length")
        n = len(queue_sizes) if length is None else length
        if n > len(queue_sizes):
            raise ValueError("length exceeds the number of queues")
        if n < 1 or len(queue_sizes) < 2:
            self._cft = self._ids = None
            return
        sizes = queue_sizes[:n]
        top = max(sizes) + 1
        if n == len(queue_sizes) and all(s == sizes[0] for s in sizes):
            self._cft = self._ids = None
            return
        cft, total = [], 0
        for s in sizes:
            total += top - s
            cft.append(total)
        self._cft, self._ids = cft, list(partition_ids[:n])
