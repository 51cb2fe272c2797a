"""Broker side of KIP-227: the fetch session cache and the per-request fetch contexts.

A sans-I/O port of Kafka 3.9's ``kafka.server.FetchSession.scala`` (``FetchSessionCacheShard``,
``FetchSessionCache``, ``FetchManager`` and the four ``FetchContext`` kinds). Time is passed in
(``now_ms``) and session ids come from an injectable :class:`random.Random`, so behaviour is
reproducible.

Typical use for one FetchRequest::

    ctx = cache.new_context(version, metadata, is_follower, fetch_data, to_forget, topic_names, now_ms)
    for tip, data in ctx.partitions():        # what to read (incremental: the whole session)
        updates[tip] = read_partition(tip, data)  # FetchResponse PartitionData objects
    answer = ctx.update_and_generate_response_data(updates)   # error, session id, partitions
"""
from __future__ import annotations

import random
from bisect import bisect_left, insort
from typing import Any, Callable, Iterator, Mapping, NamedTuple, Optional, Sequence

from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.fetch_session.model import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    ZERO_UUID,
    FetchMetadata,
    PartitionData,
    TopicIdPartition,
    next_epoch,
)

_INT32_MAX = 2**31 - 1

#: ``max.incremental.fetch.session.cache.slots`` default.
DEFAULT_MAX_SLOTS = 1000
#: ``KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``: how long a session is protected.
DEFAULT_EVICTION_MS = 120_000
#: Kafka 3.9 brokers split the slots over this many shards (``BrokerServer``).
KAFKA_NUM_SHARDS = 8


def _key(topic_id: Uuid, topic: Optional[str], partition: int) -> tuple:
    # CachedPartition equality: by topic id when there is one, else by name.
    return (topic_id if topic_id != ZERO_UUID else topic, partition)


class CachedPartition:
    """What a session remembers about one partition: the last request parameters, and the
    high watermark / log start offset last sent, so unchanged partitions can be left out."""

    __slots__ = ("topic_id_partition", "key", "req", "high_watermark", "local_log_start_offset")

    def __init__(self, part: TopicIdPartition, req: PartitionData, resp: Any = None) -> None:
        #: The partition as the broker names it (the name is None while the id is unresolved).
        self.topic_id_partition = part
        #: Identity within a session: (topic id, partition), or (name, partition) without ids.
        self.key = _key(*part)
        #: The last request parameters (Kafka keeps them as separate fields; same content).
        self.req = req
        self.high_watermark = -1 if resp is None else resp.high_watermark
        self.local_log_start_offset = -1 if resp is None else resp.log_start_offset

    @property
    def topic(self) -> Optional[str]:
        return self.topic_id_partition.topic

    @property
    def topic_id(self) -> Uuid:
        return self.topic_id_partition.topic_id

    @property
    def partition(self) -> int:
        return self.topic_id_partition.partition

    @property
    def fetch_offset(self) -> int:
        return self.req.fetch_offset

    def req_data(self) -> PartitionData:
        return self.req

    def update_request_params(self, req: PartitionData) -> None:
        self.req = req

    def maybe_resolve_unknown_name(self, topic_names: Mapping[Uuid, str]) -> None:
        tip = self.topic_id_partition
        if tip.topic is None:
            name = topic_names.get(tip.topic_id)
            if name is not None:
                self.topic_id_partition = TopicIdPartition(tip.topic_id, name, tip.partition)

    def maybe_update_response_data(self, resp: Any, update: bool) -> bool:
        """Whether an incremental response must carry this partition (``resp`` is a FetchResponse
        PartitionData): it has records, a new high watermark or log start offset, a preferred
        read replica, an error or a diverging epoch. With ``update`` the cached offsets are
        brought up to date."""
        records = resp.records
        must = records is not None and len(records) > 0
        hw = resp.high_watermark
        if self.high_watermark != hw:
            must = True
            if update:
                self.high_watermark = hw
        lso = resp.log_start_offset
        if self.local_log_start_offset != lso:
            must = True
            if update:
                self.local_log_start_offset = lso
        if resp.error_code != ErrorCode.NONE:
            # Forget the high watermark so the partition is sent again once the error clears.
            if update:
                self.high_watermark = -1
            return True
        return must or resp.preferred_read_replica != -1 or resp.diverging_epoch.epoch != -1

    def __repr__(self) -> str:
        return (f"CachedPartition({self.topic_id_partition}, fetch_offset={self.fetch_offset}, "
                f"high_watermark={self.high_watermark})")


