"""The numbers behind the log-dir charts against what ``kproto dump-log --batches-only`` and
``kproto logdir --format json`` print for the same log dirs, recomputed here without
kproto.report."""
from __future__ import annotations

import io
import json
import os
from collections import defaultdict
from contextlib import redirect_stdout

import pytest

from report_support import EXAMPLE_LOGDIR, LOGDIRS, Buckets, dump_log_batches

from kproto.cli.main import main as cli_main
from kproto.report import read_logdir

DIRS = [os.path.join(LOGDIRS, "broker1-clean"), os.path.join(LOGDIRS, "broker1-crashed"),
        EXAMPLE_LOGDIR]


def _logdir_json(path: str) -> dict:
    buf = io.StringIO()
    with redirect_stdout(buf):
        cli_main(["logdir", path, "--format", "json"])
    return json.loads(buf.getvalue())


@pytest.mark.parametrize("path", DIRS, ids=os.path.basename)
def test_logdir_charts_match_dump_log(path):
    data = read_logdir(path).data()
    batches = dump_log_batches(path)
    assert batches
    by_part: dict[str, list[dict]] = defaultdict(list)
    for part, b in batches:
        by_part[part].append(b)

    # records and bytes per partition over time (the batch's max timestamp)
    timed = [(p, b) for p, b in batches if b["max_timestamp"] is not None and b["max_timestamp"] >= 0]
    assert {p: sum(r["count"]) for p, r in data["records"].items()} == {
        p: sum(b["count"] for q, b in timed if q == p) for p in {q for q, _ in timed}}
    assert {p: sum(r["count"]) for p, r in data["bytes"].items()} == {
        p: sum(b["size_in_bytes"] for q, b in timed if q == p) for p in {q for q, _ in timed}}
    grid = Buckets(data["start"], data["bucket_ms"], slack=0)  # integer milliseconds: exact
    for p, b in timed:
        grid.add(b["max_timestamp"], (p, b))
    for p, r in data["records"].items():
        for i, (n, size) in enumerate(zip(r["count"], data["bytes"][p]["count"])):
            mine = [b for q, b in grid.get(i) if q == p]
            assert n == sum(b["count"] for b in mine)
            assert size == sum(b["size_in_bytes"] for b in mine)

    # leader epochs: runs of consecutive batches of one epoch, over their offsets
    for p, e in data["leader_epochs"].items():
        runs: list[list[int]] = []
        for b in by_part.get(p, []):
            epoch = b["partition_leader_epoch"] if b["magic"] == 2 else -1
            if runs and runs[-1][2] == epoch:
                runs[-1][1] = b["last_offset"] + 1
            else:
                runs.append([b["base_offset"], b["last_offset"] + 1, epoch])
        assert e["batches"] == runs, p

    # segment sizes and the summary table, against kproto logdir --format json
    doc = _logdir_json(path)
    want_segments = [(f"{p['topic']}-{p['partition']}", s["base_offset"], s["size"])
                     for p in doc["partitions"] for s in p["segments"]]
    assert [(s["partition"], s["base_offset"], s["size"]) for s in data["segments"]] == want_segments
    parts = {f"{p['topic']}-{p['partition']}": p for p in doc["partitions"]}
    assert [r["partition"] for r in data["summary"]] == list(parts)
    for row in data["summary"]:
        part = parts[row["partition"]]
        assert row["size"] == sum(os.path.getsize(os.path.join(part["path"], s["segment"]))
                                  for s in part["segments"])  # the files on disk
        assert row["records"] == sum(b["count"] for b in by_part.get(row["partition"], []))
        assert row["segments"] == len(part["segments"])
