"""kproto.storage.tail: a stream's steps over a log directory being written (the storage
writer, left open as a live broker leaves it) read every record exactly once, stop at the
high watermark and before open transactions, drop aborted ones, pick up new partitions, and
report what retention deleted before it was read."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from kproto.problems import Problems
from kproto.records import RecordBatchBuilder
from kproto.storage import LogDirWriter, OffsetCheckpoint
from kproto.storage.reader import ReadOptions, read_split
from kproto.storage.tail import (HW_CHECKPOINT, advance, locate, offsets_from_json,
                                 offsets_to_json, plan_ranges, resolve_bound, split_options,
                                 stream_ranges, tail_log_dirs)

TS = 1_700_000_000_000


def plain(w, n, tag):
    b = RecordBatchBuilder(base_offset=w.next_offset)
    for i in range(n):
        b.append(TS + i, None, f"{tag}-{i}".encode())
    w.append(b.build())


def txn(w, n, tag, pid, seq):
    b = RecordBatchBuilder(base_offset=w.next_offset, producer_id=pid, producer_epoch=0,
                           base_sequence=seq, transactional=True)
    for i in range(n):
        b.append(TS + i, None, f"{tag}-{i}".encode())
    w.append(b.build())


def marker(w, commit, pid):
    b = RecordBatchBuilder(base_offset=w.next_offset, producer_id=pid, producer_epoch=0,
                           transactional=True, control=True)
    b.append_end_txn_marker(commit, 3, TS)
    w.append(b.build())


class Stream:
    """What the Spark stream reader does, step by step, without Spark."""

    def __init__(self, path, **opts):
        self.path, self.opts = path, opts
        self.read = ReadOptions(isolation=opts.get("isolation", "read_uncommitted"))
        self.positions: dict = {}
        self.problems = Problems()
        self.rows: list[tuple] = []

    def step(self):
        tails = tail_log_dirs([self.path], problems=self.problems, **self.opts)
        end = advance(self.positions, tails)
        # through JSON, as Spark's checkpoint keeps it
        end = offsets_from_json(offsets_to_json(end))
        found = locate([self.path])
        ranges = stream_ranges(self.positions, end, {tp: s for tp, (_, s) in found.items()},
                               self.problems)
        for split in plan_ranges(ranges, {tp: f for tp, (f, _) in found.items()}, self.read,
                                 self.problems):
            frm, to = ranges[(split.topic, split.partition)]
            for rb in read_split(split, split_options(self.read, frm, to), problems=self.problems):
                t = pa.Table.from_batches([rb])
                self.rows += zip(t["topic"].to_pylist(), t["partition"].to_pylist(),
                                 t["offset"].to_pylist(), [v.decode() for v in t["value"].to_pylist()])
        self.positions = end
        return tails

    def values(self, topic="t", partition=0):
        return [v for t, p, _, v in self.rows if (t, p) == (topic, partition)]


def test_steps_read_each_record_once_and_committed_transactions_only(tmp_path):
    d = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=400)
    w = d.partition("t", 0)
    s = Stream(str(tmp_path), isolation="read_committed")
    plain(w, 3, "a")
    s.step()
    assert s.values() == ["a-0", "a-1", "a-2"]
    txn(w, 2, "c", 7, 0)          # committed later
    plain(w, 2, "b")              # waits behind the open transaction
    txn(w, 2, "x", 8, 0)          # aborted later
    tails = s.step()
    assert tails[("t", 0)].readable == 3 and s.values() == ["a-0", "a-1", "a-2"]
    marker(w, True, 7)
    s.step()  # producer 8's transaction is still open: stop at its first offset
    assert s.values()[3:] == ["c-0", "c-1", "b-0", "b-1"]
    txn(w, 1, "x2", 8, 2)
    marker(w, False, 8)
    plain(w, 1, "d")
    for _ in range(2):  # a second step finds nothing new
        s.step()
    assert s.values()[7:] == ["d-0"]
    offsets = [o for _, _, o, _ in s.rows]
    assert len(offsets) == len(set(offsets)) == 8
    assert len(os.listdir(os.path.join(tmp_path, "t-0"))) > 4  # the segments rolled
    assert not [p for p in s.problems if p.kind != "gap"], list(s.problems)


def test_read_uncommitted_steps_stop_only_at_the_log_end_and_survive_a_partial_batch(tmp_path):
    d = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A")
    w = d.partition("t", 0)
    s = Stream(str(tmp_path))
    txn(w, 2, "x", 8, 0)
    plain(w, 1, "b")
    log = os.path.join(tmp_path, "t-0", f"{0:020d}.log")
    with open(log, "ab") as f:  # a batch being written: only its first bytes are there
        b = RecordBatchBuilder(base_offset=w.next_offset)
        b.append(TS, None, b"late")
        f.write(b.build()[:30])
    tails = s.step()
    assert tails[("t", 0)].log_end == 3
    assert s.values() == ["x-0", "x-1", "b-0"]
    assert not list(s.problems)  # a write in progress is no torn tail


def test_high_watermark_bound_new_partitions_and_retention_gaps(tmp_path):
    d = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=200)
    w = d.partition("t", 0)
    for i in range(6):
        plain(w, 2, f"a{i}")
    hw = os.path.join(tmp_path, HW_CHECKPOINT)
    with open(hw, "wb") as f:
        f.write(OffsetCheckpoint([("t", 0, 4)]).encode())
    s = Stream(str(tmp_path))  # bound=auto: the checkpoint exists
    s.step()
    assert s.values() == ["a0-0", "a0-1", "a1-0", "a1-1"]
    assert Stream(str(tmp_path), bound="end").step()[("t", 0)].readable == 12
    # a new topic: no checkpoint entry yet, so nothing of it is known to be replicated
    plain(d.partition("u", 0), 2, "u")
    s.step()
    assert s.values("u") == []
    with open(hw, "wb") as f:
        f.write(OffsetCheckpoint([("t", 0, 12), ("u", 0, 2)]).encode())
    # retention deletes the oldest segments before the stream reads them
    folder = os.path.join(tmp_path, "t-0")
    bases = sorted(int(n[:20]) for n in os.listdir(folder) if n.endswith(".log"))
    keep = next(b for b in bases if b >= 8)
    for name in os.listdir(folder):
        if name[:20].isdigit() and int(name[:20]) < keep:
            os.remove(os.path.join(folder, name))
    s.step()
    assert s.values("u") == ["u-0", "u-1"]
    assert [v for _, _, o, v in s.rows if o >= keep] == s.values()[4:]
    gaps = [p for p in s.problems if p.kind == "gap"]
    assert len(gaps) == 1 and f"[4, {keep})" in gaps[0].reason, gaps


def test_offsets_json_and_bounds():
    assert offsets_to_json({("b", 10): 1, ("b", 2): 5, ("a", 0): 0}) == \
        {"a": {"0": 0}, "b": {"2": 5, "10": 1}}
    assert offsets_from_json({"a": {"3": 7}}) == {("a", 3): 7}
    with pytest.raises(ValueError):
        offsets_from_json({"a": {"3": "x"}})
    assert resolve_bound("auto", True) == "hw" and resolve_bound("AUTO", False) == "end"
    with pytest.raises(ValueError):
        resolve_bound("lso", True)


def test_read_committed_under_a_high_watermark_waits_for_markers_below_it(tmp_path):
    d = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A")
    w = d.partition("t", 0)
    txn(w, 2, "x", 8, 0)      # offsets 0-1, aborted by the marker at 3
    plain(w, 1, "b")          # 2
    marker(w, False, 8)       # 3
    plain(w, 1, "c")          # 4
    hw = os.path.join(tmp_path, HW_CHECKPOINT)
    with open(hw, "wb") as f:
        f.write(OffsetCheckpoint([("t", 0, 3)]).encode())
    s = Stream(str(tmp_path), isolation="read_committed")
    tails = s.step()
    # the marker is not below the high watermark yet: the transaction is still open there
    assert tails[("t", 0)].readable == 0 and s.values() == []
    with open(hw, "wb") as f:
        f.write(OffsetCheckpoint([("t", 0, 5)]).encode())
    s.step()
    assert s.values() == ["b-0", "c-0"]


def test_a_position_past_a_recreated_log_is_reported_and_the_stream_goes_on(tmp_path):
    d = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A")
    plain(d.partition("t", 0), 3, "new")
    s = Stream(str(tmp_path))
    s.positions = {("t", 0): 10}  # read up to 10 of the topic's earlier life
    s.step()
    assert s.positions == {("t", 0): 3} and s.values() == []
    assert [p.kind for p in s.problems] == ["gap"] and "past the log end" in s.problems[0].reason
    plain(d.partition("t", 0), 1, "more")
    s.step()
    assert s.values() == ["more-0"]


def test_a_rate_limit_shares_offsets_by_what_is_new_and_never_splits_an_open_transaction(tmp_path):
    """``maxOffsetsPerTrigger``: the limit shared in proportion to each partition's new
    offsets (Spark's Kafka rule); read_committed stops a capped step before a transaction
    still open at the cap, and reads a transaction longer than the share whole rather than
    not at all."""
    from kproto.storage.tail import rate_limit
    writer = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A")
    a, b = writer.partition("a", 0), writer.partition("b", 0)
    plain(a, 30, "a")
    plain(b, 10, "b")
    tails = tail_log_dirs([str(tmp_path)], bound="end")
    assert rate_limit({}, tails, 100) == {("a", 0): 30, ("b", 0): 10}        # under the limit
    assert rate_limit({}, tails, 8) == {("a", 0): 6, ("b", 0): 2}            # 8 * 30/40, 8 * 10/40
    assert rate_limit({("b", 0): 9}, tails, 2) == {("a", 0): 1, ("b", 0): 10}  # 1.93 -> 1; 0.06 -> 1
    # read_committed: a transaction of 5 starting at 30, committed; the share cuts into it
    txn(a, 5, "t", 7, 0)
    marker(a, True, 7)
    plain(a, 2, "after")
    committed = dict(bound="end", isolation="read_committed")
    tails = tail_log_dirs([str(tmp_path)], **committed)
    assert tails[("a", 0)].readable == 38
    caps = {("a", 0): 33}
    capped = tail_log_dirs([str(tmp_path)], caps=caps, **committed)
    assert capped[("a", 0)].readable == 30        # not into the transaction open at 33
    capped = tail_log_dirs([str(tmp_path)], caps={("a", 0): 36}, **committed)
    assert capped[("a", 0)].readable == 36        # past its marker (35): whole


def test_a_scan_from_the_log_start_remembers_only_the_active_segment(tmp_path):
    """What a step scanned of a closed segment is not kept (its offset index says where its
    batches are): read_committed without producer snapshots scans every segment, and the
    process keeps the batch boundaries of the active one only, not of the whole log."""
    from kproto.storage import tail
    from kproto.storage.partition import Partition
    writer = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=400)
    w = writer.partition("t", 0)
    for i in range(8):
        plain(w, 3, f"a{i}")
    txn(w, 2, "x", 8, 0)  # open: the last stable offset is 24
    for f in (tmp_path / "t-0").glob("*.snapshot"):
        f.unlink()  # no producer state: the scan starts at the log start
    tail._seen.clear()
    tails = tail_log_dirs([str(tmp_path)], bound="end", isolation="read_committed")
    assert tails[("t", 0)].readable == 24
    segments = Partition.open(str(tmp_path / "t-0")).segments
    assert len(segments) > 2
    assert [os.path.basename(p) for p in tail._seen] == [segments[-1].name]


def test_offsets_for_times_searches_from_the_log_start_offset(tmp_path):
    """Kafka's ListOffsets by timestamp looks at the records from the log start offset on: a
    deleted record that is late enough does not make an earlier one at the log start the
    answer (timestamps of CreateTime records need not grow with offsets)."""
    from kproto.storage.tail import offsets_for_times
    writer = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A")
    w = writer.partition("t", 0)
    for ts in (TS + 100, TS, TS + 200):  # offsets 0-4, 5-9, 10-14
        b = RecordBatchBuilder(base_offset=w.next_offset)
        for i in range(5):
            b.append(ts, None, b"v")
        w.append(b.build())
    writer.close()
    with open(tmp_path / "log-start-offset-checkpoint", "wb") as f:
        f.write(OffsetCheckpoint([("t", 0, 5)]).encode())  # DeleteRecords up to 5
    assert offsets_for_times([str(tmp_path)], TS + 100) == {("t", 0): 10}
    assert offsets_for_times([str(tmp_path)], TS) == {("t", 0): 5}
    assert offsets_for_times([str(tmp_path)], TS + 300) == {("t", 0): None}
    assert offsets_for_times([str(tmp_path)], TS + 100, include_deleted=True) == {("t", 0): 0}


def test_an_active_segment_truncated_and_regrown_past_what_was_seen_is_read_anew(tmp_path):
    """A follower truncates its log to where it agrees with the new leader, then appends the
    leader's records: between two steps the active segment can shrink and grow past the size
    an earlier step saw. The boundaries remembered from the old content must not be trusted:
    the step sees the new log end and reads the new records."""
    d = LogDirWriter(str(tmp_path), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A")
    w = d.partition("t", 0)
    for tag in "abc":
        plain(w, 1, tag)
    s = Stream(str(tmp_path))
    assert s.step()[("t", 0)].log_end == 3 and s.values() == ["a-0", "b-0", "c-0"]
    log = os.path.join(tmp_path, "t-0", f"{0:020d}.log")
    old_size = os.path.getsize(log)
    with open(log, "r+b") as f:
        first = RecordBatchBuilder(base_offset=0)
        first.append(TS, None, b"a-0")
        f.truncate(len(first.build()))   # offsets 1 and 2 were not committed: gone
        f.seek(0, os.SEEK_END)
        for base, n in ((1, 3), (4, 2)):  # the new leader's records, laid out differently
            b = RecordBatchBuilder(base_offset=base)
            for i in range(n):
                b.append(TS + i, None, f"n{base}-{i}".encode())
            f.write(b.build())
    assert os.path.getsize(log) > old_size
    assert s.step()[("t", 0)].log_end == 6
    assert s.values()[3:] == ["n1-2", "n4-0", "n4-1"]
    assert not list(s.problems), list(s.problems)