class FetchSession:
    """One incremental fetch session held by the broker."""

    __slots__ = ("id", "privileged", "partition_map", "uses_topic_ids", "creation_ms", "last_used_ms",
                 "epoch", "cached_size")

    def __init__(self, session_id: int, privileged: bool, partition_map: dict[tuple, CachedPartition],
                 uses_topic_ids: bool, creation_ms: int, last_used_ms: int, epoch: int) -> None:
        self.id = session_id
        self.privileged = privileged
        #: Cached partitions in session order, keyed by (topic id or name, partition).
        self.partition_map = partition_map
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = creation_ms
        self.last_used_ms = last_used_ms
        #: The epoch the next request of this session must carry.
        self.epoch = epoch
        #: Size last recorded by the cache (-1: not in a cache).
        self.cached_size = -1

    @property
    def size(self) -> int:
        return len(self.partition_map)

    def is_empty(self) -> bool:
        return not self.partition_map

    @property
    def last_used_key(self) -> tuple[int, int]:
        return (self.last_used_ms, self.id)

    @property
    def evictable_key(self) -> tuple[bool, int, int]:
        # Ordering of Kafka's EvictableKey: unprivileged first, then smaller, then lower id.
        return (self.privileged, self.cached_size, self.id)

    @property
    def metadata(self) -> FetchMetadata:
        return FetchMetadata(self.id, self.epoch)

    def get_fetch_offset(self, part: TopicIdPartition) -> Optional[int]:
        cached = self.partition_map.get(_key(*part))
        return None if cached is None else cached.fetch_offset

    def update(self, fetch_data: Mapping[TopicIdPartition, PartitionData],
               to_forget: Sequence[TopicIdPartition]
               ) -> tuple[list[TopicIdPartition], list[TopicIdPartition], list[TopicIdPartition]]:
        """Apply an incremental request: add or update the listed partitions, then drop the
        forgotten ones. Returns (added, updated, removed)."""
        pm = self.partition_map
        added: list[TopicIdPartition] = []
        updated: list[TopicIdPartition] = []
        removed: list[TopicIdPartition] = []
        for part, req in fetch_data.items():
            k = _key(*part)
            cached = pm.get(k)
            if cached is None:
                pm[k] = CachedPartition(part, req)
                added.append(part)
            else:
                cached.update_request_params(req)
                updated.append(part)
        for part in to_forget:
            if pm.pop(_key(*part), None) is not None:
                removed.append(part)
        return added, updated, removed

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, size={self.size}, "
                f"uses_topic_ids={self.uses_topic_ids}, creation_ms={self.creation_ms}, "
                f"last_used_ms={self.last_used_ms}, epoch={self.epoch})")


