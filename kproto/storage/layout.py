"""Where things are in a broker log directory: names of partition folders and segment files.

The name rules are pure functions; :func:`scan_log_dir` and :func:`scan_partition_dir` are the
thin I/O layer that lists folders. Partition folders being deleted, moved between log dirs or
left as strays (``<topic>-<partition>.<uuid>-delete`` / ``-future`` / ``-stray``) are reported,
never read as data; so are leftover ``.deleted``/``.cleaned``/``.swap``/``.tmp`` files.
Files that are not Kafka's (an editor's folder, ``.DS_Store``) are listed as ignored, with why.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from kproto.errors import DecodeError
from kproto.storage import fs
from kproto.storage.checkpoints import (BOOTSTRAP_CHECKPOINT, CLEAN_SHUTDOWN, LEADER_EPOCH_CHECKPOINT,
                                        LOCK_FILE, META_PROPERTIES, PARTITION_METADATA,
                                        QUORUM_STATE, ROOT_CHECKPOINTS)

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
_OFFSET_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex|\.snapshot)$")
_LEFTOVER = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex|\.snapshot)"
                       r"(\.deleted|\.cleaned|\.swap)$")
_METADATA_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_MOVED = re.compile(r"^(.+)-(\d+)\.([0-9a-fA-F]{32}|[A-Za-z0-9_-]{22})-(delete|future|stray)$")
_LEGAL_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def parse_partition_dir_name(name: str) -> tuple[str, int, str] | None:
    """``(topic, partition, state)`` for a partition folder name, state being ``live``,
    ``delete``, ``future`` or ``stray``; None when the name is not a partition folder.

    The partition number follows the last dash, so topics may contain dots, dashes and
    underscores (``my.topic-name_x-3`` -> ``("my.topic-name_x", 3, "live")``).
    """
    m = _MOVED.match(name)
    if m:
        topic, part, state = m.group(1), m.group(2), m.group(4)
    else:
        topic, sep, part = name.rpartition("-")
        state = "live"
        if not sep or not part.isascii() or not part.isdigit():
            return None
    if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
        return None
    return topic, int(part), state


def partition_dir_name(topic: str, partition: int) -> str:
    """The folder name a broker gives a partition."""
    return f"{topic}-{partition}"


def offset_file_name(offset: int, suffix: str) -> str:
    """``<20-digit offset><suffix>``, e.g. ``00000000000000001203.log``."""
    return f"{offset:020d}{suffix}"


def parse_offset_file_name(name: str) -> tuple[int, str] | None:
    """``(offset, suffix)`` for segment/snapshot file names, else None."""
    m = _OFFSET_FILE.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


def parse_metadata_snapshot_name(name: str) -> tuple[int, int] | None:
    """``(end_offset, epoch)`` for a KRaft snapshot name (``<offset>-<epoch>.checkpoint``)."""
    m = _METADATA_SNAPSHOT.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass
class SegmentFiles:
    """The files of one segment (paths; None when absent)."""

    base_offset: int
    log: str | None = None
    index: str | None = None
    timeindex: str | None = None
    txnindex: str | None = None


@dataclass
class PartitionDir:
    """A partition folder as found on disk."""

    path: str
    topic: str
    partition: int
    state: str = "live"
    segments: list[SegmentFiles] = field(default_factory=list)
    snapshots: list[tuple[int, str]] = field(default_factory=list)
    leader_epoch_checkpoint: str | None = None
    partition_metadata: str | None = None
    quorum_state: str | None = None  # KRaft's __cluster_metadata-0 only
    metadata_snapshots: list[tuple[int, int, str]] = field(default_factory=list)  # offset, epoch
    leftovers: list[str] = field(default_factory=list)  # .deleted/.cleaned/.swap/.tmp/unknown


@dataclass
class LogDirLayout:
    """A log directory (one entry of ``log.dirs``) as found on disk."""

    path: str
    meta_properties: str | None = None
    clean_shutdown: str | None = None
    checkpoints: dict[str, str] = field(default_factory=dict)
    bootstrap_checkpoint: str | None = None  # KRaft bootstrap metadata (record batches)
    lock: str | None = None  # the broker's directory lock (no content)
    partitions: list[PartitionDir] = field(default_factory=list)  # live ones, sorted
    moved: list[PartitionDir] = field(default_factory=list)  # -delete / -future / -stray
    others: list[str] = field(default_factory=list)  # not Kafka's: ignored (see ignored())

    def ignored(self) -> list[tuple[str, str]]:
        """``(path, why)`` for the entries of the log dir that are not Kafka's data (moved
        partition folders are in :attr:`moved`)."""
        out = []
        if self.lock:
            out.append((self.lock, "the broker's directory lock, no content"))
        out += [(path, why_not_read(path)) for path in self.others]
        return sorted(out)


def partition_from_listing(path: str, names: list[str], topic: str, partition: int,
                           state: str = "live") -> PartitionDir:
    """Sort a partition folder's file names into a :class:`PartitionDir` (pure)."""
    pd = PartitionDir(path, topic, partition, state)
    segments: dict[int, SegmentFiles] = {}
    for name in sorted(names):
        full = os.path.join(path, name)
        parsed = parse_offset_file_name(name)
        if parsed:
            offset, suffix = parsed
            if suffix == ".snapshot":
                pd.snapshots.append((offset, full))
            else:
                seg = segments.setdefault(offset, SegmentFiles(offset))
                setattr(seg, suffix[1:], full)
        elif name == LEADER_EPOCH_CHECKPOINT:
            pd.leader_epoch_checkpoint = full
        elif name == PARTITION_METADATA:
            pd.partition_metadata = full
        elif name == QUORUM_STATE:
            pd.quorum_state = full
        elif (snap := parse_metadata_snapshot_name(name)) is not None:
            pd.metadata_snapshots.append((snap[0], snap[1], full))
        else:
            pd.leftovers.append(full)
    pd.segments = [segments[k] for k in sorted(segments)]
    pd.snapshots.sort()
    pd.metadata_snapshots.sort()
    return pd


