"""``kproto dump-log PATH...``: every batch and record of files of concatenated batches, and
every other file of a broker log directory (indexes, snapshots, checkpoints, metadata).

``--format jsonl`` writes the line schema of the record vectors' README (batch, record, error,
summary lines); the default on a terminal is a text format like ``kafka-dump-log
--deep-iteration --print-data-log``. ``--format kafka`` prints what Kafka's own tool
(``kafka-dump-log.sh --deep-iteration --print-data-log --files ...``) prints for segments,
KRaft snapshots, indexes, transaction indexes and producer snapshots, so that the two
outputs can be diffed. A log dir or partition folder is dumped file by file,
each preceded by a ``file`` line; what is not read gets an ``ignored`` line. A file that cannot
be read is an ``error`` line (exit status 1) and the dump goes on. ``--index-sanity-check``
runs, on ``.index`` and ``.timeindex`` files, only the check a Kafka broker runs at start to
decide whether to rebuild an index (an ``index_sanity`` line each).
"""
from __future__ import annotations

import argparse
import base64
import codecs
import json
import mmap
import os
import sys
from typing import Iterator, TextIO

from kproto.cli.progress import progress_bar
from kproto.records.compression import DEFAULT_MAX_SIZE
from kproto.errors import DecodeError
from kproto.records.dump import dump_lines
from kproto.storage.dump import DUMP_KINDS, dump_file, dump_internal_log, metadata_log_topic
from kproto.storage.layout import check_size, file_kind, log_dir_files

__all__ = ["register", "dump_path", "dump_log_file", "format_text", "kafka_lines", "index_sanity",
           "CorruptIndexError"]


def _map(path: str) -> bytes | mmap.mmap:
    check_size(path, "log")  # a file of batches is at most what Kafka's FileRecords opens
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return b""
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def dump_log_file(path: str, args: argparse.Namespace) -> Iterator[dict]:
    """Lines for a file of concatenated batches (``.log`` segments, raw record sets)."""
    buf = _map(path)
    try:
        for line in dump_lines(buf, deep=not args.batches_only,
                               max_decompressed=args.max_decompressed):
            if args.verify and line["type"] == "batch" and not line["is_valid"]:
                yield line
                yield {"type": "error", "batch_index": line["index"],
                       "position": line["position"],
                       "error": f"CRC mismatch (stored {line['crc']})"}
                continue
            yield line
    finally:
        if isinstance(buf, mmap.mmap):
            try:
                buf.close()
            except BufferError:  # a view is still alive somewhere; the GC will unmap it
                pass


def dump_path(path: str, args: argparse.Namespace) -> Iterator[dict]:
    """The lines for ``path``: a log dir or partition folder file by file, a storage file by
    its name, anything else as concatenated batches (``--decode-internal``: the records of
    internal topics and KRaft snapshots through their schemas, the others as usual)."""
    if os.path.isdir(path):
        for f, why in log_dir_files(path):
            if why:
                yield {"type": "ignored", "path": f, "why": why}
                continue
            yield {"type": "file", "path": f}
            try:
                for line in dump_path(f, args):
                    if line.get("type") == "error" and "path" not in line:
                        line = {**line, "path": f}
                    yield line
            except (DecodeError, OSError) as exc:
                yield _error_line(f, exc)
        return
    kind, _offset = file_kind(path)
    if getattr(args, "index_sanity_check", False) and kind in ("index", "timeindex"):
        entries, problem = index_sanity(path, kind, _offset or 0)
        yield {"type": "index_sanity", "kind": kind, "entries": entries, "passed": problem is None,
               "problem": problem}
    elif kind in DUMP_KINDS:
        yield from dump_file(path)
    elif kind == "lock":
        return
    elif getattr(args, "decode_internal", False) and metadata_log_topic(path):
        yield from dump_internal_log(path)
    else:
        yield from dump_log_file(path, args)


def index_sanity(path: str, kind: str, base_offset: int) -> tuple[int, str | None]:
    """The slots Kafka counts as entries of the ``index``/``timeindex`` file at ``path``, and
    its verdict on them (:func:`kproto.storage.indexes.kafka_sanity_check`: None when they
    pass)."""
    from kproto.storage.indexes import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE, kafka_sanity_check

    size = OFFSET_ENTRY_SIZE if kind == "index" else TIME_ENTRY_SIZE
    with open(path, "rb") as f:
        n = os.fstat(f.fileno()).st_size
        first = f.read(size) if n >= size else b""
        f.seek(max(0, n - n % size - size))
        last = f.read(size) if n >= size else b""
    return n // size, kafka_sanity_check(first, last, n, base_offset, kind, os.path.abspath(path))


