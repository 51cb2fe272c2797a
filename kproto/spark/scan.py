"""What a ``kafka-segments`` read asks for, from its options and its pushed-down filters.

Sans-I/O: :func:`parse_options` turns the (lower-cased) option map into a :class:`ScanSpec`,
:meth:`ScanSpec.push` narrows it with Spark filters and says which ones Spark must still
evaluate, :meth:`ScanSpec.keeps` selects planned splits. Nothing here touches files or Spark.
"""
from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from kproto.storage.internal import INTERNAL_TOPICS
from kproto.storage.reader import ISOLATIONS, ReadOptions, Split
from kproto.storage.tail import offsets_from_json

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
           "splitsize", "output", "includedeleted", "decode", "columns", "includeheaders",
           "subscribe", "subscribepattern", "assign", "kafka.isolation.level")
#: options starting with this go to the filesystem of remote paths, prefix removed
#: (``fs.endpoint_override``, ``fs.access_key``...: see :mod:`kproto.storage.fs`)
FS_PREFIX = "fs."
#: values of the ``output`` option: the records, or the damage a read of them meets
OUTPUTS = ("records", "damage")
#: values of the ``decode`` option: records as stored, or internal topics' records decoded
DECODES = ("none", "internal")
#: values of the ``columns`` option: this source's columns, or those of Spark's Kafka source
COLUMNS = ("kproto", "kafka")
#: Spark's Kafka source's offsets in its JSON form: -2 the earliest, -1 the latest
EARLIEST, LATEST = -2, -1
TopicPartition = tuple[str, int]


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
    topic_pattern: str | None = None  # Spark's subscribePattern: topics it matches in full
    assigned: frozenset[TopicPartition] | None = None  # Spark's assign: these partitions only
    columns: str = "kproto"  # or "kafka": the columns of Spark's Kafka source
    include_headers: bool = True  # with columns=kafka: Spark's includeHeaders (default false)
    #: per partition ``[start, end)`` from startingOffsets/endingOffsets JSON (None: open),
    #: within ``read``'s bounds
    partition_offsets: tuple[tuple[TopicPartition, tuple[int | None, int | None]], ...] = ()

    def read_for(self, topic: str, partition: int) -> ReadOptions:
        """The read options of one partition: ``read`` narrowed by its JSON offsets."""
        bounds = dict(self.partition_offsets).get((topic, partition))
        if bounds is None:
            return self.read
        r, (lo, hi) = self.read, bounds
        start = r.start_offset if lo is None else lo if r.start_offset is None else max(lo, r.start_offset)
        end = r.end_offset if hi is None else hi if r.end_offset is None else min(hi, r.end_offset)
        return replace(r, start_offset=start, end_offset=end)

    def keeps(self, split: Split) -> bool:
        """Whether ``split`` belongs to the partitions this scan selects."""
        return self.selects(split.topic, split.partition)

    def selects(self, topic: str, partition: int) -> bool:
        """Whether partition ``partition`` of ``topic`` is one this scan reads."""
        if self.topics is not None and topic not in self.topics:
            return False
        if self.topic_prefixes and not all(topic.startswith(p) for p in self.topic_prefixes):
            return False
        if self.topic_pattern is not None and not re.fullmatch(self.topic_pattern, topic):
            return False
        if self.assigned is not None and (topic, partition) not in self.assigned:
            return False
        if self.partitions is not None and partition not in self.partitions:
            return False
        lo, hi = self.partition_range
        return (lo is None or partition >= lo) and (hi is None or partition <= hi)

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
    isolation = str(_same(opts, "isolation", "kafka.isolation.level", "read_uncommitted")).lower()
    if isolation not in ISOLATIONS:
        raise ValueError(f"kafka-segments: isolation must be one of {ISOLATIONS}, "
                         f"not {isolation!r}")
    start, starts = _offsets(opts, "startingoffsets")
    end, ends = _offsets(opts, "endingoffsets")
    read = ReadOptions(
        start_offset=start,
        end_offset=end,
        start_timestamp=_int(opts, "startingtimestamp"),
        end_timestamp=_int(opts, "endingtimestamp"),
        isolation=isolation,
        include_control=_bool(opts, "includecontrol"),
        include_deleted=_bool(opts, "includedeleted"),
        verify_crc=_bool(opts, "verifycrc"),
    )
    topics = _names(_same(opts, "topics", "subscribe", None))
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
    columns = opts.get("columns", "kproto").lower()
    if columns not in COLUMNS:
        raise ValueError(f"kafka-segments: columns must be one of {COLUMNS}, not {columns!r}")
    if columns == "kafka" and (decode != "none" or output != "records"):
        raise ValueError("kafka-segments: columns=kafka reads records as stored (not with "
                         "decode=internal or output=damage)")
    if "includeheaders" in opts and columns != "kafka":
        raise ValueError("kafka-segments: includeHeaders is for columns=kafka (the headers "
                         "column is always there otherwise)")
    include_headers = columns != "kafka" or _bool(opts, "includeheaders")
    chosen = frozenset(topics) if topics is not None else None
    if decode == "internal":
        chosen = INTERNAL if chosen is None else chosen & INTERNAL
    bounds = {tp: (starts.get(tp), ends.get(tp)) for tp in sorted({*starts, *ends})}
    pattern, assigned = _pattern(opts), _assigned(opts)
    given = [name for name, v in (("topics/subscribe", topics), ("subscribePattern", pattern),
                                  ("assign", assigned)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"kafka-segments: give one of {', '.join(given)} (as Spark's Kafka "
                         f"source takes one way of choosing topics)")
    if assigned is not None:
        chosen = frozenset(t for t, _ in assigned)  # what planning lists
    return _checked(ScanSpec(tuple(paths), read, chosen, partitions=partitions,
                             split_bytes=split, output=output, decode=decode,
                             storage_options=fs_options(opts), columns=columns,
                             topic_pattern=pattern, assigned=assigned,
                             include_headers=include_headers,
                             partition_offsets=tuple(bounds.items())))


def _pattern(opts: Mapping[str, str]) -> str | None:
    """Spark's ``subscribePattern``: a regular expression the topic names match in full."""
    pattern = opts.get("subscribepattern")
    if pattern is None:
        return None
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"kafka-segments: subscribePattern is no regular expression: "
                         f"{pattern!r}: {exc}") from None
    return pattern


