"""Log compaction of kproto's broker (kproto.broker.cleaner): the cleaner on a log, crashes
at every step of a swap, the broker's cleaner task, the internal topics, the storage readers
on cleaned directories."""
from __future__ import annotations

import os
import time

import pytest

import kproto
import kproto.broker.cleaner as cleaner_mod
import kproto.storage as ks
from kproto.broker.cleaner import (CLEANER_CHECKPOINT, CleanerConfig, CompactionSettings, SegInfo,
                                   clean_log, grab_filthiest, group_segments_by_size)
from kproto.broker.log import LogConfig, LogManager
from kproto.records import RecordBatchBuilder, iter_batches
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage.checkpoints import OffsetCheckpoint
from kproto.storage.indexes import parse_txn_index

from broker_support import Client
from test_broker_admin import WALL0, Env, fetch
from test_broker_core import create, produce
from test_broker_groups import commit

NOW = 1_700_000_000_000


def kbatch(pairs, ts=NOW, **kw) -> bytes:
    """One batch of (key, value) records (value None: a tombstone)."""
    b = RecordBatchBuilder(**kw)
    for i, (k, v) in enumerate(pairs):
        b.append(ts + i, k, v)
    return b.build()


def marker(log, pid, epoch, commit_, ts=NOW) -> None:
    b = RecordBatchBuilder(base_offset=log.log_end_offset, producer_id=pid, producer_epoch=epoch,
                           transactional=True, control=True)
    b.append_end_txn_marker(commit_, 0, ts)
    log.append_internal(b.build())


def make_log(path, segment_bytes=300):
    mgr = LogManager(str(path), defaults=LogConfig(segment_bytes=segment_bytes, compacted=True))
    return mgr, mgr.create_topic("c", 1, {"cleanup.policy": "compact"}).partitions[0]


def reopen(path, segment_bytes=300):
    mgr = LogManager(str(path), defaults=LogConfig(segment_bytes=segment_bytes, compacted=True))
    return mgr, mgr.get("c", 0)


def records(log):
    return [(r.offset, r.key, r.value) for b in log.batches() for r in b.records()]


def latest(recs):
    """key -> (offset, value) of the last record of each key."""
    out = {}
    for off, k, v in recs:
        out[k] = (off, v)
    return out


def live(recs):
    """key -> value of the keys whose last record is not a tombstone."""
    return {k: v for k, (_, v) in latest(recs).items() if v is not None}


def write_keys(log, n, keys=7, start=0, ts=NOW):
    for i in range(start, start + n):
        v = None if i % 11 == 10 else b"value-%04d" % i
        log.append_as_leader(kbatch([(b"key-%d" % (i % keys), v)], ts=ts + i), ts + i)


SETTINGS = CompactionSettings(min_cleanable_ratio=0.01, delete_retention_ms=1_000)


# ---------------------------------------------------------------------------- the cleaner on a log
def test_cleaning_keeps_the_latest_record_of_each_key_at_its_offset(tmp_path):
    mgr, log = make_log(tmp_path)
    write_keys(log, 120)
    before = records(log)
    size_before, segs_before = log.total_bytes, len(log.segments)
    job = clean_log(log, NOW + 10_000, SETTINGS)
    assert job is not None
    active = log.segments[-1].base_offset
    assert job.end_offset == active  # everything below the active segment
    after = records(log)
    # below the active segment only each key's last record remains, at its own offset;
    # the active segment is untouched
    expect = sorted((off, k, v) for k, (off, v) in latest(r for r in before if r[0] < active).items())
    assert [r for r in after if r[0] < active] == expect
    assert [r for r in after if r[0] >= active] == [r for r in before if r[0] >= active]
    assert live(after) == live(before)
    assert log.total_bytes < size_before / 5 and len(log.segments) == segs_before
    assert log.log_end_offset == 120 and log.log_start_offset == 0
    # reads from any offset, gaps included, find the next batch
    for off in (0, 1, 50, active - 1, active):
        data = log.read(off, 1 << 20)
        first = next(iter_batches(data))
        assert first.last_offset >= off
    # the files read back the same after a restart
    mgr.close()
    mgr, log = reopen(tmp_path)
    assert records(log) == after
    mgr.close()