class CorruptIndexError(DecodeError):
    """An index that fails Kafka's sanity check (Kafka's CorruptIndexException; the message is
    Kafka's): :func:`kafka_lines` raises it with ``--index-sanity-check``."""


def _error_line(path: str, exc: Exception) -> dict:
    if isinstance(exc, OSError):
        return {"type": "error", "path": path, "error": exc.strerror or str(exc)}
    return {"type": "error", "path": path, "error": str(exc)}


# Control characters escaped so that every record stays on one line.
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(32), 127]}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def _text(v: str | None) -> str:
    """A base64 key/value as Kafka's tool prints it (UTF-8, lenient), controls escaped."""
    if v is None:
        return "null"
    return base64.b64decode(v).decode("utf-8", "replace").translate(_ESCAPES)


def format_text(line: dict, timestamp_type: str = "timestamp") -> str:
    """One line in the style of Kafka's DumpLogSegments (``timestamp_type``: the batch's, which
    labels its records' timestamps)."""
    t = line.get("type")
    if t == "batch":
        dh = line["delete_horizon_ms"]
        return (f"baseOffset: {line['base_offset']} lastOffset: {line['last_offset']} "
                f"count: {line['count']} baseSequence: {line['base_sequence']} "
                f"lastSequence: {line['last_sequence']} producerId: {line['producer_id']} "
                f"producerEpoch: {line['producer_epoch']} "
                f"partitionLeaderEpoch: {line['partition_leader_epoch']} "
                f"isTransactional: {str(line['is_transactional']).lower()} "
                f"isControl: {str(line['is_control']).lower()} "
                f"deleteHorizonMs: {'OptionalLong.empty' if dh is None else dh} "
                f"position: {line['position']} {line['timestamp_type']}: "
                f"{line['max_timestamp']} size: {line['size_in_bytes']} magic: {line['magic']} "
                f"compresscodec: {line['compression']} crc: {line['crc']} "
                f"isvalid: {str(line['is_valid']).lower()}")
    if t == "record":
        s = (f"| offset: {line['offset']} {timestamp_type}: {line['timestamp']} "
             f"keySize: {line['key_size']} valueSize: {line['value_size']} "
             f"sequence: {line['sequence']} "
             f"headerKeys: [{', '.join(h['key'] for h in line['headers'])}]")
        if "control" in line:
            c = line["control"]
            extra = " ".join(f"{k}: {v}" for k, v in c.items() if k != "type")
            return f"{s} {c['type']}: {extra}"
        return f"{s} key: {_text(line['key'])} payload: {_text(line['value'])}"
    if t == "error":
        where = f" at position {line['position']}" if "position" in line else ""
        if "batch_index" in line:
            return f"ERROR in batch {line['batch_index']}{where}: {line['error']}"
        if "offset" in line:
            where += f" at offset {line['offset']}"
        return f"ERROR{' in ' + line['path'] if 'path' in line else ''}{where}: {line['error']}"
    if t == "file":
        return f"Dumping {line['path']}"
    if t == "ignored":
        return f"Ignored {line['path']}: {line['why']}"
    if t == "index_sanity":
        return ("passed sanity check" if line["passed"] else
                f"FAILED sanity check: {line['problem']}") + f" ({line['entries']} slots)"
    if t == "summary":
        s = (f"Summary: {line['batches']} batches, {line['records']} records, "
             f"{line['valid_bytes']} valid bytes of {line['file_size']}")
        if line["trailing_bytes"]:
            s += f", {line['trailing_bytes']} trailing bytes (partial batch)"
        if line["stopped_by"]:
            s += f", stopped by: {line['stopped_by']}"
        return s
    return json.dumps(line)


