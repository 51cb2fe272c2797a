"""What a ``kafka-segments`` read asks for, from its options and its pushed-down filters.

Sans-I/O: :func:`parse_options` turns the (lower-cased) option map into a :class:`ScanSpec`,
:meth:`ScanSpec.push` narrows it with Spark filters and says which ones Spark must still
evaluate, :meth:`ScanSpec.keeps` selects planned splits. Nothing here touches files or Spark.
"""
from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from kproto.storage.internal import INTERNAL_TOPICS
from kproto.storage.reader import ISOLATIONS, ReadOptions, Split

# without a splitSize option: about `tasks` tasks (AUTO_TASKS when the session's parallelism is
# unknown), each within these bounds (a Spark task costs ~50 ms: tiny ones cost more than they
# spread)
AUTO_TASKS = 4
MIN_SPLIT_BYTES = 4 << 20
MAX_SPLIT_BYTES = 128 << 20
_SIZE_SUFFIXES = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
                  "g": 1 << 30, "gb": 1 << 30}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_US = _dt.timedelta(microseconds=1)
INTERNAL = frozenset(INTERNAL_TOPICS)

#: every option the source understands (keys as Spark hands them over: lower-cased)
OPTIONS = ("path", "paths", "topics", "partitions", "startingoffsets", "endingoffsets",
           "startingtimestamp", "endingtimestamp", "isolation", "includecontrol", "verifycrc",
           "splitsize", "output", "includedeleted", "decode")
#: options starting with this go to the filesystem of remote paths, prefix removed
#: (``fs.endpoint_override``, ``fs.access_key``...: see :mod:`kproto.storage.fs`)
FS_PREFIX = "fs."
#: values of the ``output`` option: the records, or the damage a read of them meets
OUTPUTS = ("records", "damage")
#: values of the ``decode`` option: records as stored, or internal topics' records decoded
DECODES = ("none", "internal")


@dataclass(frozen=True)
class ScanSpec:
    """Paths, partition selection, record bounds (in ``read``, half-open) and split size."""

    paths: tuple[str, ...]
    read: ReadOptions = ReadOptions()
    topics: frozenset[str] | None = None
    topic_prefixes: tuple[str, ...] = ()
    partitions: frozenset[int] | None = None
    partition_range: tuple[int | None, int | None] = (None, None)  # inclusive bounds
    split_bytes: int | None = None  # None: auto_split_bytes of what is read
    output: str = "records"  # or "damage": one row per damage found instead of the records
    decode: str = "none"  # or "internal": internal topics only, each record decoded
    empty: bool = False  # the bounds exclude every record
    pushed: tuple[str, ...] = field(default=(), compare=False)  # filters taken (logged)
    storage_options: tuple[tuple[str, str], ...] = ()  # the fs.* options (remote paths)

    def keeps(self, split: Split) -> bool:
        """Whether ``split`` belongs to the partitions this scan selects."""
        if self.topics is not None and split.topic not in self.topics:
            return False
        if self.topic_prefixes and not all(split.topic.startswith(p) for p in self.topic_prefixes):
            return False
        if self.partitions is not None and split.partition not in self.partitions:
            return False
        lo, hi = self.partition_range
        return (lo is None or split.partition >= lo) and (hi is None or split.partition <= hi)

    def push(self, filters: Iterable) -> tuple[ScanSpec, list]:
        """This spec narrowed by Spark data-source filters (ANDed), and the filters Spark must
        still evaluate after the scan (those not handled exactly)."""
        spec, rest, taken = self, [], []
        for f in filters:
            narrowed = _narrow(spec, f)
            if narrowed is None:
                rest.append(f)
                continue
            spec, exact = narrowed
            if exact:
                taken.append(repr(f))
            else:
                rest.append(f)
        return replace(spec, pushed=self.pushed + tuple(taken)), rest


