"""JSON dumps of the files of a log directory, in the schemas of the fixtures' ``expected/``
files (so ``kproto dump-log --format jsonl`` output compares line by line).

:func:`dump_bytes` is the sans-I/O core (kind + bytes -> list of JSON objects); :func:`dump_file`
reads a file and picks the kind from its name; :func:`dump_internal_log` decodes the records of
internal topics (files of batches themselves are dumped by :mod:`kproto.records.dump`).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator

import numpy as np

from kproto.errors import DecodeError
from kproto.storage.checkpoints import (CleanShutdown, LeaderEpochCheckpoint, MetaProperties,
                                        OffsetCheckpoint, PartitionMetadata, QuorumState)
from kproto.storage.indexes import (OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, OffsetIndex, TimeIndex,
                                    parse_txn_index, useful_index_bytes)
from kproto.storage.layout import check_size, file_kind, read_bounded
from kproto.storage.snapshot import parse_snapshot

Doc = dict[str, Any]


def dump_offset_index(data: bytes | memoryview, base_offset: int,
                      file_size: int | None = None) -> list[Doc]:
    """``index_file`` line, then one ``entry`` line per valid slot."""
    idx = OffsetIndex.parse(data, base_offset, file_size)
    head = {"type": "index_file", "base_offset": base_offset, "file_size": idx.file_size,
            "entry_size": OFFSET_ENTRY_SIZE, "slots": idx.slots, "entries": len(idx),
            "preallocated": idx.preallocated}
    return [head] + [{"type": "entry", "slot": i, "relative_offset": int(r),
                      "offset": int(r) + base_offset, "position": int(p)}
                     for i, (r, p) in enumerate(zip(idx.relative_offsets, idx.positions))] + \
        [{"type": "error", "error": f"unusable index: {p}"} for p in idx.problems()]


def dump_time_index(data: bytes | memoryview, base_offset: int,
                    file_size: int | None = None) -> list[Doc]:
    """``timeindex_file`` line, then one ``entry`` line per valid slot."""
    idx = TimeIndex.parse(data, base_offset, file_size)
    head = {"type": "timeindex_file", "base_offset": base_offset, "file_size": idx.file_size,
            "entry_size": TIME_ENTRY_SIZE, "slots": idx.slots, "entries": len(idx),
            "preallocated": idx.preallocated}
    return [head] + [{"type": "entry", "slot": i, "timestamp": int(t), "relative_offset": int(r),
                      "offset": int(r) + base_offset}
                     for i, (t, r) in enumerate(zip(idx.timestamps, idx.relative_offsets))] + \
        [{"type": "error", "error": f"unusable index: {p}"} for p in idx.problems()]


def dump_txn_index(data: bytes | memoryview, base_offset: int | None = None) -> list[Doc]:
    """One line per aborted transaction."""
    return [e.to_json() for e in parse_txn_index(data)]


def dump_snapshot(data: bytes | memoryview, offset: int) -> list[Doc]:
    """``snapshot_file`` line, then one ``producer`` line per entry."""
    snap = parse_snapshot(data)
    head = snap.header_json(offset)
    if not snap.crc_valid:
        head["crc_valid"] = False  # only shown when wrong: Kafka itself would refuse the file
    return [head] + [e.to_json() for e in snap.entries]


def _single(parse: Callable[[bytes], Any]) -> Callable[..., list[Doc]]:
    return lambda data, _offset=None: [parse(bytes(data)).to_json()]


_DUMPERS: dict[str, Callable[..., list[Doc]]] = {
    "index": dump_offset_index,
    "timeindex": dump_time_index,
    "txnindex": dump_txn_index,
    "snapshot": dump_snapshot,
    "leader-epoch-checkpoint": _single(LeaderEpochCheckpoint.parse),
    "partition.metadata": _single(PartitionMetadata.parse),
    "meta.properties": _single(MetaProperties.parse),
    "clean-shutdown": _single(CleanShutdown.parse),
    "offset-checkpoint": _single(OffsetCheckpoint.parse),
    "quorum-state": _single(QuorumState.parse),
}
#: File kinds this module dumps (everything of a log dir except ``.log``).
DUMP_KINDS = frozenset(_DUMPERS)


def dump_bytes(kind: str, data: bytes | memoryview, offset: int | None = None) -> list[Doc]:
    """JSON objects for a file of ``kind`` (see :func:`kproto.storage.layout.file_kind`);
    ``offset`` is the offset in the file name (segment base offset / snapshot offset)."""
    try:
        dumper = _DUMPERS[kind]
    except KeyError:
        raise DecodeError(f"no dumper for file kind {kind!r}") from None
    return dumper(data, offset)


def _read_for_dump(path: str, kind: str) -> tuple[bytes, int]:
    """The bytes of a file to dump, and its size; of an index, only what can hold entries:
    as far as its segment's size allows, or (no ``.log`` beside it) up to the first all-zero
    slot, so a huge preallocated or sparse file costs no more than its entries. A size no
    broker writes is an error."""
    if kind not in ("index", "timeindex"):
        data = read_bounded(path, kind)
        return data, len(data)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        entry = OFFSET_ENTRY_SIZE if kind == "index" else TIME_ENTRY_SIZE
        log = os.path.splitext(path)[0] + ".log"
        if os.path.isfile(log):
            return f.read(useful_index_bytes(size, entry, os.path.getsize(log))), size
        useful_index_bytes(size, entry, None)  # the size check
        parts, chunk = [], entry * 65536
        while True:
            part = f.read(chunk)
            parts.append(part)
            slots = np.frombuffer(part[:len(part) - len(part) % entry], np.uint8).reshape(-1, entry)
            if len(part) < chunk or not slots.any(axis=1).all():
                return b"".join(parts), size


def dump_file(path: str) -> list[Doc]:
    """Read ``path`` and dump it according to its name."""
    kind, offset = file_kind(path)
    if kind not in _DUMPERS:
        raise DecodeError(f"{os.path.basename(path)}: not a storage file this dumper knows")
    try:
        data, size = _read_for_dump(path, kind)
        if kind in ("index", "timeindex"):
            return _DUMPERS[kind](data, offset, size)
        return dump_bytes(kind, data, offset)
    except DecodeError as exc:
        if exc.what is None or not exc.what.startswith(path):
            exc.what = f"{path}: {exc.what}" if exc.what else path
            exc.args = (exc._render(),)
        raise


def metadata_log_topic(path: str) -> str | None:
    """The internal topic whose records a file of batches holds, from its place and name:
    the topic of a segment's folder if it is one of :data:`kproto.storage.internal.INTERNAL_TOPICS`
    (``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``,
    ``__cluster_metadata``), ``__cluster_metadata`` for a KRaft snapshot or
    ``bootstrap.checkpoint``; None for anything else."""
    from kproto.storage.internal import INTERNAL_TOPICS
    from kproto.storage.layout import parse_partition_dir_name

    if file_kind(path)[0] == "metadata-snapshot":
        return "__cluster_metadata"
    parsed = parse_partition_dir_name(os.path.basename(os.path.dirname(os.path.abspath(path))))
    return parsed[0] if parsed and parsed[0] in INTERNAL_TOPICS else None


def dump_internal_log(path: str, topic: str | None = None) -> Iterator[Doc]:
    """``.log.decoded.jsonl`` lines for a file of batches of an internal topic (``topic``
    defaults to :func:`metadata_log_topic`); a record that does not decode is an ``error``
    line and the dump goes on."""
    from kproto.storage.reader import mapped_file

    topic = topic or metadata_log_topic(path)
    if topic is None:
        raise ValueError(f"{path}: not a file of an internal topic")
    check_size(path, "log")  # a file of batches is at most what Kafka's FileRecords opens
    with mapped_file(path) as data:  # batches are read where they lie, never the file whole
        yield from _internal_lines(path, topic, data)


def _internal_lines(path: str, topic: str, data: memoryview) -> Iterator[Doc]:
    from kproto.problems import Problems
    from kproto.records.batch import RecordBatch
    from kproto.storage.internal import decode_internal_record
    from kproto.storage.partition import scan_batches

    damage = Problems(source=path)
    for batch in scan_batches(data, problems=damage):
        control = isinstance(batch, RecordBatch) and batch.is_control
        try:
            records = batch.record_list()
        except DecodeError as exc:
            yield {"type": "error", "position": batch.position, "error": str(exc)}
            continue
        for r in records:
            try:
                yield decode_internal_record(topic, r.offset, r.key, r.value, control)
            except DecodeError as exc:
                yield {"type": "error", "offset": r.offset, "error": str(exc)}
    for d in damage:
        if d.kind != "crc":
            yield {"type": "error", "position": d.position, "error": f"{d.kind}: {d.reason}"}