def scan_partition_dir(path: str) -> PartitionDir:
    """List a partition folder. Raises ValueError if its name is not ``<topic>-<partition>``."""
    path = fs.normpath(path)
    parsed = parse_partition_dir_name(os.path.basename(path))
    if parsed is None:
        raise ValueError(f"{path}: not a partition folder name (<topic>-<partition>)")
    return partition_from_listing(path, _file_names(path), *parsed)


def _file_names(path: str) -> list[str]:
    return [e.name for e in fs.listdir(path) if e.is_file]


def scan_log_dir(path: str) -> LogDirLayout:
    """List a log directory: root files, live partition folders and moved/deleted ones."""
    path = fs.normpath(path)
    out = LogDirLayout(path)
    for entry in sorted(fs.listdir(path), key=lambda e: e.name):
        name = entry.name
        full = os.path.join(path, name)
        if entry.is_dir:
            parsed = parse_partition_dir_name(name)
            if parsed is None:
                out.others.append(full)
                continue
            pd = partition_from_listing(full, _file_names(full), *parsed)
            (out.partitions if pd.state == "live" else out.moved).append(pd)
        elif name == META_PROPERTIES:
            out.meta_properties = full
        elif name == CLEAN_SHUTDOWN:
            out.clean_shutdown = full
        elif name in ROOT_CHECKPOINTS:
            out.checkpoints[name] = full
        elif name == BOOTSTRAP_CHECKPOINT:
            out.bootstrap_checkpoint = full
        elif name == LOCK_FILE:
            out.lock = full
        else:
            out.others.append(full)
    out.partitions.sort(key=lambda p: (p.topic, p.partition))
    return out


def why_not_read(path: str) -> str:
    """Why a file found in a log dir is not read (a leftover of Kafka's, or not Kafka's)."""
    base = os.path.basename(path)
    if base.endswith(".deleted"):
        return "left by Kafka: scheduled for deletion"
    if base.endswith((".cleaned", ".swap")):
        return "left by Kafka: an unfinished log cleaning"
    if base.endswith(".tmp"):
        return "left by Kafka: an unfinished write"
    return f"not a Kafka {'folder' if fs.isdir(path) else 'file'}"


def partition_files(pd: PartitionDir) -> list[str]:
    """The files of a partition folder that hold data, in reading order."""
    out = [f for s in pd.segments for f in (s.log, s.index, s.timeindex, s.txnindex) if f]
    out += [p for _, p in pd.snapshots]
    out += [f for f in (pd.leader_epoch_checkpoint, pd.partition_metadata, pd.quorum_state) if f]
    out += [p for _, _, p in pd.metadata_snapshots]
    return out


def log_dir_files(path: str) -> list[tuple[str, str | None]]:
    """Every entry of a log dir or partition folder in a stable order, as ``(path, None)`` for
    the files that hold data and ``(path, why)`` for what is not read (moved folders,
    leftovers, files that are not Kafka's)."""
    path = fs.normpath(path)
    if is_partition_dir(path):
        pd = scan_partition_dir(path)
        return [(f, None) for f in partition_files(pd)] + \
            [(f, why_not_read(f)) for f in pd.leftovers]
    layout = scan_log_dir(path)
    out: list[tuple[str, str | None]] = [
        (f, None) for f in [layout.meta_properties, layout.clean_shutdown,
                            *sorted(layout.checkpoints.values()), layout.bootstrap_checkpoint]
        if f]
    for pd in layout.partitions:
        out += [(f, None) for f in partition_files(pd)]
        out += [(f, why_not_read(f)) for f in pd.leftovers]
    out += [(p.path, f"partition folder marked {p.state}") for p in layout.moved]
    return out + layout.ignored()