def test_a_tombstone_gets_a_delete_horizon_and_goes_after_it(tmp_path):
    mgr, log = make_log(tmp_path)
    log.append_as_leader(kbatch([(b"a", b"1"), (b"b", b"1")]), NOW)
    log.append_as_leader(kbatch([(b"a", None)]), NOW)
    log.append_as_leader(kbatch([(b"c", b"1")]), NOW)
    from kproto.broker.retention import roll
    roll(log)
    log.append_as_leader(kbatch([(b"d", b"1")]), NOW)
    clean_log(log, NOW + 100, SETTINGS)
    tomb = [b for b in log.batches() if any(r.value is None for r in b.records())]
    assert len(tomb) == 1 and tomb[0].delete_horizon_ms == NOW + 100 + 1_000
    assert tomb[0].first_timestamp == NOW + 1_100 and tomb[0].max_timestamp == NOW
    assert [r.timestamp for r in tomb[0].records()] == [NOW]  # deltas from the horizon
    # before the horizon a cleaning keeps it (and its horizon)
    clean_log(log, NOW + 1_099, SETTINGS, force=True)
    assert records(log) == [(1, b"b", b"1"), (2, b"a", None), (3, b"c", b"1"), (4, b"d", b"1")]
    assert [b.delete_horizon_ms for b in log.batches()] == [None, NOW + 1_100, None, None]
    # at the horizon it goes; the batch that held only it goes too
    clean_log(log, NOW + 1_100, SETTINGS, force=True)
    assert records(log) == [(1, b"b", b"1"), (3, b"c", b"1"), (4, b"d", b"1")]
    mgr.close()


def test_transactions_aborted_batches_go_markers_go_after_their_transactions(tmp_path):
    mgr, log = make_log(tmp_path, segment_bytes=10_000)
    # producer 1 commits k1/k2, producer 2 aborts k1/k3, then plain writes supersede k1 and
    # delete k2; each producer then commits a later transaction (so the first ones' batches
    # are not their producers' last)
    log.append_as_leader(kbatch([(b"k1", b"c1"), (b"k2", b"c2")], producer_id=1, producer_epoch=0,
                                base_sequence=0, transactional=True), NOW)
    marker(log, 1, 0, True)                                                          # 2
    log.append_as_leader(kbatch([(b"k1", b"x"), (b"k3", b"x")], producer_id=2, producer_epoch=0,
                                base_sequence=0, transactional=True), NOW)          # 3-4
    marker(log, 2, 0, False)                                                         # 5
    log.append_as_leader(kbatch([(b"k1", b"p1")]), NOW)                               # 6
    log.append_as_leader(kbatch([(b"k2", None)]), NOW)                                # 7
    for pid in (1, 2):
        log.append_as_leader(kbatch([(b"k9", b"t%d" % pid)], producer_id=pid, producer_epoch=0,
                                    base_sequence=2, transactional=True), NOW)
        marker(log, pid, 0, True)
    from kproto.broker.retention import roll
    roll(log)
    log.append_as_leader(kbatch([(b"z", b"1")]), NOW)
    assert [(p, f, la) for p, f, la in log.aborted] == [(2, 3, 5)]

    def shape():
        return [(b.base_offset, b.last_offset, b.is_control, len(b.record_list()), b.delete_horizon_ms)
                for b in log.batches()]

    t1 = NOW + 10
    clean_log(log, t1, SETTINGS)
    # the committed batch's records are superseded (batch gone), its COMMIT marker stays:
    # this pass read the transaction's batch; the aborted batch goes, its ABORT marker stays
    # with its .txnindex entry; the tombstone stays with a horizon
    assert shape()[:4] == [(2, 2, True, 1, None), (5, 5, True, 1, None), (6, 6, False, 1, None),
                           (7, 7, False, 1, t1 + 1_000)]
    txn = os.path.join(log.path, "%020d.txnindex" % 0)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in parse_txn_index(open(txn, "rb").read())] \
        == [(2, 3, 5)]
    assert log.aborted == [(2, 3, 5)]
    # next pass: no batch of either transaction is left, so both markers get a horizon
    t2 = NOW + 500
    clean_log(log, t2, SETTINGS, force=True)
    assert shape()[:3] == [(2, 2, True, 1, t2 + 1_000), (5, 5, True, 1, t2 + 1_000), (6, 6, False, 1, None)]
    assert not os.path.exists(txn) and log.aborted == []
    # past the horizons markers and tombstone are gone; the later transactions stay whole
    clean_log(log, t2 + 1_000, SETTINGS, force=True)
    # producer 1's k9 is superseded by producer 2's, but it is producer 1's last data batch:
    # kept empty, and so its COMMIT marker (this pass read a batch of its transaction)
    assert shape() == [(6, 6, False, 1, None), (8, 8, False, 0, None), (9, 9, True, 1, None),
                       (10, 10, False, 1, None), (11, 11, True, 1, None), (12, 12, False, 1, None)]
    recs = [(o, k) for o, k, _ in records(log)]
    mgr.close()
    # the directory reopens with the same batches
    mgr, log2 = reopen(tmp_path, segment_bytes=10_000)
    assert [(o, k) for o, k, _ in records(log2)] == recs
    mgr.close()


