"""Segment-level reading: index rebuild by scanning, index-aware seeks by offset and timestamp,
and damage handling on synthetic corruption."""
from __future__ import annotations

import os
import random

import numpy as np
import pytest

from kproto.storage.layout import scan_log_dir, scan_partition_dir
from kproto.storage.partition import (Partition, batch_max_timestamp, rebuild_indexes,
                                     scan_batches)
from kproto.storage.reader import plan_splits, read_arrow
from kproto.problems import Problems

from storage_fixtures import LOGDIRS, load_expected, partition_dirs

SEGMENTS = [(rel, seg["base_offset"]) for rel in partition_dirs()
            for seg in load_expected(os.path.join(rel, "partition.json"))[0]["segments"]]


def _seg(rel, base):
    part = Partition.open(os.path.join(LOGDIRS, rel))
    return next(s for s in part.segments if s.base_offset == base)


def _expected(rel, base, kind):
    return load_expected(os.path.join(rel, f"{base:020d}.{kind}.jsonl"))


@pytest.mark.parametrize("rel,base", SEGMENTS)
def test_rebuilt_indexes_match_broker(rel, base):
    seg = _seg(rel, base)
    head = _expected(rel, base, "index")[0]
    oi, ti = rebuild_indexes(seg.read(), base, active=head["preallocated"])
    if "users-0" in rel and len(oi) != head["entries"]:
        # written with multi-batch appends, whose boundaries the files do not keep: the rebuilt
        # index (one append per batch, as Kafka's recovery makes it) must still seek right
        batches = [x for x in _expected(rel, base, "log") if x["type"] == "batch"]
        for x in batches:
            pos = oi.lookup(x["last_offset"])[1]
            assert pos <= x["position"] and pos in {y["position"] for y in batches} | {0}
        return
    assert [(o, p) for o, p in zip(oi.offsets.tolist(), oi.positions.tolist())] == \
        [(e["offset"], e["position"]) for e in _expected(rel, base, "index")[1:]]
    assert [(t, o) for t, o in zip(ti.timestamps.tolist(), ti.offsets.tolist())] == \
        [(e["timestamp"], e["offset"]) for e in _expected(rel, base, "timeindex")[1:]]


@pytest.mark.parametrize("rel,base", SEGMENTS)
def test_seek_by_offset_and_timestamp(rel, base):
    seg = _seg(rel, base)
    data = seg.read()
    batches = [x for x in _expected(rel, base, "log") if x["type"] == "batch"]
    rng = random.Random(f"{rel}{base}")
    biggest = max(x["size_in_bytes"] for x in batches)
    for b in rng.sample(batches, min(15, len(batches))):
        target = rng.randint(b["base_offset"], b["last_offset"])
        pos = seg.position_of(target)
        found = next(x for x in scan_batches(data, pos) if x.last_offset >= target)
        assert found.position == b["position"]
        # a short scan: entries are at most 4096 bytes + one append apart
        assert b["position"] - pos <= 4096 + biggest + 65536 * ("users-0" in rel)
    stamps = sorted({x["max_timestamp"] for x in batches if x["max_timestamp"] >= 0})
    for ts in rng.sample(stamps, min(15, len(stamps))):
        ts += rng.choice((-1, 0, 1))
        want = next((x["position"] for x in batches if x["max_timestamp"] >= ts), None)
        pos = seg.position_of_timestamp(ts)
        got = next((x.position for x in scan_batches(data, pos)
                    if batch_max_timestamp(x) >= ts), None)
        assert got == want


def _copy_partition(tmp_path, rel):
    src = os.path.join(LOGDIRS, rel)
    dst = tmp_path / os.path.basename(rel)
    dst.mkdir()
    for n in os.listdir(src):
        (dst / n).write_bytes((open(os.path.join(src, n), "rb")).read())
    return dst


def test_corrupt_length_resyncs_at_next_index_entry(tmp_path):
    dst = _copy_partition(tmp_path, "broker1-clean/orders-0")
    part = Partition.open(str(dst))
    seg = part.segments[1]
    idx = seg.offset_index
    batches = [x for x in _expected("broker1-clean/orders-0", seg.base_offset, "log")
               if x["type"] == "batch"]
    victim = next(b for b in batches if idx.positions[2] < b["position"] < idx.positions[3])
    raw = bytearray(seg.read())
    raw[victim["position"] + 8:victim["position"] + 12] = b"\x00\x00\x00\x05"  # size 5
    (dst / seg.name).write_bytes(bytes(raw))
    damage = Problems()
    rows = read_arrow(str(dst), problems=damage).column("offset").to_pylist()
    resume = int(idx.positions[3])
    assert [(d.kind, d.position, d.bytes_skipped) for d in damage] == [
        ("corrupt", victim["position"], resume - victim["position"])]
    lost = {o for b in batches if victim["position"] <= b["position"] < resume
            for o in range(b["base_offset"], b["last_offset"] + 1)}
    every = read_arrow(os.path.join(LOGDIRS, "broker1-clean/orders-0")).column("offset").to_pylist()
    assert rows == [o for o in every if o not in lost]


