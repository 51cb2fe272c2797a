"""Readers start each partition at its log start offset (``log-start-offset-checkpoint``):
records DeleteRecords or retention removed are still in their first segment on disk, but no
consumer can fetch them, so read_arrow / iter_arrow / plan_splits / kproto logdir leave them
out unless asked (``include_deleted``)."""
from __future__ import annotations

import json
import os

import pytest

import kproto
from kproto.records import RecordBatchBuilder
from kproto.spark.scan import parse_options
from kproto.storage.checkpoints import OffsetCheckpoint
from kproto.storage.partition import Partition, read_log_start_offsets
from kproto.storage.reader import iter_arrow, plan_splits, read_arrow
from kproto.storage.writer import LogDirWriter

from storage_fixtures import run_cli

TS = 1_700_000_000_000


def _batch(w, n, ts, **kw):
    b = RecordBatchBuilder(base_offset=w.next_offset, **kw)
    for i in range(n):
        b.append(ts + i, f"k{w.next_offset + i}".encode(), b"v" * 200)
    return b.build()


@pytest.fixture
def logdir(tmp_path):
    """t-0: 200 records in batches of 5 over several segments; t-1: 20 records; both closed
    cleanly (LogDirWriter writes every partition's start, 0, to the checkpoint)."""
    root = str(tmp_path / "logs")
    d = LogDirWriter(root, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A", segment_bytes=8000,
                     index_interval=1000)
    w0, w1 = d.partition("t", 0), d.partition("t", 1)
    for i in range(40):
        w0.append(_batch(w0, 5, TS + 10 * i))
    for i in range(4):
        w1.append(_batch(w1, 5, TS + i))
    d.close()
    return root


def _set_starts(root, entries):
    with open(os.path.join(root, "log-start-offset-checkpoint"), "wb") as f:
        f.write(OffsetCheckpoint(entries).encode())


def _offsets(table, partition=0):
    return [o for p, o in zip(table.column("partition").to_pylist(),
                              table.column("offset").to_pylist()) if p == partition]


def test_readers_start_at_the_log_start_offset(logdir):
    part = Partition.open(os.path.join(logdir, "t-0"))
    bases = [s.base_offset for s in part.segments]
    assert len(bases) >= 4
    start = bases[2] + 12   # inside the third batch of the third segment
    _set_starts(logdir, [("t", 0, start), ("t", 1, 0)])
    assert read_log_start_offsets(logdir) == {("t", 0): start, ("t", 1): 0}

    table = read_arrow(logdir)
    assert _offsets(table, 0) == list(range(start, 200))
    assert _offsets(table, 1) == list(range(20))     # a start at its first offset: unchanged
    assert _offsets(read_arrow(logdir, include_deleted=True), 0) == list(range(200))
    rows = [o for rb in iter_arrow(logdir, topics=["t"], partitions=[0])
            for o in rb.column("offset").to_pylist()]
    assert rows == list(range(start, 200))
    # a partition folder read alone takes its entry from the log dir it is in
    assert _offsets(read_arrow(os.path.join(logdir, "t-0"))) == list(range(start, 200))
    assert _offsets(read_arrow(os.path.join(logdir, "t-0"), include_deleted=True)) == list(range(200))
    # a start offset below the log start is raised to it; one above it is kept
    assert _offsets(read_arrow(logdir, start_offset=3, end_offset=start + 4)) == \
        list(range(start, start + 4))
    assert _offsets(read_arrow(logdir, start_offset=150)) == list(range(150, 200))
    assert _offsets(read_arrow(logdir, start_offset=3, end_offset=5, include_deleted=True)) == [3, 4]
    assert _offsets(read_arrow(logdir, start_offset=3, end_offset=5)) == []

    # the segments wholly below the start are not even planned
    splits = plan_splits(logdir, topics=["t"], partitions=[0])
    assert [s.base_offset for s in splits] == bases[2:]
    assert splits[0].log_start_offset == start and splits[0].start > 0
    assert all(s.log_start_offset is None for s in splits[1:])
    assert len(plan_splits(logdir, topics=["t"], partitions=[0],
                           options=kproto.storage.ReadOptions(include_deleted=True))) == len(bases)
    # read_committed too (no transactions here: the same records)
    assert _offsets(read_arrow(logdir, isolation="read_committed")) == list(range(start, 200))


def test_start_at_the_log_end_leaves_nothing(logdir):
    _set_starts(logdir, [("t", 0, 200)])
    assert _offsets(read_arrow(logdir)) == []
    assert len(read_arrow(logdir, include_deleted=True)) == 220


@pytest.mark.parametrize("content", [None, b"", b"0\n", b"0\n0\n"])
def test_no_entry_changes_nothing(logdir, content):
    path = os.path.join(logdir, "log-start-offset-checkpoint")
    if content is None:
        os.unlink(path)
    else:
        with open(path, "wb") as f:
            f.write(content)
    assert read_log_start_offsets(logdir) == {}
    assert _offsets(read_arrow(logdir)) == list(range(200))
    rc, out = run_cli(["logdir", logdir, "--format", "json"])
    assert rc == 0
    assert [p["log_start_offset"] for p in json.loads(out)["partitions"]] == [0, 0]


def test_a_malformed_checkpoint_is_reported_and_ignored(logdir):
    with open(os.path.join(logdir, "log-start-offset-checkpoint"), "wb") as f:
        f.write(b"0\n2\nt 0 50\n")
    found = kproto.Problems()
    assert _offsets(read_arrow(logdir, problems=found)) == list(range(200))
    assert [p.kind for p in found] == ["file"]
    assert "log-start-offset-checkpoint" in found[0].source


def test_logdir_shows_the_log_start_offset(logdir):
    _set_starts(logdir, [("t", 0, 42)])
    rc, out = run_cli(["logdir", logdir, "--format", "json"])
    assert rc == 0, out
    parts = {p["partition"]: p for p in json.loads(out)["partitions"]}
    assert parts[0]["offsets"] == [0, 200] and parts[0]["log_start_offset"] == 42
    assert parts[1]["offsets"] == [0, 20] and parts[1]["log_start_offset"] == 0
    rc, text = run_cli(["logdir", logdir])
    assert rc == 0
    assert "t-0  topic_id=" in text and "offsets [0, 200)  log start 42" in text
    assert "offsets [0, 20)  log start 0" in text
    # a partition folder alone: its entry comes from the log dir around it
    rc, out = run_cli(["logdir", os.path.join(logdir, "t-0"), "--format", "json"])
    assert json.loads(out)["partitions"][0]["log_start_offset"] == 42


def test_spark_option_include_deleted():
    assert parse_options({"path": "x"}).read.include_deleted is False
    assert parse_options({"path": "x", "includeDeleted": "true"}).read.include_deleted is True
    with pytest.raises(ValueError, match="includedeleted"):
        parse_options({"path": "x", "includeDeleted": "maybe"})