def test_a_producers_last_batch_is_kept_empty(tmp_path):
    mgr, log = make_log(tmp_path)
    log.append_as_leader(kbatch([(b"a", b"old")], producer_id=7, producer_epoch=3, base_sequence=0), NOW)
    log.append_as_leader(kbatch([(b"a", b"new")]), NOW)
    from kproto.broker.retention import roll
    roll(log)
    log.append_as_leader(kbatch([(b"b", b"1")]), NOW)
    clean_log(log, NOW, SETTINGS)
    first = next(iter(log.batches()))
    # Kafka's writeEmptyHeader: offsets, producer fields and max timestamp kept, no records
    assert (first.base_offset, first.last_offset, first.count, first.producer_id, first.producer_epoch,
            first.base_sequence, first.first_timestamp, first.max_timestamp) == (0, 0, 0, 7, 3, 0, NOW, NOW)
    assert first.is_valid()
    mgr.close()
    mgr, log = reopen(tmp_path)
    # the producer's state survives the restart: its next sequence is accepted, a gap is not
    assert log.producers[7].batches[-1].last_seq == 0
    mgr.close()


def test_a_full_offset_map_cleans_up_to_where_it_got(tmp_path):
    mgr, log = make_log(tmp_path)
    write_keys(log, 90, keys=30)
    small = CleanerConfig(dedupe_buffer_size=24 * 12)  # 12 slots, 10 keys at most (0.9)
    job = clean_log(log, NOW + 10_000, SETTINGS, small)
    assert job is not None and len(job.map) == 10
    # the map took offsets 0..9 (10 distinct keys): the round ends after the last batch it took
    assert job.end_offset == 10
    job2 = clean_log(log, NOW + 10_000, SETTINGS, small, checkpoint=job.end_offset)
    assert job2 is not None and job2.end_offset == 20
    mgr.close()


def test_min_compaction_lag_and_dirty_ratio_choose_what_is_cleaned(tmp_path):
    mgr, log = make_log(tmp_path)
    write_keys(log, 60)
    lagged = CompactionSettings(min_cleanable_ratio=0.01, min_compaction_lag_ms=1_000_000)
    # every segment is younger than the lag: nothing cleanable
    assert grab_filthiest([(log, None, lagged)], NOW + 100)[0] is None
    ltc = grab_filthiest([(log, None, lagged)], NOW + 1_000_040)[0]
    assert ltc is not None and 0 < ltc.first_uncleanable < log.segments[-1].base_offset
    # a ratio above the dirty share: nothing; the checkpoint at the uncleanable end: clean
    strict = CompactionSettings(min_cleanable_ratio=1.0)
    assert grab_filthiest([(log, None, strict)], NOW)[0] is None
    # max.compaction.lag.ms makes a log due whatever its ratio
    due = CompactionSettings(min_cleanable_ratio=1.0, max_compaction_lag_ms=1)
    ltc = grab_filthiest([(log, None, due)], NOW + 10_000)[0]
    assert ltc is not None and ltc.need_compaction_now
    assert grab_filthiest([(log, log.segments[-1].base_offset, SETTINGS)], NOW)[0] is None
    # a checkpoint past the log end (or below its start) is reset to the log start and
    # reported for a rewrite, as Kafka's cleanableOffsets does
    ltc, forced = grab_filthiest([(log, 10**6, SETTINGS)], NOW)
    assert ltc is not None and ltc.first_dirty == 0 and [f.first_dirty for f in forced] == [0]
    mgr.close()


def test_segments_are_grouped_within_segment_and_index_sizes():
    def seg(base, size, index=0):
        return SegInfo(None, base, size, base + 10, -1, -1, index, index)  # type: ignore[arg-type]

    segs = [seg(0, 400), seg(10, 300), seg(20, 300), seg(30, 0), seg(40, 900), seg(50, 50)]
    groups = group_segments_by_size(segs, 1000, 10_000, 60)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10, 20, 30], [40, 50]]
    segs2 = [seg(0, 10, 8), seg(10, 10, 8), seg(20, 10, 0)]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(segs2, 1000, 8, 30)] == [[0], [10, 20]]
    # offsets must fit relative int32 offsets of the group's first segment
    far = [seg(0, 10), seg(2**31 - 5, 10), seg(2**31 + 100, 10)]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(far, 1000, 1000, 2**31 + 200)] == \
        [[0], [2**31 - 5, 2**31 + 100]]
    assert [[s.base_offset for s in g] for g in group_segments_by_size(far, 1000, 1000, 2**32)] == \
        [[0], [2**31 - 5], [2**31 + 100]]


def test_groups_merge_segments_into_one_file(tmp_path):
    mgr, log = make_log(tmp_path)
    write_keys(log, 120)
    before = records(log)
    n = len(log.segments)
    big = CompactionSettings(min_cleanable_ratio=0.01, segment_bytes=100_000)
    clean_log(log, NOW + 10_000, big)
    assert len(log.segments) == 2  # one cleaned segment and the active one
    names = sorted(f for f in os.listdir(log.path) if f.endswith(".log"))
    assert len(names) == 2 and names[0] == "%020d.log" % 0 and n > 2
    assert live(records(log)) == live(before)
    mgr.close()