def test_missing_index_is_rebuilt_by_scanning(tmp_path):
    dst = _copy_partition(tmp_path, "broker1-clean/payments-0")
    for n in os.listdir(dst):
        if n.endswith(".index") or n.endswith(".timeindex"):
            os.remove(dst / n)
    part = Partition.open(str(dst))
    orig = Partition.open(os.path.join(LOGDIRS, "broker1-clean/payments-0"))
    for seg, o in zip(part.segments, orig.segments, strict=True):
        # payments was written one batch per append: the rebuilt indexes are the broker's
        assert seg.offset_index.offsets.tolist() == o.offset_index.offsets.tolist()
        assert seg.offset_index.positions.tolist() == o.offset_index.positions.tolist()
        assert seg.time_index.timestamps.tolist() == o.time_index.timestamps.tolist()
        assert seg.indexes_rebuilt and not o.indexes_rebuilt and not seg.problems
    assert len(plan_splits(str(dst), split_bytes=8192)) == len(plan_splits(
        os.path.join(LOGDIRS, "broker1-clean/payments-0"), split_bytes=8192)) > 4
    whole = read_arrow(os.path.join(LOGDIRS, "broker1-clean/payments-0"), start_offset=700)
    assert read_arrow(str(dst), start_offset=700).equals(whole)


def test_garbage_index_is_reported_not_trusted(tmp_path):
    dst = _copy_partition(tmp_path, "broker1-clean/clicks-0")
    (dst / "00000000000000000000.index").write_bytes(b"\x00\x00\x00\x10\x7f\x00\x00\x00" * 3)
    damage = Problems()
    t = read_arrow(str(dst), problems=damage, start_offset=300)
    assert [d.kind for d in damage] == ["index"] and "rebuilt" in damage[0].reason
    assert t.column("offset").to_pylist()[0] == 300
    seg = Partition.open(str(dst)).segments[0]
    assert seg.offset_index.offsets.tolist() == Partition.open(os.path.join(
        LOGDIRS, "broker1-clean/clicks-0")).segments[0].offset_index.offsets.tolist()


def test_moved_partition_dirs_are_not_read(tmp_path):
    src = os.path.join(LOGDIRS, "broker1-clean")
    root = tmp_path / "logs"
    root.mkdir()
    a = _copy_partition(root, "broker1-clean/legacy-0")
    os.rename(a, root / "legacy-0.0123456789abcdef0123456789abcdef-delete")
    _copy_partition(root, "broker1-clean/clicks-0")
    assert len(scan_log_dir(str(root)).moved) == 1
    t = read_arrow(str(root))
    assert set(t.column("topic").to_pylist()) == {"clicks"}
    assert os.path.isdir(src)


@pytest.mark.parametrize("rel", partition_dirs())
def test_offset_for_timestamp(rel):
    from storage_fixtures import expected_records

    part = Partition.open(os.path.join(LOGDIRS, rel))
    records = expected_records(rel)
    batches = {}
    for r in records:
        batches.setdefault((r["segment"], r["batch"]["position"]), r["batch"])
    rng = random.Random(rel)
    stamps = sorted({r["timestamp"] for r in records})
    for ts in rng.sample(stamps, min(12, len(stamps))) + [stamps[-1] + 1, -5]:
        # Kafka: the first batch whose max timestamp reaches ts, then its first such record
        want = None
        for r in records:
            if r["batch"]["max_timestamp"] >= ts and r["timestamp"] >= ts:
                want = (r["offset"], r["timestamp"])
                break
        assert part.offset_for_timestamp(ts) == want, ts


def test_an_active_segments_preallocated_index_is_read_only_where_it_has_entries(tmp_path, monkeypatch):
    """A broker's active segment has 10 MB indexes, mostly zeros (a synced directory on object
    storage pays for every byte): they are read in growing pieces up to the first empty slot."""
    from kproto.records import RecordBatchBuilder
    from kproto.storage import PartitionWriter
    from kproto.storage import partition as part_mod

    writer = PartitionWriter(str(tmp_path), "t", 0)
    for i in range(800):   # 800 batches of ~5 KB: one index entry each, 4 MB of segment
        b = RecordBatchBuilder(base_offset=i)
        b.append(1_700_000_000_000 + i, None, bytes(5000))
        writer.append(b.build())
    writer.close(clean=False)   # the crash leaves the active segment's indexes preallocated
    index = os.path.join(writer.path, "00000000000000000000.index")
    assert os.path.getsize(index) == 10 * 1024 * 1024
    read: dict[str, int] = {}
    real = part_mod._read

    def counting(path, start=0, end=None):
        data = real(path, start, end)
        read[os.path.basename(path)] = read.get(os.path.basename(path), 0) + len(data)
        return data

    monkeypatch.setattr(part_mod, "_read", counting)
    p = Partition.open(scan_partition_dir(writer.path))
    seg = p.segments[0]
    assert len(seg.offset_index) > 700 and not any(d.kind == "index" for d in seg.problems)
    # ~6 KB of entries: one 64 KiB piece each, where the segment's size alone allows 1.2 MB
    assert read["00000000000000000000.index"] == 65536 - 65536 % 8
    assert read["00000000000000000000.timeindex"] == 65536 - 65536 % 12
    monkeypatch.setattr(part_mod, "INDEX_PIECE", 1024)   # entries over several pieces: same index
    again = Partition.open(scan_partition_dir(writer.path)).segments[0]
    assert np.array_equal(again.offset_index.positions, seg.offset_index.positions)
    assert np.array_equal(again.time_index.timestamps, seg.time_index.timestamps)