class FetchSessionCacheShard:
    """A bounded set of sessions with Kafka's eviction rules (``FetchSessionCacheShard``).

    When full, a new session of ``size`` partitions may take the slot of:

    1. the least recently used session, if it has been idle for more than ``eviction_ms``; else
    2. the first session in (privileged, size, id) order among those it may evict, if that key
       is not greater than the newcomer's (privileged, size, 0): an unprivileged newcomer may
       only evict unprivileged sessions older than ``eviction_ms``; a privileged (follower)
       newcomer may evict any unprivileged session and privileged ones older than
       ``eviction_ms``.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 session_id_range: int = _INT32_MAX, shard_num: int = 0,
                 rng: Optional[random.Random] = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.session_id_range = session_id_range
        self.shard_num = shard_num
        self.rng = rng if rng is not None else random.Random()
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self._num_partitions = 0
        # Sorted lists standing in for Kafka's TreeMaps (first entry = smallest key).
        self._last_used: list[tuple[int, int]] = []
        self._evictable_by_all: list[tuple[bool, int, int]] = []
        self._evictable_by_privileged: list[tuple[bool, int, int]] = []

    def get(self, session_id: int) -> Optional[FetchSession]:
        return self.sessions.get(session_id)

    @property
    def size(self) -> int:
        return len(self.sessions)

    @property
    def total_partitions(self) -> int:
        return self._num_partitions

    def new_session_id(self) -> int:
        """A random id, unique in this shard, within the shard's id range (never 0)."""
        lo = max(1, self.shard_num * self.session_id_range)
        hi = (self.shard_num + 1) * self.session_id_range
        while True:
            sid = self.rng.randrange(lo, hi)
            if sid not in self.sessions and sid != INVALID_SESSION_ID:
                return sid

    def maybe_create_session(self, now_ms: int, privileged: bool, size: int, uses_topic_ids: bool,
                             create_partitions: Callable[[], dict[tuple, CachedPartition]]) -> int:
        """Create a session if there is a free slot or one can be evicted; returns its id, or
        INVALID_SESSION_ID (0) when the request stays sessionless."""
        if len(self.sessions) < self.max_entries or self._try_evict(privileged, (privileged, size, 0), now_ms):
            session = FetchSession(self.new_session_id(), privileged, create_partitions(), uses_topic_ids,
                                   now_ms, now_ms, next_epoch(INITIAL_EPOCH))
            self.sessions[session.id] = session
            self.touch(session, now_ms)
            return session.id
        return INVALID_SESSION_ID

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        if not self._last_used:
            return False
        last_used_ms, sid = self._last_used[0]
        if now_ms - last_used_ms > self.eviction_ms:
            self.remove(self.sessions[sid])
            self.evictions += 1
            return True
        candidates = self._evictable_by_privileged if privileged else self._evictable_by_all
        if not candidates or key < candidates[0]:
            return False
        self.remove(self.sessions[candidates[0][2]])
        self.evictions += 1
        return True

    def remove(self, session: FetchSession | int) -> Optional[FetchSession]:
        """Remove a session (or session id) from the cache; returns it, or None if absent."""
        if isinstance(session, int):
            found = self.sessions.get(session)
            if found is None:
                return None
            session = found
        _discard(self._last_used, session.last_used_key)
        key = session.evictable_key
        _discard(self._evictable_by_all, key)
        _discard(self._evictable_by_privileged, key)
        removed = self.sessions.pop(session.id, None)
        if removed is not None:
            self._num_partitions -= session.cached_size
        return removed

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Record a use of the session: update its LRU position and eviction key."""
        _discard(self._last_used, session.last_used_key)
        session.last_used_ms = now_ms
        insort(self._last_used, session.last_used_key)
        old_size = session.cached_size
        if old_size != -1:
            old_key = session.evictable_key
            _discard(self._evictable_by_privileged, old_key)
            _discard(self._evictable_by_all, old_key)
            self._num_partitions -= old_size
        session.cached_size = session.size
        key = session.evictable_key
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        if not session.privileged or old_enough:
            insort(self._evictable_by_privileged, key)
        if old_enough:
            insort(self._evictable_by_all, key)
        self._num_partitions += session.cached_size


def _discard(keys: list, key: tuple) -> None:
    i = bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        del keys[i]


class FetchContextResponse(NamedTuple):
    """What a context answers: the FetchResponse's top-level fields and its partitions, in
    order (``partitions`` maps each partition to the response PartitionData the broker read)."""

    error_code: int
    throttle_time_ms: int
    session_id: int
    partitions: dict[TopicIdPartition, Any]


class FetchContext:
    """How one FetchRequest is served (Kafka's ``FetchContext``)."""

    def get_fetch_offset(self, part: TopicIdPartition) -> Optional[int]:
        raise NotImplementedError

    def partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionData]]:
        """The partitions to read for this request (``foreachPartition``)."""
        raise NotImplementedError

    def update_and_generate_response_data(self, updates: dict[TopicIdPartition, Any]) -> FetchContextResponse:
        """Given the data read for every partition of :meth:`partitions`, the response to send.
        ``updates`` may be pruned in place (incremental contexts drop unchanged partitions)."""
        raise NotImplementedError

    def get_throttled_response(self, throttle_time_ms: int) -> FetchContextResponse:
        """The empty response sent instead when the fetcher is throttled (KIP-219)."""
        return FetchContextResponse(ErrorCode.NONE, throttle_time_ms, INVALID_SESSION_ID, {})


