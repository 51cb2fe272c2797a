"""PartitionLog.resume / PartitionWriter.open continue a partition folder in its last segment,
as a restarted broker does; rebuild_txn_index rebuilds a lost .txnindex; append returns the
aborted transactions; roll is public."""
from __future__ import annotations

import os

import pytest

from kproto.errors import DecodeError, EncodeError
from kproto.records import RecordBatchBuilder
from kproto.storage.dump import dump_file
from kproto.storage.indexes import encode_txn_index, parse_txn_index
from kproto.storage.partition import Partition
from kproto.storage.reader import read_arrow
from kproto.storage.writer import PartitionLog, PartitionWriter, ProducerStateTracker, rebuild_txn_index

TS = 1_700_000_000_000
PID = 9


def _plain(offset, i):
    """Batches of one size (2 records, fixed-width keys and values): positions are i * size."""
    b = RecordBatchBuilder(base_offset=offset, partition_leader_epoch=3 if i >= 6 else 1)
    for k in range(2):
        b.append(TS + 10 * i + k, f"k{offset + k:06d}".encode(), b"v" * 500)
    return b.build()


def _txn(offset, seq, i):
    b = RecordBatchBuilder(base_offset=offset, producer_id=PID, producer_epoch=0,
                           base_sequence=seq, transactional=True, partition_leader_epoch=1)
    for k in range(2):
        b.append(TS + 10 * i + k, f"t{offset + k:06d}".encode(), b"w" * 500)
    return b.build()


def _marker(offset, commit, i):
    b = RecordBatchBuilder(base_offset=offset, producer_id=PID, producer_epoch=0,
                           transactional=True, control=True, partition_leader_epoch=1)
    b.append_end_txn_marker(commit, 7, TS + 10 * i)
    return b.build()


def _appends():
    """12 appends: plain, a transaction aborted, plain, a transaction left open, plain."""
    out, off = [], 0
    kinds = ["p", "t", "a", "p", "p", "t", "p", "p", "p", "p", "p", "p"]
    seq = 0
    for i, kind in enumerate(kinds):
        if kind == "p":
            data = _plain(off, i)
        elif kind == "t":
            data, seq = _txn(off, seq, i), seq + 2
        else:
            data = _marker(off, False, i)
        out.append(data)
        off += 1 if kind == "a" else 2
    return out


def _files(path):
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


def _write(path, appends, split, *, clean_restart=True, continuous=False, **opts):
    w = PartitionWriter(str(path), "t", 0, topic_id=b"\x01" * 16, **opts)
    for data in appends[:split]:
        w.append(data)
    if split < len(appends):
        w.close(clean=clean_restart)
        w = PartitionWriter.open(str(path), "t", 0, continuous=continuous, **opts)
        for data in appends[split:]:
            w.append(data)
    w.close()
    return w.path


@pytest.mark.parametrize("clean_restart", [True, False])
@pytest.mark.parametrize("split", [1, 4, 7, 11])
def test_continuous_resume_equals_one_uninterrupted_write(tmp_path, split, clean_restart):
    appends = _appends()
    opts = dict(index_interval=1000, segment_bytes=6000, segment_index_bytes=4096)
    whole = _files(_write(tmp_path / "a", appends, len(appends), **opts))
    resumed = _files(_write(tmp_path / "b", appends, split, clean_restart=clean_restart,
                            continuous=True, **opts))
    assert any(n.endswith(".txnindex") for n in whole) and sum(n.endswith(".log") for n in whole) >= 2
    # a clean close before the restart leaves one more snapshot (at that log end), as Kafka's
    extra = {n for n in set(resumed) - set(whole) if n.endswith(".snapshot")}
    assert set(resumed) - extra == set(whole)
    for name, data in whole.items():
        assert resumed[name] == data, name


