"""read_arrow over every fixture partition returns exactly the expected records, in both
isolations, and reports the damage the fixtures document."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from kproto.storage.reader import arrow_schema, plan_splits, read_arrow, read_split, ReadOptions
from kproto.problems import Problems

from storage_fixtures import (LOGDIRS, committed_rows as _committed, expected_aborted, expected_lso,
                              expected_records, load_expected, partition_dirs, want_row as _want_row)

PARTS = partition_dirs()
def _rows(table: pa.Table) -> list[dict]:
    assert table.schema == arrow_schema()
    table = table.set_column(3, "timestamp", table.column("timestamp").cast(pa.int64()))
    return table.to_pylist()



@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("include_control", [False, True])
def test_read_arrow_matches_expected(part, isolation, include_control):
    topic, partition = os.path.basename(part).rsplit("-", 1)
    want = [_want_row(r, topic, int(partition)) for r in expected_records(part)]
    if isolation == "read_committed":
        want = _committed(want, part, include_control)
    elif not include_control:
        want = [r for r in want if not r["is_control"]]
    got = _rows(read_arrow(os.path.join(LOGDIRS, part), isolation=isolation,
                           include_control=include_control))
    assert len(got) == len(want)
    assert got == want


def test_read_committed_filters_something():
    # guards the test above against a fixture change that would make both isolations equal
    part = next(p for p in PARTS if p.endswith("payments-0"))
    rows = [_want_row(r, "payments", 0) for r in expected_records(part)]
    assert expected_aborted(part) and expected_lso(part) is not None
    assert len(_committed(rows, part, False)) < len([r for r in rows if not r["is_control"]])


@pytest.mark.parametrize("broker", sorted(os.listdir(LOGDIRS)))
def test_whole_log_dir(broker):
    table = read_arrow(os.path.join(LOGDIRS, broker), include_control=True)
    parts = [p for p in PARTS if p.startswith(broker + "/")]
    assert table.num_rows == sum(len(expected_records(p)) for p in parts)
    got = sorted(set(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist())))
    assert got == sorted((p.split("/")[1].rsplit("-", 1)[0], int(p.rsplit("-", 1)[1])) for p in parts)


def _notes(part):
    return load_expected(os.path.join(part, "partition.json"))[0]


def test_torn_tail_reported_and_not_read():
    part = "broker1-crashed/events-1"
    seg = _notes(part)["segments"][-1]
    summary = load_expected(os.path.join(part, f"{seg['base_offset']:020d}.log.jsonl"))[-1]
    for isolation in ("read_uncommitted", "read_committed"):
        damage = Problems()
        table = read_arrow(os.path.join(LOGDIRS, part), problems=damage, isolation=isolation)
        assert table.column("offset").to_pylist()[-1] == seg["last_batch_last_offset"]
        assert [(d.kind, os.path.basename(d.source), d.position, d.bytes_skipped)
                for d in damage] == [("torn-tail", f"{seg['base_offset']:020d}.log",
                                      seg["valid_bytes"], summary["trailing_bytes"])]


def test_crc_damage_reported_and_skipped_only_when_verifying():
    part = "broker1-crashed/events-2"
    bad = [(r["segment"], r["batch"]["position"], r["batch"]["size_in_bytes"], r["offset"])
           for r in expected_records(part) if not r["batch"]["is_valid"]]
    assert bad
    segment, position, size = bad[0][:3]
    assert f"batch at {position}" in _notes(part)["note"]
    damage = Problems()
    table = read_arrow(os.path.join(LOGDIRS, part), problems=damage)
    assert table.num_rows == len(expected_records(part))
    assert [(d.kind, os.path.basename(d.source), d.position, d.bytes_skipped) for d in damage] == [
        ("crc", segment, position, 0)]
    damage = Problems()
    table = read_arrow(os.path.join(LOGDIRS, part), problems=damage, verify_crc=True)
    assert [(d.kind, d.position, d.bytes_skipped) for d in damage] == [("crc", position, size)]
    skipped = {o for *_x, o in bad}
    assert set(table.column("offset").to_pylist()) == \
        {r["offset"] for r in expected_records(part)} - skipped


def test_damage_records_say_their_topic_and_partition():
    # every problem of a read carries the partition it was found in (Spark's damage rows
    # take it from there), whether met while planning (an index) or while reading (a batch)
    crashed = os.path.join(LOGDIRS, "broker1-crashed")
    found = Problems()
    read_arrow(crashed, problems=found)
    assert {(p.kind, p.topic, p.partition) for p in found} == \
        {("torn-tail", "events", 1), ("crc", "events", 2)}
    assert all(os.path.basename(os.path.dirname(p.source)) == f"{p.topic}-{p.partition}"
               for p in found)


def test_clean_fixtures_have_no_damage():
    damage = Problems()
    read_arrow(os.path.join(LOGDIRS, "broker1-clean"), problems=damage)
    assert not damage


@pytest.mark.parametrize("part", [p for p in PARTS if "legacy" not in p])
def test_small_splits_give_the_same_rows(part):
    path = os.path.join(LOGDIRS, part)
    whole = read_arrow(path, include_control=True)
    splits = plan_splits(path, split_bytes=8192)
    segs = _notes(part)["segments"]
    assert len(splits) > len(segs) or all(s["log_size"] <= 2 * 8192 for s in segs)
    opts = ReadOptions(include_control=True)
    parts = [rb for s in splits for rb in read_split(s, opts)]
    assert pa.Table.from_batches(parts, schema=whole.schema).equals(whole)
    for s in splits:  # every cut is at a batch boundary
        lines = load_expected(os.path.join(part, os.path.basename(s.path) + ".jsonl"))
        assert s.start in {x["position"] for x in lines if x["type"] == "batch"}


@pytest.mark.parametrize("part", ["broker1-clean/orders-1", "broker1-clean/clicks-0",
                                  "broker1-clean/legacy-0", "broker1-crashed/events-0"])
def test_offset_and_timestamp_ranges(part):
    import random
    rng = random.Random(part)
    rows = [r for r in expected_records(part) if not r["batch"]["is_control"]]
    offsets = [r["offset"] for r in rows]
    stamps = sorted(r["timestamp"] for r in rows)
    path = os.path.join(LOGDIRS, part)
    for _ in range(6):
        lo, hi = sorted(rng.sample(offsets, 2))
        t = read_arrow(path, start_offset=lo, end_offset=hi)
        assert t.column("offset").to_pylist() == [o for o in offsets if lo <= o < hi]
        tlo, thi = sorted(rng.sample(stamps, 2))
        t = read_arrow(path, start_timestamp=tlo, end_timestamp=thi)
        assert t.column("offset").to_pylist() == [r["offset"] for r in rows
                                                  if tlo <= r["timestamp"] < thi]


def test_filters_by_topic_and_partition():
    t = read_arrow(os.path.join(LOGDIRS, "broker1-clean"), topics=["orders"], partitions=[0, 2])
    assert set(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist())) == {
        ("orders", 0), ("orders", 2)}
    with pytest.raises(ValueError):
        read_arrow(os.path.join(LOGDIRS, "broker1-clean"), isolation="read_dirty")


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_chunking_does_not_change_rows(isolation):
    path = os.path.join(LOGDIRS, "broker1-clean", "payments-0")
    opts = ReadOptions(isolation=isolation, include_control=True, start_offset=37,
                       end_offset=1850)
    splits = plan_splits(path, options=opts)
    whole = pa.Table.from_batches([rb for s in splits for rb in read_split(s, opts)])
    small = pa.Table.from_batches([rb for s in splits for rb in read_split(s, opts, chunk_bytes=500)])
    assert small.equals(whole)
    offsets = whole.column("offset").to_pylist()
    assert offsets[0] >= 37 and max(offsets) < 1850 and len(offsets) > 1000
    assert read_arrow(path, isolation=isolation, include_control=True, start_offset=37,
                      end_offset=1850).equals(whole)


def test_binary_view_option():
    path = os.path.join(LOGDIRS, "broker1-clean", "orders-0")
    plain = read_arrow(path)
    view = read_arrow(path, binary_view=True)
    assert view.schema == arrow_schema(binary_view=True)
    assert view.column("value").cast(pa.binary()).equals(plain.column("value"))


def test_splits_survive_pickling():
    # a Spark source ships splits and options to executors
    import pickle

    path = os.path.join(LOGDIRS, "broker1-clean")
    opts = ReadOptions(isolation="read_committed")
    splits = plan_splits(path, options=opts, split_bytes=16384)
    back, opts2 = pickle.loads(pickle.dumps((splits, opts)))
    assert back == splits and opts2 == opts
    rows = sum(rb.num_rows for s in back for rb in read_split(s, opts2))
    assert rows == read_arrow(path, isolation="read_committed").num_rows


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_legacy_wrapper_that_does_not_decompress_is_damage_in_both_isolations(isolation):
    # a compressed magic 1 wrapper learns its first offset only by decompressing; with a last
    # stable offset (read_committed) that happens while choosing batches, before decoding
    import gzip

    from kproto.records.builder import encode_legacy_message
    from kproto.storage.reader import Split, read_buffer

    torn = gzip.compress(b"x" * 100)[:-12]
    first, bad = (encode_legacy_message(0, 1, 0, 1000, b"k0", b"v0"),
                  encode_legacy_message(3, 1, 1, 1001, None, torn))
    data = first + bad + encode_legacy_message(4, 1, 0, 1002, b"k4", b"v4")
    split = Split("t-0/00000000000000000000.log", "t", 0, 0, 0, len(data),
                  last_stable_offset=10)
    damage = Problems()
    rows = [rb for rb in read_buffer(data, split, ReadOptions(isolation=isolation),
                                     problems=damage)]
    assert pa.Table.from_batches(rows).column("offset").to_pylist() == [0, 4]
    assert [(d.kind, d.position, d.bytes_skipped) for d in damage] == [
        ("corrupt", len(first), len(bad))]
    assert "gzip" in damage[0].reason


def test_a_pathlib_path_reads_as_its_string():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples" / "logdir"
    assert read_arrow(root).equals(read_arrow(str(root)))
    assert read_arrow(root).num_rows > 0
