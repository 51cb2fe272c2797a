"""The ``--records`` view of a ``records`` field: its batches and records as JSON objects.

Built on :func:`kproto.records.dump.dump_lines` (the objects of Kafka's dump tool, as in the
record vectors' README), grouped as ``{"batches": [...], "records": [...]}``.
"""
from __future__ import annotations

from typing import Iterator, Union

from kproto.records.batch import Record, RecordBatch
from kproto.records.dump import dump_lines
from kproto.records.legacy import LegacyRecord
from kproto.records.reader import Batch, iter_batches

__all__ = ["DEFAULT_RECORDS_CAP", "records_json", "iter_records"]

DEFAULT_RECORDS_CAP = 64 << 20


def records_json(data: Union[bytes, memoryview, None], cap: int = DEFAULT_RECORDS_CAP) -> dict:
    """``{"batches", "records"}`` of a records field (plus ``errors``/``notes`` when relevant).

    ``cap`` bounds the bytes looked at: a larger field shows its batch headers only, and no
    batch may decompress to more than ``cap`` bytes.
    """
    out: dict = {"batches": [], "records": []}
    if data is None:
        return out
    deep = len(data) <= cap
    if not deep:
        out["notes"] = [f"records field of {len(data)} bytes exceeds the {cap}-byte cap: "
                        "batch headers only"]
    for line in dump_lines(data, deep=deep, max_decompressed=cap):
        kind = line.pop("type")
        if kind == "batch":
            out["batches"].append(line)
        elif kind == "record":
            out["records"].append(line)
        elif kind == "error":
            out.setdefault("errors", []).append(line)
        elif kind == "summary" and line["trailing_bytes"]:
            # A fetch response may end with a partial batch (max_bytes cut it): not an error.
            out.setdefault("notes", []).append(f"{line['trailing_bytes']} trailing bytes of a "
                                               "partial batch")
    return out


def iter_records(data: Union[bytes, memoryview, None]
                 ) -> Iterator[tuple[Batch, Union[Record, LegacyRecord]]]:
    """(batch, record) for every record of a records field, skipping control batches."""
    if data is None:
        return
    for batch in iter_batches(data):
        if isinstance(batch, RecordBatch) and batch.is_control:
            continue
        for rec in batch.records():
            yield batch, rec
