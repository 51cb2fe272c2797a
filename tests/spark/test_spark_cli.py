"""``kproto spark-read`` summarises what the source reads, per partition."""
from __future__ import annotations

import json
import os

from kproto.cli.main import main

from spark_expected import LOGDIRS, expected_rows, partition_dirs


def test_summary_per_partition(spark, capsys):
    path = os.path.join(LOGDIRS, "broker1-clean")
    assert main(["spark-read", path, "--isolation", "read_committed",
                 "--topics", "orders,payments", "--format", "jsonl"]) == 0
    docs = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    got = {(d["topic"], d["partition"]): (d["records"], d["first_offset"], d["last_offset"])
           for d in docs}
    want = {}
    for part in partition_dirs():
        topic, n = os.path.basename(part).rsplit("-", 1)
        if part.startswith("broker1-clean/") and topic in ("orders", "payments"):
            offsets = [r["offset"] for r in expected_rows(part, "read_committed", False)]
            want[(topic, int(n))] = (len(offsets), min(offsets), max(offsets))
    assert got == want
    assert spark.sparkContext._jsc is not None  # the shared session was left running


def test_show_and_missing_path(spark, capsys):
    path = os.path.join(LOGDIRS, "broker1-clean", "clicks-0")
    assert main(["spark-read", path, "--show", "3", "--where", "offset >= 5",
                 "--format", "jsonl"]) == 0
    rows = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [r["offset"] for r in rows] == [5, 6, 7]
    assert main(["spark-read", path, "--show", "3", "--where", "offset >= 5",
                 "--format", "text"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["topic", "partition", "offset", "timestamp", "key", "value",
                                "is_control"] and len(table) == 4
    assert main(["spark-read", os.path.join(LOGDIRS, "no-such-dir")]) == 2