# ---------------------------------------------------------------------------- crashes in a swap
@pytest.mark.parametrize("step", ["cleaned", "swap-log", "swap", "deleted", "renamed"])
def test_a_crash_at_any_step_of_a_swap_loses_nothing(tmp_path, step):
    mgr, log = make_log(tmp_path)
    write_keys(log, 120)
    before = records(log)
    big = CompactionSettings(min_cleanable_ratio=0.01, segment_bytes=100_000)

    class Crash(Exception):
        pass

    def crash(at):
        if at == step:
            raise Crash(at)

    cleaner_mod.fault_hook = crash
    try:
        with pytest.raises(Crash):
            clean_log(log, NOW + 10_000, big)
    finally:
        cleaner_mod.fault_hook = None
    left = sorted(os.listdir(log.path))
    suffix = {"cleaned": ".cleaned", "swap-log": ".swap", "swap": ".swap", "deleted": ".deleted",
              "renamed": ".deleted"}[step]
    assert any(f.endswith(suffix) for f in left), left
    # the broker is gone (no clean close); the next start finishes or undoes the swap
    mgr2, log2 = reopen(tmp_path)
    assert not [f for f in os.listdir(log2.path) if f.endswith((".cleaned", ".swap", ".deleted"))]
    after = records(log2)
    assert live(after) == live(before)
    assert log2.log_end_offset == 120
    finished = step in ("swap", "deleted", "renamed")
    assert (len(after) < len(before)) == finished
    assert len(log2.segments) == (2 if finished else len(log.segments))
    # a later round cleans it as if nothing happened
    clean_log(log2, NOW + 10_000, big, force=True)
    assert live(records(log2)) == live(before)
    mgr2.close()


# ---------------------------------------------------------------------------- the broker's cleaner
def wait_round(core, rounds, env):
    deadline = time.monotonic() + 20
    while core.cleaner.rounds < rounds:
        assert time.monotonic() < deadline, "no cleaning round"
        env.advance(20)
        time.sleep(0.01)


def test_the_broker_cleans_on_its_timer_in_a_worker_thread(tmp_path):
    env = Env(tmp_path / "d", log_cleaner_backoff_ms=1_000)
    try:
        c = env.client
        create(c, "k", configs={"cleanup.policy": "compact", "segment.bytes": "300",
                                "min.cleanable.dirty.ratio": "0.01"})
        create(c, "plain", configs={"segment.bytes": "300"})
        for i in range(40):
            for t in ("k", "plain"):
                produce(c, t, 0, kbatch([(b"key-%d" % (i % 4), b"v%d" % i)], ts=WALL0))
        env.advance(1_000)
        wait_round(env.core, 1, env)
        lg = env.core.logs.get("k", 0)
        got = [(o, k) for o, k, _ in records(lg)]
        active = lg.segments[-1].base_offset
        assert active > 8
        # below the active segment: the last offset of each of the 4 keys
        assert got == [(o, b"key-%d" % (o % 4)) for o in range(active - 4, 40)]
        # a fetch from 0 starts at the first batch left (in the first segment that has one)
        fetched = [r.offset for b in iter_batches(fetch(c, "k", 0, 0).records) for r in b.records()]
        assert fetched[0] == active - 4 and set(fetched) <= set(range(active - 4, active))
        # a topic without compact is left alone
        assert len(records(env.core.logs.get("plain", 0))) == 40
        with open(os.path.join(env.path, CLEANER_CHECKPOINT), "rb") as f:
            assert OffsetCheckpoint.parse(f.read()).entries == [("k", 0, active)]
        # nothing dirty: the next checks clean nothing
        env.advance(3_000)
        assert env.core.cleaner.rounds == 1
        env.restart()
        assert env.core.cleaner.checkpoints == {("k", 0): active}
        assert [(o, k) for o, k, _ in records(env.core.logs.get("k", 0))] == got
        # a deleted topic leaves the checkpoint file
        req = kproto.request(K.DELETE_TOPICS).cls
        env.client.call(K.DELETE_TOPICS, 6, timeout_ms=1000, topics=[req.DeleteTopicState(name="k")])
        assert env.core.cleaner.checkpoints == {}
        with open(os.path.join(env.path, CLEANER_CHECKPOINT), "rb") as f:
            assert OffsetCheckpoint.parse(f.read()).entries == []
    finally:
        env.core.close()