def _assigned(opts: Mapping[str, str]) -> frozenset[TopicPartition] | None:
    """Spark's ``assign``: JSON ``{"topic": [0, 1]}``, the partitions to read."""
    if "assign" not in opts:
        return None
    try:
        value = json.loads(opts["assign"])
        if not isinstance(value, dict):
            raise ValueError
        out: set[TopicPartition] = set()
        for topic, parts in value.items():
            if not isinstance(parts, list) or not all(isinstance(p, int) for p in parts):
                raise ValueError
            out.update((str(topic), p) for p in parts)
        return frozenset(out)
    except ValueError:
        raise ValueError(f"kafka-segments: assign must be JSON like "
                         f"{{\"topicA\": [0, 1]}}: {opts['assign']!r}") from None


def _same(opts: Mapping[str, str], name: str, alias: str, default: str | None) -> str | None:
    """The value of option ``name`` or of its Spark Kafka source ``alias`` (both: the same)."""
    if name in opts and alias in opts and opts[name] != opts[alias]:
        raise ValueError(f"kafka-segments: {name} ({opts[name]!r}) and {alias} "
                         f"({opts[alias]!r}) say different things: give one")
    return opts.get(name, opts.get(alias, default))


def _offsets(opts: Mapping[str, str], key: str
             ) -> tuple[int | None, dict[TopicPartition, int | None]]:
    """startingOffsets / endingOffsets: ``earliest`` / ``latest``, an offset for every
    partition, or Spark's JSON ``{"topic": {"0": 42, "1": -2}}`` (-2 the earliest, -1 the
    latest; as in Spark's Kafka source a batch read cannot start at the latest nor end at
    the earliest). The offset for every partition (None: open) and the JSON's per partition."""
    starting = key == "startingoffsets"
    name = "startingOffsets" if starting else "endingOffsets"
    value = str(opts.get(key, "earliest" if starting else "latest")).strip()
    if value.lower() == ("earliest" if starting else "latest"):
        return None, {}
    if value.lower() in ("earliest", "latest"):
        raise ValueError(f"kafka-segments: {name} can't be {value.lower()} for batch queries "
                         f"(as in Spark's Kafka source)")
    if not value.startswith("{"):
        return _int(opts, key), {}
    try:
        per = offsets_from_json(json.loads(value))
    except ValueError as exc:
        raise ValueError(f"kafka-segments: {name} must be earliest, latest, an offset or JSON "
                         f"like {{\"topic\": {{\"0\": 42}}}}: {exc}") from None
    out: dict[TopicPartition, int | None] = {}
    for (topic, partition), offset in per.items():
        if offset == (LATEST if starting else EARLIEST):
            raise ValueError(f"kafka-segments: {name} for {topic}-{partition} can't be "
                             f"{'latest' if starting else 'earliest'} for batch queries "
                             f"(as in Spark's Kafka source)")
        if offset in (EARLIEST, LATEST):
            out[(topic, partition)] = None
        elif offset < 0:
            raise ValueError(f"kafka-segments: {name} for {topic}-{partition} must be an "
                             f"offset, -2 (earliest) or -1 (latest), not {offset}")
        else:
            out[(topic, partition)] = offset
    return None, out


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