def is_partition_dir(path: str) -> bool:
    """True when ``path`` looks like a live partition folder rather than a log dir."""
    path = fs.normpath(path)
    parsed = parse_partition_dir_name(os.path.basename(path))
    if parsed is None or not fs.isdir(path):
        return False
    names = [e.name for e in fs.listdir(path)]
    return any(parse_offset_file_name(n) for n in names) or PARTITION_METADATA in names


def file_kind(name: str) -> tuple[str, int | None]:
    """What a log-dir file is, from its name: ``(kind, offset)`` with kind one of ``log``,
    ``index``, ``timeindex``, ``txnindex``, ``snapshot``, ``leader-epoch-checkpoint``,
    ``partition.metadata``, ``meta.properties``, ``clean-shutdown``, ``offset-checkpoint``,
    ``quorum-state``, ``metadata-snapshot`` (a KRaft snapshot or ``bootstrap.checkpoint``: record
    batches of metadata records), ``lock``, or ``unknown``."""
    base = os.path.basename(name)
    parsed = parse_offset_file_name(base)
    if parsed:
        return parsed[1][1:], parsed[0]
    snap = parse_metadata_snapshot_name(base)
    if snap:
        return "metadata-snapshot", snap[0]
    if base == BOOTSTRAP_CHECKPOINT:
        return "metadata-snapshot", 0
    if base == QUORUM_STATE:
        return "quorum-state", None
    if base == LOCK_FILE:
        return "lock", None
    if base == LEADER_EPOCH_CHECKPOINT:
        return "leader-epoch-checkpoint", None
    if base == PARTITION_METADATA:
        return "partition.metadata", None
    if base == META_PROPERTIES:
        return "meta.properties", None
    if base == CLEAN_SHUTDOWN:
        return "clean-shutdown", None
    if base in ROOT_CHECKPOINTS or base.endswith("-offset-checkpoint"):
        return "offset-checkpoint", None
    return "unknown", None


_KIB, _MIB = 1 << 10, 1 << 20
#: The most bytes a file of each kind can need, well above what any broker writes: a larger
#: file is damage (its size says so before a byte is read), so memory follows what a file
#: holds, never its size (a sparse or runaway file). Indexes are read within what their
#: segment can index (:func:`kproto.storage.indexes.useful_index_bytes`); files of batches
#: are mapped after :func:`check_size`.
FILE_LIMITS: dict[str, int] = {
    "snapshot": 256 * _MIB,  # 46-byte producer entries: 5.8 million producers
    "txnindex": 256 * _MIB,  # 34-byte entries: 7.9 million aborted transactions in a segment
    "leader-epoch-checkpoint": 16 * _MIB,  # a line per leader epoch still in the log
    "offset-checkpoint": 256 * _MIB,  # a line per partition of the log dir
    "partition.metadata": 64 * _KIB,  # two short lines
    "meta.properties": 64 * _KIB,  # a few properties
    "clean-shutdown": 64 * _KIB,  # a one-line JSON object
    "quorum-state": 16 * _MIB,  # a JSON object listing the voters
    # files of batches: Kafka's FileRecords refuses one past Integer.MAX_VALUE bytes
    "log": 2**31 - 1,
    "metadata-snapshot": 2**31 - 1,
    "unknown": 64 * _MIB,
}


def check_size(path: str, kind: str | None = None) -> int:
    """The size of a log-dir file, or :class:`~kproto.errors.DecodeError` if it is larger
    than its ``kind`` (by default, from its name: :func:`file_kind`) can be
    (:data:`FILE_LIMITS`); ``OSError`` when it cannot be read."""
    kind = kind or file_kind(path)[0]
    limit = FILE_LIMITS.get(kind, FILE_LIMITS["unknown"])
    size = fs.getsize(path)
    if size > limit:
        raise DecodeError(f"implausible size {size}: larger than any {kind} file Kafka "
                          f"writes (limit {limit} bytes)")
    return size


def read_bounded(path: str, kind: str | None = None) -> bytes:
    """The bytes of a log-dir file that is read whole (everything but segments and indexes),
    after checking its size against :data:`FILE_LIMITS` for its ``kind`` (by default, from its
    name: :func:`file_kind`). Raises :class:`~kproto.errors.DecodeError` when it is larger,
    ``OSError`` when it cannot be read."""
    kind = kind or file_kind(path)[0]
    limit = FILE_LIMITS.get(kind, FILE_LIMITS["unknown"])
    check_size(path, kind)
    data = fs.read_range(path, 0, limit + 1)
    if len(data) > limit:  # grew since its size was read
        raise DecodeError(f"implausible size: more than {limit} bytes, larger than any {kind} "
                          "file Kafka writes")
    return data