# -- --format kafka: the text of Kafka's DumpLogSegments ---------------------------------------
#: KRaft control records: Kafka's label and the message their value holds
_KRAFT_CONTROL = {"LEADER_CHANGE": ("LeaderChange:", "LeaderChangeMessage"),
                  "SNAPSHOT_HEADER": ("SnapshotHeader", "SnapshotHeaderRecord"),
                  "SNAPSHOT_FOOTER": ("SnapshotFooter", "SnapshotFooterRecord"),
                  "KRAFT_VERSION": ("KRaftVersion", "KRaftVersionRecord"),
                  "KRAFT_VOTERS": ("KRaftVoters", "VotersRecord")}


def _java_replace(exc: UnicodeError) -> tuple[str, int]:
    """Java's replacement of malformed UTF-8, where it differs from Python's: an encoded
    surrogate (``ED A0..BF``, with its third byte if that is a continuation byte) is one
    U+FFFD, not one per byte."""
    assert isinstance(exc, UnicodeDecodeError)
    data, i = exc.object, exc.start
    if data[i] == 0xED and i + 1 < len(data) and 0xA0 <= data[i + 1] <= 0xBF:
        return "\ufffd", i + 3 if i + 2 < len(data) and data[i + 2] & 0xC0 == 0x80 else i + 2
    return "\ufffd", exc.end


codecs.register_error("kproto-java-replace", _java_replace)


def _java_string(v: str | None) -> str:
    """A base64 key/value as Kafka's tool prints it: ``new String(bytes, UTF_8)``, unescaped."""
    return base64.b64decode(v or "").decode("utf-8", "kproto-java-replace")


def _kafka_control(c: dict, value: str | None) -> str:
    if c["type"] in ("COMMIT", "ABORT"):
        return f" endTxnMarker: {c['type']} coordinatorEpoch: {c['coordinator_epoch']}"
    if c["type"] in _KRAFT_CONTROL:
        from kproto.codecs import message

        label, name = _KRAFT_CONTROL[c["type"]]
        codec = message(name)
        version = c["value_version"]
        body = codec.to_json(codec.decode(memoryview(base64.b64decode(value or "")), version), version)
        return f" {label} {json.dumps(body, separators=(',', ':'), ensure_ascii=False)}"
    return f" controlType: {c['type']}({c['type_id']})"


def _kafka_log(path: str, kind: str, offset: int | None, args: argparse.Namespace) -> Iterator[str]:
    if kind == "metadata-snapshot":
        from kproto.storage.layout import parse_metadata_snapshot_name
        end, epoch = parse_metadata_snapshot_name(os.path.basename(path)) or (offset or 0, 0)
        yield f"Snapshot end offset: {end}, epoch: {epoch}"
    else:
        yield f"Log starting offset: {offset or 0}"
    ts_type = "CreateTime"
    for line in dump_log_file(path, args):
        t = line["type"]
        if t == "batch":
            if line["magic"] < 2:
                raise NotImplementedError("--format kafka prints batches of magic 2 only")
            ts_type = line["timestamp_type"]
            dh = line["delete_horizon_ms"]
            yield (f"baseOffset: {line['base_offset']} lastOffset: {line['last_offset']} "
                   f"count: {line['count']} baseSequence: {line['base_sequence']} "
                   f"lastSequence: {line['last_sequence']} producerId: {line['producer_id']} "
                   f"producerEpoch: {line['producer_epoch']} "
                   f"partitionLeaderEpoch: {line['partition_leader_epoch']} "
                   f"isTransactional: {str(line['is_transactional']).lower()} "
                   f"isControl: {str(line['is_control']).lower()} "
                   f"deleteHorizonMs: {'OptionalLong.empty' if dh is None else f'OptionalLong[{dh}]'} "
                   f"position: {line['position']} {ts_type}: {line['max_timestamp']} "
                   f"size: {line['size_in_bytes']} magic: {line['magic']} "
                   f"compresscodec: {line['compression']} crc: {line['crc']} "
                   f"isvalid: {str(line['is_valid']).lower()}")
        elif t == "record":
            s = (f"| offset: {line['offset']} {ts_type}: {line['timestamp']} "
                 f"keySize: {line['key_size']} valueSize: {line['value_size']} "
                 f"sequence: {line['sequence']} "
                 f"headerKeys: [{','.join(h['key'] for h in line['headers'])}]")
            if "control" in line:
                s += _kafka_control(line["control"], line["value"])
            else:
                if line["key"] is not None:
                    s += f" key: {_java_string(line['key'])}"
                if line["value"] is not None:
                    s += f" payload: {_java_string(line['value'])}"
            yield s
        elif t == "error":
            raise DecodeError(line["error"], what=path, offset=line.get("position"))