def auto_split_bytes(total: int, tasks: int = AUTO_TASKS) -> int:
    """Task size for ``total`` bytes of log when no ``splitSize`` is given: ``tasks`` tasks,
    within ``[MIN_SPLIT_BYTES, MAX_SPLIT_BYTES]``."""
    return min(MAX_SPLIT_BYTES, max(MIN_SPLIT_BYTES, -(-total // max(1, tasks))))


# ----------------------------------------------------------------------------- options
def parse_options(options: Mapping[str, str]) -> ScanSpec:
    """A :class:`ScanSpec` from the source's options; ``ValueError`` names a bad one."""
    opts = {k.lower(): v for k, v in options.items()}
    unknown = sorted(k for k in set(opts) - set(OPTIONS) if not k.startswith(FS_PREFIX))
    if unknown:
        raise ValueError(f"kafka-segments: unknown option(s) {unknown}; known: {list(OPTIONS)}")
    paths = option_paths(opts)
    isolation = opts.get("isolation", "read_uncommitted").lower()
    if isolation not in ISOLATIONS:
        raise ValueError(f"kafka-segments: isolation must be one of {ISOLATIONS}, "
                         f"not {isolation!r}")
    read = ReadOptions(
        start_offset=_offset(opts, "startingoffsets", "earliest"),
        end_offset=_offset(opts, "endingoffsets", "latest"),
        start_timestamp=_int(opts, "startingtimestamp"),
        end_timestamp=_int(opts, "endingtimestamp"),
        isolation=isolation,
        include_control=_bool(opts, "includecontrol"),
        include_deleted=_bool(opts, "includedeleted"),
        verify_crc=_bool(opts, "verifycrc"),
    )
    topics = _names(opts.get("topics"))
    parts = _names(opts.get("partitions"))
    try:
        partitions = frozenset(int(p) for p in parts) if parts is not None else None
    except ValueError:
        raise ValueError(f"kafka-segments: partitions must be integers: "
                         f"{opts['partitions']!r}") from None
    split = _size(opts.get("splitsize"))
    output = opts.get("output", "records").lower()
    if output not in OUTPUTS:
        raise ValueError(f"kafka-segments: output must be one of {OUTPUTS}, not {output!r}")
    decode = opts.get("decode", "none").lower()
    if decode not in DECODES:
        raise ValueError(f"kafka-segments: decode must be one of {DECODES}, not {decode!r}")
    chosen = frozenset(topics) if topics is not None else None
    if decode == "internal":
        chosen = INTERNAL if chosen is None else chosen & INTERNAL
    return _checked(ScanSpec(tuple(paths), read, chosen, partitions=partitions,
                             split_bytes=split, output=output, decode=decode,
                             storage_options=fs_options(opts)))


def fs_options(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``fs.*`` options, prefix removed, sorted: the remote filesystem's arguments."""
    return tuple(sorted((k[len(FS_PREFIX):], v) for k, v in opts.items()
                        if k.startswith(FS_PREFIX)))


def option_paths(opts: Mapping[str, str], source: str = "kafka-segments") -> list[str]:
    """The paths of a read: ``.load(path)`` gives ``path``, ``.load([a, b])`` gives ``paths``
    (Spark's JSON list); ``ValueError`` when there is none."""
    paths: list[str] = []
    if opts.get("path"):
        paths.append(opts["path"])
    if opts.get("paths"):
        try:
            extra = json.loads(opts["paths"])
        except ValueError:
            extra = None
        if isinstance(extra, str):
            extra = [extra]
        if not isinstance(extra, list) or not all(isinstance(p, str) for p in extra):
            raise ValueError(f"{source}: paths must be a JSON list of strings: "
                             f"{opts['paths']!r}")
        paths += extra
    if not paths:
        raise ValueError(f"{source}: no path (use .load(path))")
    return paths


def _names(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _int(opts: Mapping[str, str], key: str) -> int | None:
    if opts.get(key) is None:
        return None
    try:
        return int(opts[key])
    except ValueError:
        raise ValueError(f"kafka-segments: {key} must be an integer: {opts[key]!r}") from None


def _offset(opts: Mapping[str, str], key: str, open_end: str) -> int | None:
    if str(opts.get(key, "")).lower() == open_end:
        return None
    return _int(opts, key)


def _bool(opts: Mapping[str, str], key: str, default: str = "false",
          source: str = "kafka-segments") -> bool:
    value = str(opts.get(key, default)).lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(f"{source}: {key} must be true or false: {opts[key]!r}")
    return value in _TRUE


def _size(value: str | None, source: str = "kafka-segments") -> int | None:
    if value is None:
        return None
    text = value.strip().lower()
    digits = text.rstrip("kmgb")
    try:
        size = int(digits) * _SIZE_SUFFIXES[text[len(digits):]]
    except (ValueError, KeyError):
        raise ValueError(f"{source}: splitSize must be bytes like 67108864 or 64m: "
                         f"{value!r}") from None
    if size <= 0:
        raise ValueError(f"{source}: splitSize must be positive: {value!r}")
    return size


def _checked(spec: ScanSpec) -> ScanSpec:
    """Mark the spec empty when its bounds cannot hold a record (ReadOptions would still plan)."""
    r = spec.read
    empty = spec.empty or (r.start_offset is not None and r.end_offset is not None
                           and r.start_offset >= r.end_offset) \
        or (r.start_timestamp is not None and r.end_timestamp is not None
            and r.start_timestamp >= r.end_timestamp) \
        or spec.topics == frozenset() or spec.partitions == frozenset()
    lo, hi = spec.partition_range
    empty = empty or (lo is not None and hi is not None and lo > hi)
    return replace(spec, empty=True) if empty and not spec.empty else spec


# ----------------------------------------------------------------------------- filters
def _micros(value) -> int | None:
    """A Spark timestamp literal as microseconds since the epoch (naive = UTC)."""
    if not isinstance(value, _dt.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return (value - _EPOCH) // _US


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bound(kind: str, v: int, scale: int) -> tuple[int | None, int | None] | None:
    """Half-open ``[lo, hi)`` of integer column values ``x`` (the column is ``x * scale`` in
    the filter's unit) satisfying ``column <kind> v``."""
    floor, ceil = v // scale, -(-v // scale)
    if kind == "GreaterThan":
        return floor + 1, None
    if kind == "GreaterThanOrEqual":
        return ceil, None
    if kind == "LessThan":
        return None, ceil
    if kind == "LessThanOrEqual":
        return None, floor + 1
    if kind == "EqualTo":
        return (v // scale, v // scale + 1) if v % scale == 0 else (0, 0)
    return None


def _narrow(spec: ScanSpec, f) -> tuple[ScanSpec, bool] | None:
    """``spec`` narrowed by one filter and whether that handled it exactly (None: unusable)."""
    kind = type(f).__name__
    attr: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attr) != 1:
        return None
    col = attr[0]
    value: Any = getattr(f, "value", None)  # the filter's literal(s): any type Spark has
    if spec.output != "records":
        # damage rows: only their topic and partition select what is read (and may be null)
        if col not in ("topic", "partition") or kind == "IsNotNull":
            return None
    elif kind == "IsNotNull" and col in ("topic", "partition", "offset", "timestamp"):
        return spec, True  # never null in this source
    if col == "topic":
        if kind == "EqualTo" and isinstance(value, str):
            names = {value}
        elif kind == "In" and all(isinstance(v, str) for v in value):
            names = set(value)
        elif kind == "StringStartsWith" and isinstance(value, str):
            return replace(spec, topic_prefixes=spec.topic_prefixes + (value,)), True
        else:
            return None
        topics = frozenset(names) if spec.topics is None else spec.topics & names
        return _checked(replace(spec, topics=topics)), True
    if col == "partition":
        if kind == "In" and all(_is_int(v) for v in value):
            parts = frozenset(value)
            parts = parts if spec.partitions is None else spec.partitions & parts
            return _checked(replace(spec, partitions=parts)), True
        if not _is_int(value):
            return None
        b = _bound(kind, value, 1)
        if b is None:
            return None
        lo, hi = spec.partition_range
        blo, bhi = b
        lo = blo if lo is None else (lo if blo is None else max(lo, blo))
        hi = (bhi - 1 if bhi is not None else None) if hi is None else \
            (hi if bhi is None else min(hi, bhi - 1))
        return _checked(replace(spec, partition_range=(lo, hi))), True
    if col == "offset":
        if kind == "In" and value and all(_is_int(v) for v in value):
            # prune to the values' span; Spark still picks the exact offsets
            return _with_range(spec, "offset", min(value), max(value) + 1), False
        if not _is_int(value):
            return None
        b = _bound(kind, value, 1)
        return None if b is None else (_with_range(spec, "offset", *b), True)
    if col == "timestamp":
        if kind == "In":
            each = [_micros(v) for v in value]
            us_all = [u for u in each if u is not None]
            if not us_all or len(us_all) < len(each):  # none, or one that is no timestamp
                return None
            return _with_range(spec, "timestamp", min(us_all) // 1000, max(us_all) // 1000 + 1), False
        us = _micros(value)
        if us is None:
            return None
        b = _bound(kind, us, 1000)  # the column is in ms, Spark's literal in µs
        return None if b is None else (_with_range(spec, "timestamp", *b), True)
    return None


def _with_range(spec: ScanSpec, col: str, lo: int | None, hi: int | None) -> ScanSpec:
    r = spec.read
    start, end = (r.start_offset, r.end_offset) if col == "offset" else \
        (r.start_timestamp, r.end_timestamp)
    if lo is not None:
        start = lo if start is None else max(start, lo)
    if hi is not None:
        end = hi if end is None else min(end, hi)
    read = replace(r, start_offset=start, end_offset=end) if col == "offset" else \
        replace(r, start_timestamp=start, end_timestamp=end)
    return _checked(replace(spec, read=read))