def test_a_round_is_dropped_when_retention_deleted_a_segment_it_read(tmp_path):
    from kproto.broker.retention import delete_oldest_segments
    env = Env(tmp_path / "d", log_cleaner_backoff_ms=3_600_000)
    try:
        c = env.client
        create(c, "k", configs={"cleanup.policy": "compact,delete", "segment.bytes": "300",
                                "min.cleanable.dirty.ratio": "0.01"})
        for i in range(30):
            produce(c, "k", 0, kbatch([(b"key-%d" % (i % 3), b"v%d" % i)], ts=WALL0))
        lg = env.core.logs.get("k", 0)
        cleaner = env.core.cleaner
        assert cleaner.start_round(threaded=False)  # read and written, not swapped in yet
        assert [f for f in os.listdir(lg.path) if f.endswith(".cleaned")]
        delete_oldest_segments(lg, 1)
        before = records(lg)
        cleaner.wait()
        assert cleaner.rounds == 0 and ("k", 0) not in cleaner.checkpoints
        assert records(lg) == before
        assert not [f for f in os.listdir(lg.path) if f.endswith((".cleaned", ".swap", ".deleted"))]
        assert cleaner.clean_now()  # the next round reads the log as it is now
        assert cleaner.rounds == 1
    finally:
        env.core.close()


def test_consumer_offsets_are_compacted_and_replayed_from_live_state(tmp_path):
    env = Env(tmp_path / "d", log_cleaner_backoff_ms=1_000, offsets_topic_num_partitions=1)
    try:
        c = env.client
        c.call(K.METADATA, 12, topics=[kproto.request(3).cls.MetadataRequestTopic(name="t")],
               allow_auto_topic_creation=True, include_topic_authorized_operations=False)
        env.core.groups.ensure_topic()
        offsets = env.core.logs.topics["__consumer_offsets"]
        env.core.configs.set_topic(offsets, {**offsets.configs, "segment.bytes": "2000",
                                             "min.cleanable.dirty.ratio": "0.01"})
        for i in range(300):
            assert commit(c, "g%d" % (i % 3), {("t", 0): i}) == {("t", 0): 0}
        lg = env.core.logs.get("__consumer_offsets", 0)
        before = lg.total_bytes
        assert env.core.cleaner.clean_now()
        assert lg.total_bytes < before / 5
        env.restart(clean=False)
        req = kproto.request(K.OFFSET_FETCH).cls
        for g in range(3):
            r = env.client.call(K.OFFSET_FETCH, 7, group_id="g%d" % g, require_stable=False, topics=[
                req.OffsetFetchRequestTopic(name="t", partition_indexes=[0])])
            assert r.topics[0].partitions[0].committed_offset == 297 + g
    finally:
        env.core.close()


# ---------------------------------------------------------------------------- storage readers
def test_storage_readers_read_cleaned_directories(tmp_path):
    mgr, log = make_log(tmp_path)
    write_keys(log, 120)
    log.append_as_leader(kbatch([(b"a", b"old")], producer_id=7, producer_epoch=3, base_sequence=0), NOW)
    log.append_as_leader(kbatch([(b"a", b"new")]), NOW)
    from kproto.broker.retention import roll
    roll(log)
    log.append_as_leader(kbatch([(b"b", b"1")]), NOW)
    clean_log(log, NOW + 10_000, SETTINGS)
    expect = records(log)
    mgr.close()
    table = ks.read_arrow(str(tmp_path))
    assert list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist())) == expect
    # no problems reported: gaps and empty batches are what a compacted log holds
    part = ks.open_partition(os.path.join(str(tmp_path), "c-0")) if hasattr(ks, "open_partition") else None
    if part is not None:
        assert not [p for s in part.segments for p in s.problems]


def cleaned_dir(path):
    """A compacted partition with every shape cleaning leaves: offset gaps, tombstones with a
    delete horizon, an empty batch kept for its producer, transaction markers with and without
    a horizon, a .txnindex rewritten, segments merged."""
    mgr, log = make_log(path)
    write_keys(log, 60)
    log.append_as_leader(kbatch([(b"key-1", b"txn")], producer_id=1, producer_epoch=0, base_sequence=0,
                                transactional=True), NOW)
    marker(log, 1, 0, True)
    log.append_as_leader(kbatch([(b"key-2", b"aborted")], producer_id=2, producer_epoch=0,
                                base_sequence=0, transactional=True), NOW)
    marker(log, 2, 0, False)
    log.append_as_leader(kbatch([(b"p", b"old")], producer_id=7, producer_epoch=3, base_sequence=0), NOW)
    log.append_as_leader(kbatch([(b"p", b"new"), (b"q", None)], compression=4), NOW)
    write_keys(log, 40, start=60)
    clean_log(log, NOW + 10_000, SETTINGS)
    log.append_as_leader(kbatch([(b"key-3", b"aborted")], producer_id=3, producer_epoch=0,
                                base_sequence=0, transactional=True), NOW)
    marker(log, 3, 0, False)
    write_keys(log, 20, start=100)
    clean_log(log, NOW + 10_500, CompactionSettings(min_cleanable_ratio=0.01, delete_retention_ms=1_000,
                                                    segment_bytes=1_000), force=True)
    expect = [(r.offset, r.key, r.value) for b in log.batches() if not b.is_control for r in b.records()]
    assert any(b.is_control for b in log.batches()) and any(b.count == 0 for b in log.batches())
    mgr.close()
    return expect


