"""The JSON-lines view of a log of batches, as Kafka's dump tool sees it (deep iteration).

:func:`dump_lines` yields one dict per line: ``batch``, ``record`` (one per record of that
batch), ``error`` (a batch whose records cannot be read) and a final ``summary``; the field
names and values are those of ``vectors/records/README.md``. Pure: no I/O.
"""
from __future__ import annotations

import base64
import mmap
from typing import Iterator

from kproto.records.compression import DEFAULT_MAX_SIZE
from kproto.errors import DecodeError, KprotoError
from kproto.records.batch import Record, RecordBatch
from kproto.records.control import decode_control
from kproto.records.legacy import LegacyRecord
from kproto.records.reader import Batch, BatchReader
from kproto.problems import Problems

__all__ = ["dump_lines", "batch_line", "record_line"]


def _b64(v: bytes | None) -> str | None:
    return None if v is None else base64.b64encode(v).decode("ascii")


def batch_line(batch: Batch, index: int, is_valid: bool | None = None) -> dict:
    """The ``batch`` line of one batch (for a legacy wrapper this decompresses it to find its
    first offset and message count)."""
    valid = batch.is_valid() if is_valid is None else is_valid
    if isinstance(batch, RecordBatch):
        return {
            "type": "batch", "index": index, "position": batch.position,
            "base_offset": batch.base_offset, "last_offset": batch.last_offset,
            "count": batch.count, "magic": 2, "crc": batch.crc, "is_valid": valid,
            "attributes": batch.attributes, "compression": batch.compression_name,
            "timestamp_type": batch.timestamp_type_name,
            "is_transactional": batch.is_transactional, "is_control": batch.is_control,
            "has_delete_horizon": batch.has_delete_horizon,
            "delete_horizon_ms": batch.delete_horizon_ms,
            "partition_leader_epoch": batch.partition_leader_epoch,
            "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
            "base_sequence": batch.base_sequence, "last_sequence": batch.last_sequence,
            "first_timestamp": batch.first_timestamp, "max_timestamp": batch.max_timestamp,
            "size_in_bytes": batch.size_in_bytes, "next_offset": batch.next_offset,
        }
    try:
        inner = batch.record_list()
        base, count = inner[0].offset, len(inner)
    except DecodeError:
        base, count = batch.offset, 0
    return {
        "type": "batch", "index": index, "position": batch.position, "base_offset": base,
        "last_offset": batch.offset, "count": count, "magic": batch.magic, "crc": batch.crc,
        "is_valid": valid, "attributes": batch.attributes,
        "compression": batch.compression_name, "timestamp_type": batch.timestamp_type_name,
        "is_transactional": False, "is_control": False, "has_delete_horizon": False,
        "delete_horizon_ms": None, "partition_leader_epoch": -1, "producer_id": -1,
        "producer_epoch": -1, "base_sequence": -1, "last_sequence": -1, "first_timestamp": None,
        "max_timestamp": batch.timestamp, "size_in_bytes": batch.size_in_bytes,
        "next_offset": batch.offset + 1,
    }


def record_line(rec: Record | LegacyRecord, batch_index: int, control: bool = False) -> dict:
    """The ``record`` line of one record."""
    line = {
        "type": "record", "batch_index": batch_index, "offset": rec.offset,
        "timestamp": rec.timestamp, "sequence": rec.sequence,
        "key_size": -1 if rec.key is None else len(rec.key),
        "value_size": -1 if rec.value is None else len(rec.value),
        "key": _b64(rec.key), "value": _b64(rec.value),
        "headers": [{"key": h[0], "value": _b64(h[1])} for h in rec.headers],
        "size_in_bytes": rec.size_in_bytes,
    }
    if isinstance(rec, LegacyRecord):
        line["checksum"] = rec.checksum
        line["is_valid"] = rec.crc_valid
    if control:
        c = decode_control(rec.key, rec.value)
        info = {"type": c.type, "type_id": c.type_id, "key_version": c.key_version,
                "value_version": c.value_version}
        if c.coordinator_epoch is not None:
            info["coordinator_epoch"] = c.coordinator_epoch
        info.update(c.fields)
        line["control"] = info
    return line


def dump_lines(buf: bytes | bytearray | memoryview | mmap.mmap, *, deep: bool = True,
               max_decompressed: int = DEFAULT_MAX_SIZE) -> Iterator[dict]:
    """Yield the JSON-lines dicts for every batch (and, if ``deep``, record) of ``buf``."""
    problems = Problems()
    reader = BatchReader(buf, max_decompressed=max_decompressed, problems=problems)
    batches = records = 0
    for batch in reader:
        index = batches
        batches += 1
        line = batch_line(batch, index)
        yield line
        if not deep:
            records += line["count"]
            continue
        try:
            recs = batch.record_list()
        except (KprotoError, ValueError) as e:
            yield {"type": "error", "batch_index": index, "error": str(e)}
            continue
        control = isinstance(batch, RecordBatch) and batch.is_control
        for r in recs:
            try:
                line = record_line(r, index, control)
            except (KprotoError, ValueError) as e:
                yield {"type": "error", "batch_index": index, "error": str(e)}
                break
            records += 1
            yield line
    for p in problems:
        yield {"type": "error", "batch_index": p.index, "position": p.position,
               "error": p.reason}
    yield {"type": "summary", "batches": batches, "records": records,
           "valid_bytes": reader.valid_bytes, "file_size": len(reader.buffer),
           "trailing_bytes": reader.trailing_bytes, "stopped_by": reader.stopped_by}
