"""The sample log dir (the project's example data) is deterministic and reads back as written."""
from __future__ import annotations

import filecmp
import os

from kproto.storage.internal import read_internal
from kproto.storage.reader import read_arrow
from kproto.storage.sample import write_benchmark_log_dir, write_sample_log_dir
from kproto.storage.summary import summarize


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _s, fs in os.walk(root) for f in fs)


def test_sample_is_deterministic(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_sample_log_dir(a, records=300)
    write_sample_log_dir(b, records=300)
    assert _tree(a) == _tree(b)
    _match, mismatch, errors = filecmp.cmpfiles(a, b, _tree(a), shallow=False)
    assert mismatch == [] and errors == []


def test_sample_reads_back(tmp_path):
    root = str(tmp_path / "s")
    write_sample_log_dir(root, records=400, compression="lz4")
    doc = summarize(root)
    assert all(not p["damage"] for p in doc["partitions"])
    ends = {(p["topic"], p["partition"]): p["offsets"][1] for p in doc["partitions"]}
    everything = read_arrow(root, include_control=True)
    assert everything.num_rows == sum(ends.values())
    orders = read_arrow(root, topics=["orders"])
    assert orders.num_rows == 3 * 400
    assert set(orders.column("compression").to_pylist()) == {"lz4"}
    assert any(orders.column("headers").to_pylist())
    pay = next(p for p in doc["partitions"] if p["topic"] == "payments")
    assert pay["aborted_transactions"] > 0 and pay["first_unstable_offset"] is not None
    committed = read_arrow(root, topics=["payments"], isolation="read_committed")
    assert max(committed.column("offset").to_pylist()) < pay["first_unstable_offset"]
    uncommitted = read_arrow(root, topics=["payments"])
    assert committed.num_rows < uncommitted.num_rows
    commits = read_internal(root)["OffsetCommit"]
    assert commits.num_rows == 12 and commits.column("value").to_pylist()[-1] is None


def test_benchmark_layout(tmp_path):
    root = str(tmp_path / "b")
    write_benchmark_log_dir(root, 5003, partitions=2, batch_records=100, compression="zstd")
    t = read_arrow(root)
    assert t.num_rows == 5003
    assert sorted(set(t.column("partition").to_pylist())) == [0, 1]