def test_storage_readers_read_cleaned_directories_without_problems(tmp_path):
    from kproto.problems import Problems
    expect = cleaned_dir(tmp_path)
    found = Problems()
    table = ks.read_arrow(str(tmp_path), problems=found)
    assert list(found) == []
    assert list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                    table.column("value").to_pylist())) == expect
    offsets = [o for o, _, _ in expect]
    assert offsets != list(range(offsets[0], offsets[0] + len(offsets)))  # gaps
    names = sorted(f for f in os.listdir(tmp_path / "c-0") if f.endswith(".log"))
    assert len(names) >= 2
    # read_committed leaves out nothing a cleaning kept (the aborted batch is gone)
    committed = ks.read_arrow(str(tmp_path), isolation="read_committed")
    assert b"aborted" not in committed.column("value").to_pylist()


def below_base_dir(path):
    """A partition whose segment 2 holds one batch of offsets 0..3."""
    mgr, log = make_log(path)
    log.append_as_leader(kbatch([(b"a", b"0"), (b"b", b"1"), (b"c", b"2"), (b"d", b"3")]), NOW)
    mgr.close()
    d = path / "c-0"
    for ext in (".index", ".timeindex"):
        os.unlink(d / ("%020d%s" % (0, ext)))
    os.rename(d / ("%020d.log" % 0), d / ("%020d.log" % 2))
    return d


def test_a_batch_starting_below_its_segments_base_offset_is_read(tmp_path):
    # Kafka checks a segment's batches by their last offsets (LogSegment.recover): a batch
    # that starts below the segment's name but ends in it is read as any other
    from kproto.problems import Problems
    d = below_base_dir(tmp_path)
    found = Problems()
    table = ks.read_arrow(str(tmp_path), problems=found)
    assert list(found) == [] and table.column("offset").to_pylist() == [0, 1, 2, 3]
    # a batch ending below it is damage
    os.rename(d / ("%020d.log" % 2), d / ("%020d.log" % 4))
    found = Problems()
    assert ks.read_arrow(str(tmp_path), problems=found).num_rows == 0
    assert [p.kind for p in found] == ["corrupt"]


@pytest.mark.slow
def test_kafkas_dump_log_segments_reads_cleaned_segments_as_kproto_does(tmp_path):
    """Apache Kafka's DumpLogSegments reads kproto's cleaned segments, indexes and
    .txnindex without error, and ``kproto dump-log --format kafka`` prints the same bytes."""
    import sys
    from pathlib import Path

    from kproto.testing import require_apache_kafka
    from kproto.testing.apache import DEFAULT_VERSION
    require_apache_kafka(DEFAULT_VERSION)
    sys.path.insert(0, str(Path(__file__).parent.parent / "storage"))
    import kafka_logdir_support as kls

    cleaned_dir(tmp_path)
    d = tmp_path / "c-0"
    files = sorted(p for p in d.iterdir() if p.suffix in (".log", ".index", ".timeindex", ".txnindex"))
    assert any(p.suffix == ".txnindex" for p in files)
    files.append(below_base_dir(tmp_path / "below") / ("%020d.log" % 2))
    stderr = kls.assert_format_kafka_is_kafkas(DEFAULT_VERSION, files).decode(errors="replace")
    assert "Exception" not in stderr


# ---------------------------------------------------------------------------- against Apache Kafka
def _read_all(bootstrap, topic, isolation="read_committed"):
    """(offset, key, value) of every data record of partition 0, from the start to the end."""
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                     "enable.auto.commit": False, "isolation.level": isolation,
                     "enable.partition.eof": True})
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(m.error())
            out.append((m.offset(), m.key(), m.value()))
        raise AssertionError(f"no end of {topic} in 20 s")
    finally:
        c.close()


def _state(recs):
    """key -> latest value (None: a tombstone still there)."""
    return {k: v for _, k, v in recs}


RETENTION_MS = 5_000


