"""Partition logs: segment rolls, reads across segments, recovery after a crash."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import kproto.storage as ks
from kproto.broker.log import BrokerError, LogConfig, LogManager
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.records import iter_batches

from broker_support import batch


def values(data):
    return [r.value for b in iter_batches(data) for r in b.records()]


def all_values(log):
    return [r.value for b in log.batches() for r in b.records()]


NOW = 1_700_000_000_000  # the clock the appends run at (batch() stamps its records then)


def fill(log, n, now=NOW):
    for i in range(n):
        log.append_as_leader(batch([b"v%03d" % i]), now)


def test_segments_roll_by_size_and_reads_stay_within_one_segment(tmp_path):
    mgr = LogManager(str(tmp_path), defaults=LogConfig(segment_bytes=500))
    log = mgr.create_topic("t", 1).partitions[0]
    fill(log, 30)
    assert len(log.segments) > 3
    seen = []
    offset = 0
    while offset < 30:
        data = log.read(offset, 10_000)
        got = values(data)
        assert got and len(data) <= 500
        seen += got
        offset = next(iter_batches(data)).base_offset + len(got)
    assert seen == [b"v%03d" % i for i in range(30)]
    assert values(log.read(7, 1)) == [b"v007"]  # one whole batch even past max bytes
    assert log.read(7, 1, min_one_batch=False) == b""
    with pytest.raises(BrokerError) as exc:
        log.read(31, 100)
    assert exc.value.code == E.OFFSET_OUT_OF_RANGE
    mgr.close()
    table = ks.read_arrow(str(tmp_path))
    assert table.column("value").to_pylist() == [b"v%03d" % i for i in range(30)]
    assert table.column("offset").to_pylist() == list(range(30))


def test_a_crash_leaves_a_torn_tail_that_the_next_start_truncates(tmp_path):
    mgr = LogManager(str(tmp_path))
    topic = mgr.create_topic("t", 1)
    log = topic.partitions[0]
    fill(log, 5)
    seg_path = log.segments[-1].path
    mgr.close(clean=False)
    with open(seg_path, "ab") as f:  # half a batch, as a crash in the middle of a write
        f.write(batch([b"torn"])[:30])
    mgr2 = LogManager(str(tmp_path))
    log2 = mgr2.topics["t"].partitions[0]
    assert mgr2.topics["t"].topic_id == topic.topic_id
    assert log2.log_end_offset == 5 and log2.recovery and "partial" in log2.recovery[0]
    log2.append_as_leader(batch([b"after"]), NOW)
    # appended to the recovered segment, as Kafka does after a restart (no new segment)
    assert [s.path for s in log2.segments] == [seg_path]
    assert values(log2.read(0, 1 << 20)) == [b"v%03d" % i for i in range(5)] + [b"after"]
    assert values(log2.read(5, 1 << 20)) == [b"after"]
    mgr2.close()
    assert ks.read_arrow(str(tmp_path)).column("value").to_pylist() == \
        [b"v%03d" % i for i in range(5)] + [b"after"]
    # no damage left: `kproto logdir` exits 1 when it finds some
    logdir = subprocess.run([sys.executable, "-m", "kproto", "logdir", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert logdir.returncode == 0, logdir.stdout + logdir.stderr


def test_a_corrupt_batch_truncates_the_log_there_and_drops_later_segments(tmp_path):
    mgr = LogManager(str(tmp_path), defaults=LogConfig(segment_bytes=300))
    log = mgr.create_topic("t", 1).partitions[0]
    fill(log, 12)
    first = log.segments[0]
    n_segments = len(log.segments)
    assert n_segments >= 3
    mgr.close()
    with open(first.path, "r+b") as f:  # flip a byte in the second batch's records
        data = f.read()
        second = next(b for i, b in enumerate(iter_batches(data)) if i == 1)
        f.seek(second.position + second.size_in_bytes - 1)
        f.write(bytes([data[second.position + second.size_in_bytes - 1] ^ 0xFF]))
    log2 = LogManager(str(tmp_path)).topics["t"].partitions[0]
    assert log2.log_end_offset == 1
    assert sum(1 for r in log2.recovery if "deleted" in r) == n_segments - 1
    assert values(log2.read(0, 1 << 20)) == [b"v000"]


def test_producer_state_survives_a_restart(tmp_path):
    mgr = LogManager(str(tmp_path))
    log = mgr.create_topic("t", 1).partitions[0]
    for seq in (0, 1):
        log.append_as_leader(batch([b"%d" % seq], producer_id=7, producer_epoch=0, base_sequence=seq), NOW)
    mgr.close()
    log2 = LogManager(str(tmp_path)).topics["t"].partitions[0]
    dup = log2.append_as_leader(batch([b"1"], producer_id=7, producer_epoch=0, base_sequence=1), NOW)
    assert dup.duplicate and dup.base_offset == 1
    with pytest.raises(BrokerError) as exc:
        log2.append_as_leader(batch([b"x"], producer_id=7, producer_epoch=0, base_sequence=5), NOW)
    assert exc.value.code == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log2.append_as_leader(batch([b"2"], producer_id=7, producer_epoch=0, base_sequence=2), NOW).base_offset == 2


def test_a_directory_of_another_node_is_refused(tmp_path):
    LogManager(str(tmp_path), node_id=1).close()
    with pytest.raises(ValueError, match="node"):
        LogManager(str(tmp_path), node_id=2)
    assert isinstance(Uuid(LogManager(str(tmp_path), node_id=1).cluster_id), bytes)


def test_timestamps_too_far_from_now_are_refused_when_configured(tmp_path):
    mgr = LogManager(str(tmp_path))
    log = mgr.create_topic("t", 1, {"message.timestamp.after.max.ms": "1000"}).partitions[0]
    with pytest.raises(BrokerError) as exc:
        log.append_as_leader(batch([b"x"], timestamp=10_000), 0)
    assert exc.value.code == E.INVALID_TIMESTAMP
    assert log.append_as_leader(batch([b"x"], timestamp=500), 0).base_offset == 0
    assert os.path.exists(os.path.join(str(tmp_path), "t-0", "partition.metadata"))


@pytest.mark.parametrize("damage", ["missing", "truncated", "empty"])
def test_recovery_rebuilds_the_txnindex_of_the_recovered_segment(tmp_path, damage):
    from kproto.records import RecordBatchBuilder

    mgr = LogManager(str(tmp_path), defaults=LogConfig(segment_bytes=400))
    log = mgr.create_topic("t", 1).partitions[0]
    fill(log, 4)
    txn = RecordBatchBuilder(producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    txn.append(1_700_000_000_000, b"k", b"aborted")
    first = log.append_as_leader(txn.build(), 1_700_000_000_000).base_offset
    fill(log, 1)
    marker = RecordBatchBuilder(base_offset=log.log_end_offset, producer_id=5, producer_epoch=0,
                                transactional=True, control=True)
    marker.append_end_txn_marker(False, 3, 1_700_000_000_000)
    last = log.append_internal(marker.build()).last_offset
    fill(log, 1)
    assert log.aborted == [(5, first, last)]
    active = log.segments[-1]
    # the transaction began in the segment before the one its ABORT marker is in: the rebuild
    # needs the producer state of the earlier batches
    assert len(log.segments) > 1 and first < active.base_offset <= last
    txnindex = active.path[:-4] + ".txnindex"
    mgr.close(clean=False)
    with open(txnindex, "rb") as f:
        want = f.read()
    assert [(a.first_offset, a.last_offset) for a in ks.parse_txn_index(want)] == [(first, last)]
    if damage == "missing":
        os.unlink(txnindex)
    else:
        with open(txnindex, "r+b") as f:
            f.truncate(0 if damage == "empty" else 20)
    mgr2 = LogManager(str(tmp_path), defaults=LogConfig(segment_bytes=400))
    log2 = mgr2.topics["t"].partitions[0]
    with open(txnindex, "rb") as f:
        assert f.read() == want       # rebuilt at the start, before any append
    assert log2.aborted == [(5, first, last)]
    mgr2.close()
    committed = ks.read_arrow(str(tmp_path), isolation="read_committed")
    assert b"aborted" not in committed.column("value").to_pylist()
    assert len(committed) == 6


def test_a_follower_copies_the_leaders_batches_and_truncates_where_they_diverge(tmp_path):
    """Replication's log operations: the leader's batches appended as they are (offsets and
    leader epochs kept), the epoch cache answering OffsetsForLeaderEpoch, truncation across
    segments, and a reopened log that agrees with the storage reader."""
    from kproto.storage.checkpoints import LeaderEpochCheckpoint
    mgr = LogManager(str(tmp_path / "leader"), defaults=LogConfig(segment_bytes=400))
    leader = mgr.create_topic("t", 1).partitions[0]
    for epoch, n in ((0, 6), (3, 5), (4, 6)):
        leader.leader_epoch = epoch
        fill(leader, n)
    assert [(e.epoch, e.start_offset) for e in leader.plog.epochs] == [(0, 0), (3, 6), (4, 11)]
    assert leader.end_offset_for_epoch(0) == (0, 6)
    assert leader.end_offset_for_epoch(2) == (0, 6)      # the largest epoch below, where 3 began
    assert leader.end_offset_for_epoch(3) == (3, 11)
    assert leader.end_offset_for_epoch(4) == (4, 17)     # the latest: the log end
    assert leader.end_offset_for_epoch(9) == (4, 17)
    fmgr = LogManager(str(tmp_path / "follower"), node_id=2, defaults=LogConfig(segment_bytes=400))
    follower = fmgr.create_topic("t", 1, topic_id=leader.topic_id).partitions[0]
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read(offset, 250)
        offset = follower.append_as_follower(chunk + chunk[:30])   # a partial batch after
    assert offset == 17 and follower.append_as_follower(leader.read(15, 1000)) == 17  # a retry
    assert all_values(follower) == all_values(leader)
    assert follower.read(11, 1 << 20) == leader.read(11, 1 << 20)   # byte for byte
    assert [(e.epoch, e.start_offset) for e in follower.plog.epochs] == [(0, 0), (3, 6), (4, 11)]
    with open(os.path.join(follower.path, "leader-epoch-checkpoint"), "rb") as f:
        assert [(e.epoch, e.start_offset) for e in LeaderEpochCheckpoint.parse(f.read()).entries] == \
            [(0, 0), (3, 6), (4, 11)]   # written as each epoch began, not only at close
    from kproto.records import RecordBatchBuilder
    b = RecordBatchBuilder(base_offset=17)
    b.append(1_700_000_000_000, None, b"next")
    bad = bytearray(b.build())
    bad[-1] ^= 0xFF
    with pytest.raises(BrokerError) as exc:
        follower.append_as_follower(bytes(bad))
    assert exc.value.code == E.CORRUPT_MESSAGE and follower.log_end_offset == 17

    # diverged from offset 8 on: the follower keeps 0..7
    segments_before = len(follower.segments)
    assert follower.truncate_to(8) == 8
    assert len(follower.segments) < segments_before
    assert all_values(follower) == [b"v%03d" % i for i in range(6)] + [b"v000", b"v001"]
    assert [(e.epoch, e.start_offset) for e in follower.plog.epochs] == [(0, 0), (3, 6)]
    assert follower.end_offset_for_epoch(3) == (3, 8)
    follower.leader_epoch = 5
    follower.append_as_leader(batch([b"new"]), 1_700_000_000_000)
    assert follower.log_end_offset == 9 and follower.latest_epoch == 5
    assert follower.truncate_to(100) == 9                  # past the end: nothing to do
    assert follower.truncate_to(0) == 0 and follower.read(0, 100) == b""
    follower.leader_epoch = 6
    follower.append_as_leader(batch([b"again"]), 1_700_000_000_000)
    fmgr.close()
    mgr.close()
    table = ks.read_arrow(str(tmp_path / "follower"))
    assert table.column("value").to_pylist() == [b"again"]
    assert table.column("offset").to_pylist() == [0]


def test_the_high_watermark_follows_the_log_end_until_replication_sets_it(tmp_path):
    mgr = LogManager(str(tmp_path))
    log = mgr.create_topic("t", 1).partitions[0]
    fill(log, 3)
    assert log.high_watermark == 3
    assert log.set_high_watermark(1)
    assert log.high_watermark == 1 and log.last_stable_offset == 1
    assert log.bytes_available(0, log.high_watermark) > 0 and log.read(1, 1000, max_offset=1) == b""
    assert log.set_high_watermark(10) and log.high_watermark == 3   # never past the log end
    assert not log.set_high_watermark(None)
    mgr.close()


@pytest.mark.parametrize("compression", [0, 1])
def test_a_valid_batch_is_appended_without_decoding_its_columns(tmp_path, monkeypatch, compression):
    """The checks of a well-formed batch take one pass that builds nothing (a fixed cost per
    produced batch); the columnar decoding runs only to say what is wrong with a bad one."""
    from kproto.records import RecordBatch

    mgr = LogManager(str(tmp_path))
    log = mgr.create_topic("t", 1, {"message.timestamp.after.max.ms": "1000"}).partitions[0]
    real = RecordBatch.columns
    decoded = []
    monkeypatch.setattr(RecordBatch, "columns", lambda self: decoded.append(self) or real(self))
    good = batch([b"a", b"b", b"c"], timestamp=NOW, compression=compression)
    assert log.append_as_leader(good, NOW).last_offset == 2 and not decoded
    with pytest.raises(BrokerError) as exc:
        log.append_as_leader(batch([b"x", b"y"], timestamp=NOW + 5000, compression=compression), NOW)
    assert exc.value.code == E.INVALID_TIMESTAMP and len(decoded) == 1
    assert str(exc.value.message) == f"Timestamp {NOW + 5000} of message with offset 0 is out of range"
