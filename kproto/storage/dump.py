"""JSON dumps of the non-``.log`` files of a log directory, in the schemas of the fixtures'
``expected/`` files (so ``kproto dump-log --format jsonl`` output compares line by line).

:func:`dump_bytes` is the sans-I/O core (kind + bytes -> list of JSON objects); :func:`dump_file`
reads a file and picks the kind from its name.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Iterator

from kproto.errors import DecodeError
from kproto.storage.checkpoints import (CleanShutdown, LeaderEpochCheckpoint, MetaProperties,
                                        OffsetCheckpoint, PartitionMetadata)
from kproto.storage.indexes import (OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, OffsetIndex, TimeIndex,
                                    parse_txn_index)
from kproto.storage.layout import file_kind
from kproto.storage.snapshot import parse_snapshot

Doc = dict[str, Any]


def dump_offset_index(data: bytes | memoryview, base_offset: int) -> list[Doc]:
    """``index_file`` line, then one ``entry`` line per valid slot."""
    idx = OffsetIndex.parse(data, base_offset)
    head = {"type": "index_file", "base_offset": base_offset, "file_size": idx.file_size,
            "entry_size": OFFSET_ENTRY_SIZE, "slots": idx.slots, "entries": len(idx),
            "preallocated": idx.preallocated}
    return [head] + [{"type": "entry", "slot": i, "relative_offset": int(r),
                      "offset": int(r) + base_offset, "position": int(p)}
                     for i, (r, p) in enumerate(zip(idx.relative_offsets, idx.positions))]


def dump_time_index(data: bytes | memoryview, base_offset: int) -> list[Doc]:
    """``timeindex_file`` line, then one ``entry`` line per valid slot."""
    idx = TimeIndex.parse(data, base_offset)
    head = {"type": "timeindex_file", "base_offset": base_offset, "file_size": idx.file_size,
            "entry_size": TIME_ENTRY_SIZE, "slots": idx.slots, "entries": len(idx),
            "preallocated": idx.preallocated}
    return [head] + [{"type": "entry", "slot": i, "timestamp": int(t), "relative_offset": int(r),
                      "offset": int(r) + base_offset}
                     for i, (t, r) in enumerate(zip(idx.timestamps, idx.relative_offsets))]


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


def dump_file(path: str) -> list[Doc]:
    """Read ``path`` and dump it according to its name."""
    kind, offset = file_kind(path)
    if kind not in _DUMPERS:
        raise DecodeError(f"{os.path.basename(path)}: not a storage file this dumper knows")
    with open(path, "rb") as f:
        data = f.read()
    try:
        return dump_bytes(kind, data, offset)
    except DecodeError as exc:
        if exc.what is None or not exc.what.startswith(path):
            exc.what = f"{path}: {exc.what}" if exc.what else path
            exc.args = (exc._render(),)
        raise


# -- kproto dump-log integration --------------------------------------------------------------

def dump_internal_log(path: str, topic: str | None = None) -> Iterator[Doc]:
    """``.log.decoded.jsonl`` lines for a segment of an internal topic (``topic`` defaults to
    the one named by the partition folder)."""
    from kproto.records.batch import RecordBatch
    from kproto.storage.internal import decode_internal_record
    from kproto.storage.layout import parse_partition_dir_name
    from kproto.storage.partition import scan_batches

    if topic is None:
        parsed = parse_partition_dir_name(os.path.basename(os.path.dirname(os.path.abspath(path))))
        topic = parsed[0] if parsed else ""
    with open(path, "rb") as f:
        data = f.read()
    for batch in scan_batches(data, file=path):
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


def _dir_files(path: str) -> Iterator[tuple[str, str | None]]:
    """Files of a log dir or partition folder in a stable order; moved folders as a note."""
    from kproto.storage.layout import is_partition_dir, scan_log_dir, scan_partition_dir

    def part_files(pd):
        for s in pd.segments:
            yield from (f for f in (s.log, s.index, s.timeindex, s.txnindex) if f)
        yield from (p for _, p in pd.snapshots)
        yield from (f for f in (pd.leader_epoch_checkpoint, pd.partition_metadata) if f)

    if is_partition_dir(path):
        for f in part_files(scan_partition_dir(path)):
            yield f, None
        return
    layout = scan_log_dir(path)
    for f in [layout.meta_properties, layout.clean_shutdown, *sorted(layout.checkpoints.values())]:
        if f:
            yield f, None
    for pd in layout.partitions:
        for f in part_files(pd):
            yield f, None
    for pd in layout.moved:
        yield pd.path, pd.state


def dump_path(path: str, args: Any, log_dumper: Callable[[str, Any], Iterator[Doc]]
              ) -> Iterator[Doc]:
    """What ``kproto dump-log`` prints for ``path``: a log dir or partition folder (each file
    preceded by a ``{"type": "file"}`` line), a storage file by its name, or a ``.log``
    (``--decode-internal``: internal topics decoded) through ``log_dumper``."""
    if os.path.isdir(path):
        for f, moved in _dir_files(path):
            if moved:
                yield {"type": "skipped", "path": f, "state": moved}
                continue
            yield {"type": "file", "path": f}
            yield from dump_path(f, args, log_dumper)
        return
    kind, _offset = file_kind(path)
    if kind in _DUMPERS:
        yield from dump_file(path)
    elif kind == "log" and getattr(args, "decode_internal", False):
        yield from dump_internal_log(path)
    else:
        yield from log_dumper(path, args)


def register_dump_log(dumpers: dict, default: Callable[[str, Any], Iterator[Doc]]
                      ) -> Callable[[str, Any], Iterator[Doc]]:
    """Register the storage file kinds in ``kproto dump-log``'s suffix table; returns the
    dumper to use for paths no suffix identifies (folders, checkpoint files), which falls
    back to ``default``."""
    log = dumpers.get(".log", default)

    def dumper(path: str, args: Any) -> Iterator[Doc]:
        return dump_path(path, args, log)

    for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot", ".metadata",
                   ".properties", ""):
        dumpers[suffix] = dumper
    return dumper