def _kafka_index(path: str, kind: str, base: int) -> Iterator[str]:
    from kproto.storage.indexes import OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE
    from kproto.storage.dump import dump_file

    if os.path.getsize(path) == 0:
        if kind == "index":   # Kafka's tool says so of an empty offset index only
            yield f"{path} is empty."
        return
    entries = [e for e in dump_file(path) if e.get("type") == "entry"]
    size = OFFSET_ENTRY_SIZE if kind == "index" else TIME_ENTRY_SIZE
    if not entries and os.path.getsize(path) >= size:
        # Kafka's tool prints the first slot whatever it holds (it stops at a later slot that
        # points at the base offset): the zeros of a preallocated index never written to
        yield (f"offset: {base} position: 0" if kind == "index" else f"timestamp: 0 offset: {base}")
    for e in entries:
        yield (f"offset: {e['offset']} position: {e['position']}" if kind == "index"
               else f"timestamp: {e['timestamp']} offset: {e['offset']}")


def _kafka_other(path: str, kind: str) -> Iterator[str]:
    from kproto.storage.dump import dump_file

    for e in dump_file(path):
        if kind == "txnindex":
            yield (f"version: {e['version']} producerId: {e['producer_id']} "
                   f"firstOffset: {e['first_offset']} lastOffset: {e['last_offset']} "
                   f"lastStableOffset: {e['last_stable_offset']}")
        elif e.get("type") == "producer":
            first = e["current_txn_first_offset"]
            yield (f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} "
                   f"coordinatorEpoch: {e['coordinator_epoch']} currentTxnFirstOffset: "
                   f"{'OptionalLong.empty' if first < 0 else f'OptionalLong[{first}]'} "
                   f"lastTimestamp: {e['timestamp']} "
                   f"firstSequence: {e['last_sequence'] - e['offset_delta']} "
                   f"lastSequence: {e['last_sequence']} lastOffset: {e['last_offset']} "
                   f"offsetDelta: {e['offset_delta']} timestamp: {e['timestamp']}")


#: the file kinds (:func:`kproto.storage.layout.file_kind`) Kafka's tool dumps
_KAFKA_DUMPED = frozenset({"log", "metadata-snapshot", "index", "timeindex", "txnindex", "snapshot"})


def kafka_lines(path: str, args: argparse.Namespace) -> Iterator[str]:
    """The lines Kafka's ``DumpLogSegments --deep-iteration --print-data-log`` prints after
    ``Dumping PATH`` for a segment, KRaft snapshot, ``.index``, ``.timeindex``, ``.txnindex``
    or producer ``.snapshot``. Other files, and batches of magic 0 and 1, raise
    NotImplementedError. With ``args.index_sanity_check``, an index's verdict as
    ``--index-sanity-check`` prints it (CorruptIndexError where it fails)."""
    kind, offset = file_kind(path)
    if kind not in _KAFKA_DUMPED:
        raise NotImplementedError(f"{path}: Kafka's tool does not dump {kind or 'this'} files")
    if kind in ("log", "metadata-snapshot"):
        yield from _kafka_log(path, kind, offset, args)
    elif kind in ("index", "timeindex") and getattr(args, "index_sanity_check", False):
        entries, problem = index_sanity(path, kind, offset or 0)
        if kind == "index" and not entries:   # Kafka's tool checks no empty offset index
            yield f"{path} is empty."
        elif problem is not None:
            raise CorruptIndexError(problem)
        else:
            yield f"{path} passed sanity check."
    elif kind in ("index", "timeindex"):
        yield from _kafka_index(path, kind, offset or 0)
    else:
        yield from _kafka_other(path, kind)


