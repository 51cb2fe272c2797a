"""The fixtures' expected records, through the storage tests' loaders (one copy of them):
``tests/storage`` is put on ``sys.path`` so this works with ``pytest tests/spark`` alone."""
from __future__ import annotations

import os
import sys

import pyarrow as pa
import pyarrow.compute as pc

_STORAGE_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                              "storage")
if _STORAGE_TESTS not in sys.path:
    sys.path.append(_STORAGE_TESTS)

from storage_fixtures import (COLUMNS, LOGDIRS, committed_rows as committed,  # noqa: E402,F401
                              expected_records, partition_dirs, want_row as want_row)


def expected_rows(part: str, isolation: str, include_control: bool) -> list[dict]:
    """What a read of partition folder ``part`` (``broker/topic-N``) must return."""
    topic, partition = os.path.basename(part).rsplit("-", 1)
    rows = [want_row(r, topic, int(partition)) for r in expected_records(part)]
    if isolation == "read_committed":
        return committed(rows, part, include_control)
    return rows if include_control else [r for r in rows if not r["is_control"]]


def spark_rows(table: pa.Table) -> list[dict]:
    """Rows of a Spark-collected Arrow table, timestamps as ms like the expected files."""
    ts = table.column("timestamp").cast(pa.int64())  # Spark's µs
    ms = pc.divide(ts, 1000)
    assert pc.sum(pc.not_equal(pc.multiply(ms, 1000), ts)).as_py() in (0, None)  # whole ms
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", ms)
    return table.to_pylist()


def by_partition(rows: list[dict]) -> dict[tuple[str, int], list[dict]]:
    out: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        out.setdefault((r["topic"], r["partition"]), []).append(r)
    return out


__all__ = ["COLUMNS", "LOGDIRS", "by_partition", "committed", "expected_records", "expected_rows",
           "partition_dirs", "spark_rows", "want_row"]