class SessionErrorContext(FetchContext):
    """The request named a session that is unknown, at another epoch, or using topic ids
    differently: answer with just the error."""

    def __init__(self, error_code: int, metadata: FetchMetadata) -> None:
        self.error_code = error_code
        self.metadata = metadata

    def get_fetch_offset(self, part: TopicIdPartition) -> Optional[int]:
        return None

    def partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionData]]:
        return iter(())

    def update_and_generate_response_data(self, updates: dict[TopicIdPartition, Any]) -> FetchContextResponse:
        return FetchContextResponse(self.error_code, 0, INVALID_SESSION_ID, {})


class SessionlessFetchContext(FetchContext):
    """A full request served without creating a session (epoch FINAL, or a session emptied)."""

    def __init__(self, fetch_data: Mapping[TopicIdPartition, PartitionData]) -> None:
        self.fetch_data = fetch_data

    def get_fetch_offset(self, part: TopicIdPartition) -> Optional[int]:
        data = self.fetch_data.get(part)
        return None if data is None else data.fetch_offset

    def partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionData]]:
        return iter(self.fetch_data.items())

    def update_and_generate_response_data(self, updates: dict[TopicIdPartition, Any]) -> FetchContextResponse:
        return FetchContextResponse(ErrorCode.NONE, 0, INVALID_SESSION_ID, updates)


class FullFetchContext(SessionlessFetchContext):
    """A full request that asks for a new session: the response creates one if a slot can be had."""

    def __init__(self, cache: "FetchSessionCache", fetch_data: Mapping[TopicIdPartition, PartitionData],
                 uses_topic_ids: bool, is_from_follower: bool, now_ms: int) -> None:
        super().__init__(fetch_data)
        self.cache = cache
        self.uses_topic_ids = uses_topic_ids
        self.is_from_follower = is_from_follower
        self.now_ms = now_ms

    def update_and_generate_response_data(self, updates: dict[TopicIdPartition, Any]) -> FetchContextResponse:
        fetch_data = self.fetch_data

        def create() -> dict[tuple, CachedPartition]:
            cached: dict[tuple, CachedPartition] = {}
            for part, resp in updates.items():
                req = fetch_data.get(part)
                if req is None:
                    raise ValueError(f"response partition {part} was not in the request")
                cp = CachedPartition(part, req, resp)
                cached[cp.key] = cp
            return cached

        shard = self.cache.next_shard()
        session_id = shard.maybe_create_session(self.now_ms, self.is_from_follower, len(updates),
                                                self.uses_topic_ids, create)
        return FetchContextResponse(ErrorCode.NONE, 0, session_id, updates)


