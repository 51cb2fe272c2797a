"""``kproto spark-read`` summarises what the source reads, per partition."""
from __future__ import annotations

import os

from kproto.cli.main import main

from spark_expected import LOGDIRS, expected_rows, partition_dirs


def test_summary_per_partition(spark, capsys):
    path = os.path.join(LOGDIRS, "broker1-clean")
    assert main(["spark-read", path, "--isolation", "read_committed",
                 "--topics", "orders,payments"]) == 0
    lines = [ln.split("|") for ln in capsys.readouterr().out.splitlines() if ln.startswith("|")]
    got = {(c[1].strip(), int(c[2])): (int(c[3]), int(c[4]), int(c[5])) for c in lines[1:]}
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
    assert main(["spark-read", path, "--show", "3", "--where", "offset >= 5"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split("|") for ln in out.splitlines() if ln.startswith("|")][1:]
    assert [int(r[3]) for r in rows] == [5, 6, 7]
    assert main(["spark-read", os.path.join(LOGDIRS, "no-such-dir")]) == 2
