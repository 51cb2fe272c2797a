"""FetchSessionCache: contexts, incremental responses and Kafka's eviction rules (KIP-227)."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.fetch_session import (
    FINAL_EPOCH,
    FetchMetadata,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    PartitionData,
    SessionErrorContext,
    SessionlessFetchContext,
    TopicIdPartition,
    ZERO_UUID,
)

V = 12  # topic names on the wire
TID = Uuid(bytes(range(16)))


def tip(p: int, topic: str = "t") -> TopicIdPartition:
    return TopicIdPartition(ZERO_UUID, topic, p)


def req(offset: int = 0) -> PartitionData:
    return PartitionData(ZERO_UUID, offset, -1, 1 << 20, 3, None)


def resp(hw: int = 10, lso: int = 0, records: bytes = b"", error: int = 0, preferred: int = -1,
         diverging: int = -1) -> SimpleNamespace:
    return SimpleNamespace(high_watermark=hw, log_start_offset=lso, records=records, error_code=error,
                           preferred_read_replica=preferred, diverging_epoch=SimpleNamespace(epoch=diverging))


def open_session(cache: FetchSessionCache, n: int, now: int, follower: bool = False, topic: str = "t") -> int:
    data = {tip(p, topic): req() for p in range(n)}
    ctx = cache.new_context(V, FetchMetadata(0, 0), follower, data, [], {}, now)
    assert isinstance(ctx, FullFetchContext)
    answer = ctx.update_and_generate_response_data({k: resp() for k in data})
    return answer.session_id


def use(cache: FetchSessionCache, sid: int, now: int) -> None:
    """An incremental request that changes nothing: refreshes the session's last use."""
    session = cache.get(sid)
    ctx = cache.new_context(V, FetchMetadata(sid, session.epoch), False, {}, [], {}, now)
    assert isinstance(ctx, IncrementalFetchContext)


# -- contexts ---------------------------------------------------------------------------------

def test_full_request_creates_session_with_all_partitions():
    cache = FetchSessionCache(rng=random.Random(1))
    data = {tip(p): req(p) for p in range(3)}
    ctx = cache.new_context(V, FetchMetadata(0, 0), False, data, [], {}, 0)
    assert list(ctx.partitions()) == list(data.items())
    updates = {k: resp() for k in data}
    answer = ctx.update_and_generate_response_data(updates)
    assert answer.error_code == 0 and answer.session_id != 0
    assert list(answer.partitions) == list(data)
    session = cache.get(answer.session_id)
    assert session.epoch == 1 and session.size == 3 and not session.uses_topic_ids
    assert cache.total_partitions == 3


def test_incremental_response_carries_only_changed_partitions():
    cache = FetchSessionCache(rng=random.Random(2))
    sid = open_session(cache, 6, 0)
    ctx = cache.new_context(V, FetchMetadata(sid, 1), False, {}, [], {}, 10)
    # The incremental context reads every partition of the session, with the cached parameters.
    assert [(t.partition, d.fetch_offset) for t, d in ctx.partitions()] == [(p, 0) for p in range(6)]
    updates = {tip(0): resp(), tip(1): resp(hw=11), tip(2): resp(records=b"x"), tip(3): resp(error=6),
               tip(4): resp(preferred=2), tip(5): resp(lso=4)}
    answer = ctx.update_and_generate_response_data(updates)
    assert answer.error_code == 0 and answer.session_id == sid
    assert [t.partition for t in answer.partitions] == [1, 2, 3, 4, 5]
    session = cache.get(sid)
    # A partition that returned records moves to the back of the session.
    assert [cp.partition for cp in session.partition_map.values()] == [0, 1, 3, 4, 5, 2]
    assert session.epoch == 2

    # Next time: unchanged partitions are left out; the errored one (cached hw reset to -1)
    # comes back once its error clears, the preferred replica is always sent.
    ctx = cache.new_context(V, FetchMetadata(sid, 2), False, {}, [], {}, 20)
    updates = {t: resp(hw=11 if t.partition == 1 else 10, lso=4 if t.partition == 5 else 0,
                       preferred=2 if t.partition == 4 else -1) for t, _ in ctx.partitions()}
    updates[tip(0)] = resp(diverging=5)
    answer = ctx.update_and_generate_response_data(updates)
    assert sorted(t.partition for t in answer.partitions) == [0, 3, 4]