class IncrementalFetchContext(FetchContext):
    """A request continuing a session: reads every partition of the session and answers with
    only those that changed."""

    def __init__(self, metadata: FetchMetadata, session: FetchSession,
                 topic_names: Mapping[Uuid, str]) -> None:
        self.metadata = metadata
        self.session = session
        self.topic_names = topic_names

    def get_fetch_offset(self, part: TopicIdPartition) -> Optional[int]:
        return self.session.get_fetch_offset(part)

    def partitions(self) -> Iterator[tuple[TopicIdPartition, PartitionData]]:
        resolve = self.session.uses_topic_ids
        for cp in list(self.session.partition_map.values()):
            if resolve and cp.topic_id_partition.topic is None:
                # The topic may have become known since the partition was added.
                cp.maybe_resolve_unknown_name(self.topic_names)
            yield cp.topic_id_partition, cp.req

    def _epoch_is_current(self) -> bool:
        # A concurrent request of the same session may have moved the epoch on.
        return self.session.epoch == next_epoch(self.metadata.epoch)

    def update_and_generate_response_data(self, updates: dict[TopicIdPartition, Any]) -> FetchContextResponse:
        session = self.session
        if not self._epoch_is_current():
            return FetchContextResponse(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, session.id, {})
        pm = session.partition_map
        zero = ZERO_UUID
        for part, resp in list(updates.items()):
            tid, name, partition = part
            k = (tid if tid != zero else name, partition)
            cached = pm.get(k)
            if cached is None:
                raise ValueError(f"response partition {part} is not in session {session.id}")
            if cached.maybe_update_response_data(resp, True):
                records = resp.records
                if records is not None and len(records) > 0:
                    # Partitions that returned data go to the back of the session, so the next
                    # response favours the others (fairness under the response size limit).
                    del pm[k]
                    pm[k] = cached
            else:
                del updates[part]
        return FetchContextResponse(ErrorCode.NONE, 0, session.id, updates)

    def get_throttled_response(self, throttle_time_ms: int) -> FetchContextResponse:
        if not self._epoch_is_current():
            return FetchContextResponse(ErrorCode.INVALID_FETCH_SESSION_EPOCH, throttle_time_ms, self.session.id, {})
        return FetchContextResponse(ErrorCode.NONE, throttle_time_ms, self.session.id, {})


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's ``FetchSessionCache`` plus ``FetchManager``).

    ``max_entries`` (``max.incremental.fetch.session.cache.slots``) is split evenly over
    ``num_shards``; session ids encode their shard. Kafka 3.9 brokers use
    :data:`KAFKA_NUM_SHARDS` shards; the default here is one shard, where the eviction rules act
    on the whole cache.
    """

    def __init__(self, max_entries: int = DEFAULT_MAX_SLOTS, eviction_ms: int = DEFAULT_EVICTION_MS,
                 num_shards: int = 1, rng: Optional[random.Random] = None) -> None:
        if num_shards < 1:
            raise ValueError("num_shards must be at least 1")
        rng = rng if rng is not None else random.Random()
        id_range = _INT32_MAX // num_shards
        self.shards = [FetchSessionCacheShard(max_entries // num_shards, eviction_ms, id_range, n, rng)
                       for n in range(num_shards)]
        self._counter = 0

    def shard_for(self, session_id: int) -> Optional[FetchSessionCacheShard]:
        """The shard owning ``session_id`` (Java's truncating division), or None for an id
        outside every shard's range: Kafka then fails the request with UNKNOWN_SERVER_ERROR,
        here an incremental request gets FETCH_SESSION_ID_NOT_FOUND and a full one just opens
        a new session."""
        width = self.shards[0].session_id_range
        n = session_id // width if session_id >= 0 else -(-session_id // width)
        return self.shards[n] if 0 <= n < len(self.shards) else None

    def next_shard(self) -> FetchSessionCacheShard:
        """Shards take new sessions in turn."""
        shard = self.shards[(self._counter & _INT32_MAX) % len(self.shards)]
        self._counter += 1
        return shard

    def get(self, session_id: int) -> Optional[FetchSession]:
        shard = self.shard_for(session_id)
        return None if shard is None else shard.get(session_id)

    def remove(self, session_id: int) -> Optional[FetchSession]:
        shard = self.shard_for(session_id)
        return None if shard is None else shard.remove(session_id)

    @property
    def size(self) -> int:
        return sum(s.size for s in self.shards)

    @property
    def total_partitions(self) -> int:
        return sum(s.total_partitions for s in self.shards)

    @property
    def evictions(self) -> int:
        return sum(s.evictions for s in self.shards)

    def new_context(self, version: int, metadata: FetchMetadata, is_follower: bool,
                    fetch_data: Mapping[TopicIdPartition, PartitionData],
                    to_forget: Sequence[TopicIdPartition], topic_names: Mapping[Uuid, str],
                    now_ms: int) -> FetchContext:
        """Decide how to serve one FetchRequest (``FetchManager.newContext``).

        ``fetch_data``/``to_forget`` are the request's partitions with topic names resolved as
        far as the broker can (see :func:`kproto.fetch_session.messages.request_fetch_data`).
        """
        if metadata.is_full:
            if metadata.session_id != INVALID_SESSION_ID:
                # A full request closes the session it names.
                self.remove(metadata.session_id)
            if metadata.epoch == FINAL_EPOCH:
                return SessionlessFetchContext(fetch_data)
            return FullFetchContext(self, fetch_data, version >= 13, is_follower, now_ms)

        shard = self.shard_for(metadata.session_id)
        session = None if shard is None else shard.get(metadata.session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, metadata)
        if session.epoch != metadata.epoch:
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH, metadata)
        if session.uses_topic_ids != (version >= 13):
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, metadata)
        session.update(fetch_data, to_forget)
        if session.is_empty():
            shard.remove(session)  # type: ignore[union-attr]
            return SessionlessFetchContext(fetch_data)
        shard.touch(session, now_ms)  # type: ignore[union-attr]
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(metadata, session, topic_names)