@pytest.mark.kafka_broker(log_cleaner_backoff_ms=300)
def test_the_same_workload_compacts_alike_on_kproto_and_apache_kafka(kafka_broker, apache_kafka):
    """Keyed writes, tombstones, a committed and an aborted transaction and time passing, on
    both brokers: a consumer reads the same key -> latest value from both once cleaned, and
    the tombstones are gone from both after delete.retention.ms (and one more cleaning)."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                       NewTopic, ResourceType)
    topic = "compacted-%d" % int(time.time() * 1000)
    configs = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
               "delete.retention.ms": str(RETENTION_MS), "min.compaction.lag.ms": "0"}
    boots = [kafka_broker.bootstrap, apache_kafka.bootstrap]
    # Kafka's cleaner sleeps log.cleaner.backoff.ms (15 s) when it finds nothing to clean: a
    # dynamic broker config for the test's duration, not another JVM
    kafka_admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap})
    node = str(apache_kafka.broker_ids[0])

    def backoff(op, value=None):
        res = ConfigResource(ResourceType.BROKER, node, incremental_configs=[
            ConfigEntry("log.cleaner.backoff.ms", value, incremental_operation=op)])
        for f in kafka_admin.incremental_alter_configs([res]).values():
            f.result(30)

    backoff(AlterConfigOpType.SET, "300")
    try:
        for b in boots:
            a = AdminClient({"bootstrap.servers": b})
            a.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)
        plain = [ck.Producer({"bootstrap.servers": b, "linger.ms": 0}) for b in boots]
        txn = [ck.Producer({"bootstrap.servers": b, "transactional.id": topic + "-tx", "linger.ms": 0})
               for b in boots]

        def send(pairs, producers=plain):
            for p in producers:
                for k, v in pairs:
                    p.produce(topic, key=k, value=v, partition=0)
                assert p.flush(20) == 0
            time.sleep(0.15)  # past segment.ms: the next write rolls

        send([(b"k%d" % i, b"a") for i in range(10)])
        send([(b"k%d" % i, b"b") for i in range(5)])
        send([(b"k5", None), (b"k6", None)])
        tombstones_at = time.monotonic()
        for p in txn:
            p.init_transactions(30)
            p.begin_transaction()
            p.produce(topic, key=b"k7", value=b"committed", partition=0)
            p.produce(topic, key=b"k1", value=b"c", partition=0)
            p.commit_transaction(30)
            p.begin_transaction()
            p.produce(topic, key=b"k8", value=b"aborted", partition=0)
            p.produce(topic, key=b"k0", value=b"aborted", partition=0)
            p.abort_transaction(30)
        time.sleep(0.15)
        send([(b"z", b"1")])
        send([(b"z", b"2")])
        expect = {b"k%d" % i: b"b" for i in range(5)}
        expect.update({b"k%d" % i: b"a" for i in range(5, 10)})
        expect.update({b"k5": None, b"k6": None, b"k7": b"committed", b"k1": b"c", b"z": b"2"})

        def cleaned(recs):
            keys = [k for _, k, _ in recs if k != b"z"]
            return len(keys) == len(set(keys))  # one record per key below the filler

        got = {}
        for b in boots:
            deadline = time.monotonic() + 60
            while True:
                recs = _read_all(b, topic)
                if cleaned(recs):
                    break
                assert time.monotonic() < deadline, f"{b}: not cleaned: {recs}"
                time.sleep(0.5)
            got[b] = recs
            # a horizon is set when a cleaning first meets a tombstone: delete.retention.ms
            # after its write at the earliest
            if time.monotonic() < tombstones_at + RETENTION_MS / 1000:
                assert _state(recs) == expect, b
            else:
                assert {k: v for k, v in _state(recs).items() if v is not None} == \
                    {k: v for k, v in expect.items() if v is not None}, b
            # the aborted transaction's records are gone even for read_uncommitted
            assert b"aborted" not in [v for _, _, v in _read_all(b, topic, "read_uncommitted")]
        assert {k: v for k, v in _state(got[boots[0]]).items() if v is not None} == \
            {k: v for k, v in _state(got[boots[1]]).items() if v is not None}
        # past delete.retention.ms after every cleaning so far, more writes make the log dirty
        # again: a cleaning removes the tombstones on both
        time.sleep(RETENTION_MS / 1000 + 0.3)
        del expect[b"k5"], expect[b"k6"]
        for b in boots:
            deadline = time.monotonic() + 60
            n = 3
            while True:
                recs = _read_all(b, topic)
                if not [k for _, k, v in recs if v is None]:
                    break
                assert time.monotonic() < deadline, f"{b}: tombstones still there: {recs}"
                for p in plain:  # one more roll and write: the log is dirty for a next round
                    p.produce(topic, key=b"z", value=b"%d" % n, partition=0)
                    p.flush(20)
                n += 1
                time.sleep(0.5)
            got[b] = recs
            assert {k: v for k, v in _state(recs).items() if k != b"z"} == \
                {k: v for k, v in expect.items() if k != b"z"}, b
        # the same records below the fillers, at the same offsets
        assert [(o, k, v) for o, k, v in got[boots[0]] if k != b"z"] == \
            [(o, k, v) for o, k, v in got[boots[1]] if k != b"z"]
    finally:
        backoff(AlterConfigOpType.DELETE)


def test_transaction_state_is_compacted_and_a_restart_resumes_from_it(tmp_path, clock):
    from test_broker_txn import add, end, init, make_core, with_topic
    from test_broker_txn import produce as txn_produce
    core = with_topic(tmp_path / "d", clock)
    c = Client(core)
    _, pid, ep = init(c)
    state = core.logs.topics["__transaction_state"]
    core.configs.set_topic(state, {**state.configs, "segment.bytes": "1000",
                                   "min.cleanable.dirty.ratio": "0.01"})
    seq = 0
    for i in range(30):
        add(c, pid, ep, [("t", 0)])
        txn_produce(c, pid, ep, seq, [b"v%d" % i])
        seq += 1
        assert end(c, pid, ep, i % 3 != 0) == 0
    add(c, pid, ep, [("t", 0)])
    txn_produce(c, pid, ep, seq, [b"open"])
    lg = next(lg for lg in state.logs if lg.log_end_offset > 0)
    before = lg.total_bytes
    rounds = 0
    while core.cleaner.clean_now():
        rounds += 1
    assert rounds >= 1 and lg.total_bytes < before / 4
    # the transactional id's records: only its latest state below the active segment
    active = lg.segments[-1].base_offset
    assert len([r for b in lg.batches() if b.base_offset < active for r in b.records()]) <= 1
    core.close()
    again = make_core(tmp_path / "d", clock)
    try:
        c = Client(again)
        t0 = again.logs.get("t", 0)
        assert t0.last_stable_offset < t0.high_watermark  # the open transaction is still open
        assert end(c, pid, ep, True) == 0
        assert t0.last_stable_offset == t0.high_watermark
        # the producer id and epoch carry on: a new init bumps the epoch
        err, pid2, ep2 = init(c)
        assert (err, pid2, ep2) == (0, pid, ep + 1)
    finally:
        again.close()


def test_compact_and_delete_both_apply(tmp_path):
    env = Env(tmp_path / "d", log_cleaner_backoff_ms=3_600_000)
    try:
        c = env.client
        create(c, "kd", configs={"cleanup.policy": "compact,delete", "segment.bytes": "300",
                                 "min.cleanable.dirty.ratio": "0.01", "retention.ms": "60000"})
        for i in range(30):
            produce(c, "kd", 0, kbatch([(b"key-%d" % (i % 3), b"v%d" % i)], ts=WALL0 + env.clock.now_ms()))
        lg = env.core.logs.get("kd", 0)
        assert env.core.cleaner.clean_now()
        active = lg.segments[-1].base_offset
        assert [o for o, _, _ in records(lg) if o < active] == [active - 3, active - 2, active - 1]
        # retention deletes the cleaned segments (older than retention.ms); cleaning goes on
        # from its checkpoint, the new log start
        env.clock.advance(61_000)
        produce(c, "kd", 0, kbatch([(b"key-0", b"new")], ts=WALL0 + env.clock.now_ms()))
        env.core.retention.check()
        assert lg.log_start_offset == active
        for i in range(10):
            produce(c, "kd", 0, kbatch([(b"key-0", b"again-%d" % i)], ts=WALL0 + env.clock.now_ms()))
        assert env.core.cleaner.clean_now()
        assert env.core.cleaner.checkpoints[("kd", 0)] == lg.segments[-1].base_offset
        below = [k for o, k, _ in records(lg) if o < lg.segments[-1].base_offset]
        assert len(below) == len(set(below))
    finally:
        env.core.close()


def test_a_new_log_under_an_old_name_does_not_inherit_its_checkpoint(tmp_path):
    env = Env(tmp_path / "d", log_cleaner_backoff_ms=3_600_000)
    try:
        c = env.client
        cfg = {"cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"}
        create(c, "k", configs=cfg)
        for i in range(30):
            produce(c, "k", 0, kbatch([(b"key-%d" % (i % 3), b"v%d" % i)], ts=WALL0))
        cleaner = env.core.cleaner
        assert cleaner.clean_now() and cleaner.checkpoints[("k", 0)] > 10
        # the partition made anew without the broker's DeleteTopics path (a cluster replica
        # removed and assigned again)
        env.core.logs.delete_topic("k")
        env.core.logs.create_topic("k", 1, cfg)
        for i in range(30):
            produce(c, "k", 0, kbatch([(b"other-%d" % (i % 2), b"w%d" % i)], ts=WALL0))
        assert cleaner.clean_now()
        lg = env.core.logs.get("k", 0)
        below = [k for o, k, _ in records(lg) if o < lg.segments[-1].base_offset]
        assert sorted(below) == [b"other-0", b"other-1"]  # cleaned from its start
    finally:
        env.core.close()