def test_kafka_resume_counts_index_bytes_from_zero(tmp_path):
    """Kafka's restart: bytesSinceLastIndexEntry starts at 0 and the max timestamp is the last
    time-index entry (the final entry of the clean close stays)."""
    appends = [_plain(2 * i, i) for i in range(10)]
    size = len(appends[0])
    assert all(len(a) == size for a in appends)
    opts = dict(index_interval=size + 1)   # an entry every second append
    whole = _write(tmp_path / "a", appends, 10, **opts)
    resumed = _write(tmp_path / "b", appends, 4, **opts)
    assert _files(whole)["00000000000000000000.log"] == _files(resumed)["00000000000000000000.log"]
    idx = lambda p: [(e["offset"], e["position"]) for e in dump_file(os.path.join(p, "00000000000000000000.index"))[1:]]  # noqa: E731
    tidx = lambda p: [(e["timestamp"], e["offset"]) for e in dump_file(os.path.join(p, "00000000000000000000.timeindex"))[1:]]  # noqa: E731
    # uninterrupted: entries at appends 3, 5, 7, 9 (1-based); resumed after append 4: the
    # count restarts, so 3 then 7, 9
    assert idx(whole) == [(5, 2 * size), (9, 4 * size), (13, 6 * size), (17, 8 * size)]
    assert idx(resumed) == [(5, 2 * size), (13, 6 * size), (17, 8 * size)]
    ts = lambda i: TS + 10 * i + 1  # noqa: E731 - max timestamp of append i (0-based)
    assert tidx(whole) == [(ts(2), 5), (ts(4), 9), (ts(6), 13), (ts(8), 17), (ts(9), 19)]
    assert tidx(resumed) == [(ts(2), 5), (ts(3), 7), (ts(6), 13), (ts(8), 17), (ts(9), 19)]


def test_resume_restores_producer_state_epochs_and_txnindex(tmp_path):
    appends = _appends()
    path = _write(tmp_path / "a", appends, len(appends), index_interval=1000, segment_bytes=6000)
    log = PartitionLog.resume(path, index_interval=1000, segment_bytes=6000)
    whole = PartitionLog(index_interval=1000, segment_bytes=6000)
    for data in appends:
        whole.append(data)
    assert log.next_offset == whole.next_offset == 23
    assert log.producers.producers == whole.producers.producers
    assert log.producers.ongoing == whole.producers.ongoing == {PID: 9}
    assert log.epochs == whole.epochs
    assert log.segment.base_offset == whole.segment.base_offset > 0
    assert log.segment.size == whole.segment.size
    # the transaction left open is aborted after the restart: the entry joins the segment's
    marker = RecordBatchBuilder(base_offset=23, producer_id=PID, producer_epoch=0,
                                transactional=True, control=True)
    marker.append_end_txn_marker(False, 7, TS)
    ops = log.append(marker.build())
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in ops.aborted] == [(PID, 9, 23)]


def test_a_torn_tail_is_refused(tmp_path):
    path = _write(tmp_path, _appends(), 3)
    with open(os.path.join(path, "00000000000000000000.log"), "ab") as f:
        f.write(b"\x00" * 30)
    with pytest.raises(DecodeError, match="recover"):
        PartitionLog.resume(path)


def test_resume_of_an_empty_folder(tmp_path):
    w = PartitionWriter(str(tmp_path), "t", 0)
    w.close()
    w = PartitionWriter.open(str(tmp_path), "t", 0)
    w.append(_plain(0, 0))
    w.close()
    assert read_arrow(w.path).num_rows == 2


def test_rebuild_txn_index(tmp_path):
    appends = _appends()
    path = _write(tmp_path, appends, len(appends), index_interval=1000, segment_bytes=6000)
    part = Partition.open(path)
    (seg,) = [s for s in part.segments if s.files.txnindex]
    want = parse_txn_index(open(seg.files.txnindex, "rb").read())
    assert [(a.first_offset, a.last_offset) for a in want] == [(2, 4)]
    # the producer state at the segment's base offset, from the batches before it
    before = ProducerStateTracker()
    for s in part.segments:
        if s.base_offset >= seg.base_offset:
            break
        rebuild_txn_index(s.read(), before)
    assert encode_txn_index(rebuild_txn_index(seg.read(), before)) == encode_txn_index(want)
    # alone (no transaction open before the segment), from parsed batches too
    assert rebuild_txn_index(list(seg.scan())) == want


def test_append_returns_aborted_and_roll(tmp_path):
    log = PartitionLog()
    assert log.roll() == []                   # an empty active segment is not rolled
    assert log.append(_txn(0, 0, 0)).aborted == ()
    ops = log.append(_marker(2, False, 1))
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in ops.aborted] == [(PID, 0, 2)]
    assert log.append(_marker(3, True, 2)).aborted == ()
    with pytest.raises(EncodeError):
        log.roll(2)
    names = [op.name for op in log.roll()]
    assert names == ["00000000000000000000.index", "00000000000000000000.timeindex",
                     "00000000000000000000.txnindex", "00000000000000000004.snapshot",
                     "00000000000000000004.log"]
    assert log.segment.base_offset == 4