def _run_kafka(args: argparse.Namespace, out: TextIO) -> int:
    status = 0
    for path in args.files:
        files = [f for f, why in log_dir_files(path) if not why and file_kind(f)[0] in _KAFKA_DUMPED] \
            if os.path.isdir(path) else [path]
        for f in files:
            if file_kind(f)[0] not in _KAFKA_DUMPED:
                print(f"Ignoring unknown file {f}", file=sys.stderr)   # as Kafka's tool does
                continue
            try:
                lines = list(kafka_lines(f, args))
            except CorruptIndexError as e:
                # as Kafka's tool: the file's heading, the exception, and nothing after it
                out.write(f"Dumping {f}\n")
                print(f"kproto dump-log: CorruptIndexException: {e}", file=sys.stderr)
                return 1
            except (DecodeError, OSError, NotImplementedError) as e:
                print(f"kproto dump-log: {f}: {e}", file=sys.stderr)
                status = 1
                continue
            out.write(f"Dumping {f}\n")
            out.write("".join(line + "\n" for line in lines))
    return status


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    fmt = args.format
    if fmt == "kafka":
        return _run_kafka(args, out)
    if fmt == "auto":
        fmt = "text" if out.isatty() else "jsonl"
    status = 0
    ts_type = "timestamp"
    for path in args.files:
        path_is_file = os.path.isfile(path)
        # a bar over the files of a large directory, unless the dump itself is on the terminal
        bar = None if path_is_file or not os.path.isdir(path) else progress_bar(
            len(log_dir_files(path)), "dump-log", unit="file", minimum=20,
            enabled=not getattr(args, "no_progress", False) and not out.isatty())
        if fmt == "text":
            out.write(f"Dumping {path}\n")
        elif len(args.files) > 1:
            out.write(json.dumps({"type": "file", "path": path}) + "\n")
        try:
            no_batch = False
            for line in dump_path(path, args):
                if line.get("type") == "summary" and path_is_file and line["batches"] == 0 \
                        and line["file_size"] > 0:
                    no_batch = True  # not a segment, not a record set: nothing was read
                if line.get("type") == "error" or (args.verify and line.get("is_valid") is False) \
                        or line.get("passed") is False:
                    status = 1
                if line.get("type") == "batch":
                    ts_type = line["timestamp_type"]
                elif bar is not None and line.get("type") in ("file", "ignored"):
                    bar.update_to(bar.bar.n + 1)
                out.write((format_text(line, ts_type) if fmt == "text" else
                           json.dumps(line, ensure_ascii=False, separators=(",", ":"))) + "\n")
            if no_batch:
                print(f"kproto dump-log: {path}: no record batch at all: not a Kafka log "
                      "segment or record set", file=sys.stderr)
                status = 2
        except BrokenPipeError:
            raise
        except OSError as e:
            print(f"kproto dump-log: {path}: {e.strerror or e}", file=sys.stderr)
            status = 2
        except DecodeError as e:
            line = _error_line(path, e)
            out.write((format_text(line) if fmt == "text" else json.dumps(line)) + "\n")
            status = max(status, 1)
        finally:
            if bar is not None:
                bar.close()
    return status


def register(subparsers) -> None:
    p = subparsers.add_parser("dump-log", help="print the batches and records of log files",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", metavar="PATH",
                   help="log segments, other log dir files, partition folders or log dirs")
    p.add_argument("--format", choices=("auto", "text", "jsonl", "kafka"), default="auto",
                   help="output format (default: text on a terminal, jsonl otherwise; kafka: "
                        "exactly what Kafka's kafka-dump-log.sh --deep-iteration "
                        "--print-data-log prints)")
    p.add_argument("--batches-only", action="store_true", help="batch headers only, no records")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar on stderr (drawn only on a terminal, for a directory "
                        "of 20 files or more, when the dump is not on that terminal)")
    p.add_argument("--verify", action="store_true",
                   help="report CRC failures as errors (exit status 1) and continue")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="of .index and .timeindex files, only Kafka's sanity check (the one a "
                        "broker runs at start to decide whether to rebuild an index): exit status "
                        "1 when one fails; with --format kafka, as Kafka's tool, stop there")
    p.add_argument("--max-decompressed", type=int, default=DEFAULT_MAX_SIZE, metavar="BYTES",
                   help="limit on one batch's decompressed size (default %(default)s)")
    p.add_argument("--decode-internal", action="store_true",
                   help="decode the records of __consumer_offsets, __transaction_state, "
                        "__share_group_state, __cluster_metadata and KRaft snapshots through their schemas (other "
                        "topics are dumped as usual)")
    p.set_defaults(func=run)