def test_incremental_request_adds_updates_and_forgets():
    cache = FetchSessionCache(rng=random.Random(3))
    sid = open_session(cache, 3, 0)
    ctx = cache.new_context(V, FetchMetadata(sid, 1), False, {tip(1): req(50), tip(7): req(70)},
                            [tip(0), tip(9)], {}, 5)
    assert [(t.partition, d.fetch_offset) for t, d in ctx.partitions()] == [(1, 50), (2, 0), (7, 70)]
    assert cache.total_partitions == 3


def test_forgetting_every_partition_closes_the_session():
    cache = FetchSessionCache(rng=random.Random(4))
    sid = open_session(cache, 2, 0)
    ctx = cache.new_context(V, FetchMetadata(sid, 1), False, {}, [tip(0), tip(1)], {}, 5)
    assert isinstance(ctx, SessionlessFetchContext)
    assert ctx.update_and_generate_response_data({}).session_id == 0
    assert cache.get(sid) is None and cache.size == 0


@pytest.mark.parametrize("metadata_of, version, error", [
    (lambda sid: FetchMetadata(sid + 1, 1), V, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
    (lambda sid: FetchMetadata(-5, 1), V, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
    (lambda sid: FetchMetadata(sid, 2), V, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
    (lambda sid: FetchMetadata(sid, 1), 13, ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR),
])
def test_session_errors(metadata_of, version, error):
    cache = FetchSessionCache(rng=random.Random(5))
    sid = open_session(cache, 2, 0)
    ctx = cache.new_context(version, metadata_of(sid), False, {}, [], {}, 5)
    assert isinstance(ctx, SessionErrorContext)
    assert list(ctx.partitions()) == []
    answer = ctx.update_and_generate_response_data({})
    assert (answer.error_code, answer.session_id, answer.partitions) == (error, 0, {})
    assert cache.get(sid).epoch == 1  # an error leaves the session as it was


def test_full_request_closes_named_session_and_final_epoch_stays_sessionless():
    cache = FetchSessionCache(rng=random.Random(6))
    sid = open_session(cache, 2, 0)
    ctx = cache.new_context(V, FetchMetadata(sid, FINAL_EPOCH), False, {tip(0): req()}, [], {}, 5)
    assert isinstance(ctx, SessionlessFetchContext)
    assert cache.get(sid) is None
    assert ctx.update_and_generate_response_data({tip(0): resp()}).session_id == 0
    assert cache.size == 0


def test_duplicate_incremental_request_gets_epoch_error():
    cache = FetchSessionCache(rng=random.Random(7))
    sid = open_session(cache, 2, 0)
    first = cache.new_context(V, FetchMetadata(sid, 1), False, {}, [], {}, 5)
    cache.get(sid).epoch = 7  # another request of the session was served in between
    answer = first.update_and_generate_response_data({tip(0): resp(hw=99)})
    assert answer.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and answer.session_id == sid
    assert first.get_throttled_response(30).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_topic_ids_resolved_later():
    cache = FetchSessionCache(rng=random.Random(8))
    unknown = TopicIdPartition(TID, None, 0)
    data = {unknown: PartitionData(TID, 5)}
    ctx = cache.new_context(13, FetchMetadata(0, 0), False, data, [], {}, 0)
    sid = ctx.update_and_generate_response_data({unknown: resp(error=100)}).session_id
    assert cache.get(sid).uses_topic_ids
    ctx = cache.new_context(13, FetchMetadata(sid, 1), False, {}, [], {TID: "later"}, 1)
    assert [t for t, _ in ctx.partitions()] == [TopicIdPartition(TID, "later", 0)]


# -- eviction ---------------------------------------------------------------------------------

EVICT_MS = 100


def full_cache(*sizes_and_privilege, now: int = 0) -> tuple[FetchSessionCache, list[int]]:
    cache = FetchSessionCache(max_entries=len(sizes_and_privilege), eviction_ms=EVICT_MS, rng=random.Random(9))
    ids = [open_session(cache, n, now, follower=priv, topic=f"s{i}")
           for i, (n, priv) in enumerate(sizes_and_privilege)]
    assert all(ids) and cache.size == len(ids)
    return cache, ids


def test_recent_sessions_are_not_evicted_by_consumers():
    cache, ids = full_cache((1, False), (2, False))
    assert open_session(cache, 100, 50) == 0
    assert cache.size == 2 and cache.evictions == 0


def test_follower_evicts_smallest_unprivileged_even_if_recent():
    cache, ids = full_cache((5, False), (2, False), (1, True))
    new = open_session(cache, 1, 50, follower=True)
    assert new != 0 and cache.get(ids[1]) is None
    assert cache.get(ids[0]) is not None and cache.get(ids[2]) is not None


def test_stale_session_is_evicted_first_whatever_its_size_or_privilege():
    cache, ids = full_cache((50, True), (1, False))
    use(cache, ids[1], 150)  # session 0 idle since 0, session 1 used at 150
    new = open_session(cache, 1, 201)  # 201 - 0 > EVICT_MS: session 0 is stale
    assert new != 0 and cache.get(ids[0]) is None and cache.get(ids[1]) is not None


def test_consumer_evicts_only_smaller_sessions_older_than_eviction_ms():
    cache, ids = full_cache((3, False), (5, False))
    use(cache, ids[0], 150)
    use(cache, ids[1], 150)  # not stale at 160, but both created > EVICT_MS ago
    assert open_session(cache, 3, 160) == 0  # not larger than the smallest (3)
    new = open_session(cache, 4, 160)
    assert new != 0 and cache.get(ids[0]) is None and cache.get(ids[1]) is not None
    assert cache.evictions == 1


def test_privileged_sessions_are_protected_from_consumers():
    cache, ids = full_cache((1, True), (1, True))
    use(cache, ids[0], 150)
    use(cache, ids[1], 150)
    assert open_session(cache, 1000, 160) == 0
    # A follower may evict an old privileged session that is smaller than itself.
    new = open_session(cache, 2, 160, follower=True)
    assert new != 0 and cache.size == 2


def test_unprivileged_sessions_go_before_privileged_ones():
    cache, ids = full_cache((1, True), (9, False))
    use(cache, ids[0], 150)
    use(cache, ids[1], 150)
    new = open_session(cache, 1, 160, follower=True)
    assert new != 0 and cache.get(ids[1]) is None and cache.get(ids[0]) is not None


def test_sharded_cache_splits_slots_and_id_ranges():
    cache = FetchSessionCache(max_entries=16, eviction_ms=EVICT_MS, num_shards=8, rng=random.Random(10))
    ids = [open_session(cache, 1, 0, topic=f"s{i}") for i in range(17)]
    assert all(ids[:16]) and ids[16] == 0  # 2 slots per shard, filled in turn
    width = (2**31 - 1) // 8
    assert sorted(i // width for i in ids[:16]) == sorted(list(range(8)) * 2)
    assert all(cache.get(i) is not None for i in ids[:16])


def test_eviction_order_among_equal_sizes_is_by_session_id():
    cache, ids = full_cache((4, False), (4, False), (4, False))
    for sid in ids:
        use(cache, sid, 150)
    new = open_session(cache, 5, 160)
    assert new != 0 and cache.get(min(ids)) is None
    assert all(cache.get(i) is not None for i in ids if i != min(ids))


def test_no_slots_means_sessionless():
    cache = FetchSessionCache(max_entries=0, rng=random.Random(11))
    assert open_session(cache, 3, 0, follower=True) == 0 and cache.size == 0
