"""Decoded traffic as Arrow tables: one row per exchange (the ``decode-pcap --format jsonl``
line, typed), or one row per record of the Produce requests and Fetch and ShareFetch
responses.

Exchange rows are built from :func:`~kproto.capture.exchange.exchange_to_json`, so they hold
exactly what the JSON lines hold: nested parts (bodies, ``unread``, ``fetch_session``, ``sasl``)
as JSON text, the rest as typed columns. Record rows use the column names and types of
:func:`kproto.storage.arrow_schema` where they mean the same (``topic``, ``partition``,
``offset``, ``timestamp``, ``key``, ``value``, ``headers``, ...), so traffic joins log data.
Sans-I/O apart from :func:`capture_files` (which lists files) and :func:`capture_packets`
(which reads one), both through :mod:`kproto.storage.fs` (local paths or URIs).
"""
from __future__ import annotations

import datetime as _dt
import glob
import operator
import os
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from kproto.capture.exchange import Exchange, body_json_text, latency_json, unread_json
from kproto.capture.json_text import json_dumps
from kproto.capture.decoder import CaptureDecoder
from kproto.capture.pcap import Packet, packets_of, read_capture
from kproto.errors import DecodeError
from kproto.problems import Problem
from kproto.schemas.api_keys import ApiKey
from kproto.storage import fs

__all__ = ["EXCHANGE_SCHEMA", "RECORD_SCHEMA", "capture_data", "capture_exchanges",
           "capture_files", "capture_packets",
           "exchange_batches",
           "exchange_records", "group_files", "record_batches"]

_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_TS = pa.timestamp("us", tz="UTC")  # capture times have µs (ns pcaps are shown to the µs too)

#: the exchange that a row (or a record row) comes from: ``file`` and ``index`` (the exchange's
#: position in the file's ``decode-pcap`` output) identify it
_IDENTITY = [
    pa.field("file", pa.string(), False), pa.field("index", pa.int64(), False),
    pa.field("ts", _TS), pa.field("client", pa.string()), pa.field("broker", pa.string()),
    pa.field("api_key", pa.int16()), pa.field("api_name", pa.string()),
    pa.field("api_version", pa.int16()), pa.field("correlation_id", pa.int32()),
    pa.field("client_id", pa.string()),
]

_IDENTITY_SCHEMA = pa.schema(_IDENTITY)

#: one row per exchange: the fields of the JSON line (nested ones as JSON text)
EXCHANGE_SCHEMA = pa.schema(_IDENTITY + [
    pa.field("kind", pa.string()), pa.field("decoded_as", pa.int16()),
    pa.field("latency_ms", pa.float64()), pa.field("request_bytes", pa.int64()),
    pa.field("response_bytes", pa.int64()), pa.field("request", pa.string()),
    pa.field("response", pa.string()), pa.field("errors", pa.list_(pa.string())),
    pa.field("problems", pa.list_(pa.string())), pa.field("notes", pa.list_(pa.string())),
    pa.field("unread", pa.string()), pa.field("fetch_session", pa.string()),
    pa.field("sasl", pa.string()),
])
_JSON_TEXT = ("request", "response", "unread", "fetch_session", "sasl")

#: one row per record of a Produce request or Fetch or ShareFetch response (control batches
#: left out); ``offset`` of a produced record comes from the response's base offset (null
#: without one). A ShareFetch response carries whole batches: its rows are their records,
#: those its ``acquired_records`` ranges hand to the member and any others.
RECORD_SCHEMA = pa.schema(_IDENTITY + [
    pa.field("topic", pa.string()), pa.field("topic_id", pa.string()),
    pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("ms", tz="UTC")), pa.field("timestamp_type", pa.int8()),
    pa.field("key", pa.binary()), pa.field("value", pa.binary()),
    pa.field("headers", _HEADERS), pa.field("leader_epoch", pa.int32()),
    pa.field("producer_id", pa.int64()), pa.field("producer_epoch", pa.int16()),
    pa.field("is_transactional", pa.bool_()), pa.field("error_code", pa.int16()),
])

_ZERO_ID = "AAAAAAAAAAAAAAAAAAAAAA"
#: the responses that carry records fetched (same layout: topics by id, partitions with
#: partition_index, error_code and records)
_FETCHES = (ApiKey.FETCH, ApiKey.SHARE_FETCH)
# a directory contributes these files (rotated tcpdump files are NAME.pcap0, NAME.pcap.1, ...)
_CAPTURE_MARKS = (".pcap", ".cap")


def capture_files(paths: Iterable[str],
                  storage_options: Mapping[str, Any] | None = None) -> list[tuple[str, int]]:
    """``(path, size)`` of the capture files named by ``paths`` (files, glob patterns, or
    directories, whose files with ``.pcap``/``.cap`` in their name are taken, recursively;
    local or URIs such as ``s3://bucket/captures/*.pcap*``, ``storage_options`` for their
    filesystem: see :mod:`kproto.storage.fs`), sorted and without repeats.
    ``FileNotFoundError`` for a path or pattern matching nothing."""
    found: dict[str, int] = {}
    for path in paths:
        fs.configure(path, storage_options)
        if not glob.has_magic(path):
            matches = [path]
        elif fs.is_remote(path):
            matches = fs.glob(path)
        else:
            matches = sorted(glob.glob(path, recursive=True))
        if not matches or not all(fs.exists(m) for m in matches):
            raise FileNotFoundError(f"no capture file at {path!r}")
        for m in matches:
            if fs.isdir(m):
                found.update((f, n) for f, n in fs.walk_files(m)
                             if any(mark in os.path.basename(f).lower() for mark in _CAPTURE_MARKS))
            else:
                found[m] = fs.getsize(m)
    return sorted(found.items())


def capture_data(path: str) -> bytes:
    """The bytes of a capture file, local or a URI's (one ranged read: a capture is decoded
    from its start)."""
    return fs.read_range(path) if fs.is_remote(path) else read_capture(path)


def capture_packets(path: str) -> Iterator[Packet | Problem]:
    """The packets of a capture file (:func:`capture_data`), as
    :func:`~kproto.capture.pcap.read_packets` gives them."""
    return packets_of(capture_data(path), path)


def capture_exchanges(path: str, decoder: CaptureDecoder) -> Iterator[Exchange]:
    """The exchanges of a capture file (:func:`capture_data`) through ``decoder``, finished
    (problems of the file itself in ``decoder.problems``, their source ``path``)."""
    yield from decoder.feed_capture(capture_data(path), path)
    yield from decoder.finish()


def _row_ts(ts: float | None) -> _dt.datetime | None:
    """The exchange's time as the JSON line shows it (to the microsecond), or None where the
    line shows a damaged header's raw seconds."""
    if ts is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc)
    except (OverflowError, ValueError, OSError):
        return None


def _json_text(value: Any) -> str | None:
    return None if value is None else json_dumps(value)


def _body(side: str) -> Callable[[Exchange], str | None]:
    def text(ex: Exchange) -> str | None:
        return None if getattr(ex, side) is None else body_json_text(ex, side)
    return text


#: each column of an exchange row but ``file`` and ``index``, from the exchange: what
#: :func:`~kproto.capture.exchange.exchange_to_json` has under that name (nested values as
#: their JSON text)
_EXCHANGE_VALUES: dict[str, Callable[[Exchange], Any]] = {
    "ts": lambda ex: _row_ts(ex.ts),
    "client": lambda ex: str(ex.client),
    "broker": lambda ex: str(ex.broker),
    "api_key": operator.attrgetter("api_key"),
    "api_name": operator.attrgetter("api_name"),
    "api_version": operator.attrgetter("api_version"),
    "correlation_id": operator.attrgetter("correlation_id"),
    "client_id": operator.attrgetter("client_id"),
    "kind": operator.attrgetter("kind"),
    "decoded_as": operator.attrgetter("decoded_as"),
    "latency_ms": latency_json,
    "request_bytes": lambda ex: ex.request_bytes or None,
    "response_bytes": lambda ex: ex.response_bytes or None,
    "request": _body("request"),
    "response": _body("response"),
    "errors": operator.attrgetter("errors"),
    "problems": lambda ex: ex.problems.reasons(),
    "notes": lambda ex: ex.notes.reasons(),
    "unread": lambda ex: _json_text(unread_json(ex)),
    "fetch_session": lambda ex: _json_text(ex.fetch_session),
    "sasl": lambda ex: _json_text(ex.sasl),
}


def _columns(names: Sequence[str], file: str) -> tuple[dict[str, list], Callable[[int, Exchange], None]]:
    """Empty column lists for ``names`` and a function adding an exchange's row to them."""
    cols: dict[str, list] = {n: [] for n in names}
    fill = [(cols[n].append, _EXCHANGE_VALUES[n]) for n in names if n in _EXCHANGE_VALUES]
    files = cols["file"].append if "file" in cols else None
    indexes = cols["index"].append if "index" in cols else None

    def add(index: int, ex: Exchange) -> None:
        if files is not None:
            files(file)
        if indexes is not None:
            indexes(index)
        for put, value in fill:
            put(value(ex))
    return cols, add


def _batch(cols: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], f.type) for f in schema],
                                      schema=schema)


def exchange_batches(exchanges: Iterable[Exchange], file: str, *, batch_rows: int = 4096,
                     schema: pa.Schema = EXCHANGE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """The exchanges of capture ``file`` as rows of :data:`EXCHANGE_SCHEMA` (or the subset
    ``schema`` names, the only columns computed), ``batch_rows`` per Arrow batch."""
    cols, add = _columns(schema.names, file)
    rows = 0
    for index, ex in enumerate(exchanges):
        add(index, ex)
        rows += 1
        if rows >= batch_rows:
            yield _batch(cols, schema)
            cols, add = _columns(schema.names, file)
            rows = 0
    if rows:
        yield _batch(cols, schema)


def _topic(t: Any, names: dict[str, str]) -> tuple[str | None, str | None]:
    """(name, id) of a Produce/Fetch topic entry: a v13+ entry has only the id, named from
    the capture's Metadata responses when they named it."""
    tid = getattr(t, "topic_id", None)
    tid = None if tid is None or str(tid) == _ZERO_ID else str(tid)
    name = getattr(t, "name", None) or getattr(t, "topic", None) or None
    if name is None and tid is not None:
        name = names.get(tid)
    return name, tid


def _partition_records(ex: Exchange) -> Iterator[tuple[str | None, str | None, int, int,
                                                       Any, int | None, int]]:
    """(topic, topic id, partition, error code, records bytes, base offset, log append time)
    of each partition with records in a Produce request or Fetch or ShareFetch response."""
    if ex.api_key == ApiKey.PRODUCE and ex.request is not None:
        answers: dict[tuple[Any, int], Any] = {}
        for t in getattr(ex.response, "responses", None) or []:
            for p in t.partition_responses:
                answers[(_topic(t, ex.topic_names), p.index)] = p
        for t in ex.request.topic_data:
            topic = _topic(t, ex.topic_names)
            for p in t.partition_data:
                a = answers.get((topic, p.index))
                if a is not None and a.error_code == 0 and a.base_offset >= 0:
                    yield *topic, p.index, 0, p.records, a.base_offset, a.log_append_time_ms
                else:  # not acknowledged: no offsets
                    yield (*topic, p.index, -1 if a is None else a.error_code, p.records,
                           None, -1)
    elif ex.api_key in _FETCHES and ex.response is not None:
        for t in ex.response.responses:
            topic = _topic(t, ex.topic_names)
            for p in t.partitions:
                yield *topic, p.partition_index, p.error_code, p.records, None, -1


_RECORD_COLUMNS = RECORD_SCHEMA.names[len(_IDENTITY):]


class _Records:
    """The records of Produce requests and (Share)Fetch responses of several exchanges, gathered
    partition by partition and decoded together: one :func:`~kproto.records.columns.decode_arrow`
    and one set of Arrow arrays for many small partitions (Arrow calls cost more than a
    captured partition usually holds). Each partition reads as if alone: a records field
    that does not decode is left out, a partial batch ending a Fetch response is not a
    record, control batches are left out."""

    def __init__(self) -> None:
        self.exchanges: list[tuple[int, Exchange]] = []   # (index in the file, exchange)
        self.owner: list[int] = []       # per partition: its exchange in self.exchanges
        # per partition: (name, id, partition, error, base offset, append time, produced)
        self.meta: list[tuple] = []
        self.batches: list[list] = []    # per partition: its batches
        self.rows = 0                    # records the batch headers announce

    def add(self, index: int, ex: Exchange) -> None:
        from kproto.records.batch import RecordBatch
        from kproto.records.reader import iter_batches

        owner = len(self.exchanges)
        for name, tid, partition, error, data, base, append_time in _partition_records(ex):
            if not data:
                continue
            try:
                batches = [b for b in iter_batches(data)
                           if not (isinstance(b, RecordBatch) and b.is_control)]
            except (DecodeError, OverflowError):
                continue
            if batches:
                self.owner.append(owner)
                self.meta.append((name, tid, partition, error, base, append_time,
                                  ex.api_key == ApiKey.PRODUCE))
                self.batches.append(batches)
                self.rows += sum(getattr(b, "count", 1) for b in batches)
        if len(self.owner) and self.owner[-1] == owner:
            self.exchanges.append((index, ex))

    def _decoded(self) -> Iterator[tuple[list[int], Any]]:
        """(partitions, their records) in partition order: runs of v2 partitions decoded in
        one call, a partition with legacy messages alone, and a run that fails partition by
        partition (the ones that fail left out)."""
        from kproto.records.columns import decode_arrow
        from kproto.records.legacy import LegacyMessage

        def decode(run: list[int]) -> Iterator[tuple[list[int], Any]]:
            try:
                yield run, decode_arrow([b for i in run for b in self.batches[i]])
            except (DecodeError, OverflowError):
                for i in run if len(run) > 1 else ():
                    yield from decode([i])

        run: list[int] = []
        for i, batches in enumerate(self.batches):
            if any(isinstance(b, LegacyMessage) for b in batches):
                yield from decode(run)
                yield from decode([i])
                run = []
            else:
                run.append(i)
        if run:
            yield from decode(run)

    def columns(self) -> tuple[np.ndarray, dict[str, pa.Array]] | None:
        """(the exchange of each record, in self.exchanges; the record columns of
        :data:`RECORD_SCHEMA`), or None when no partition has a record."""
        chunks = [(run, recs) for run, recs in self._decoded() if len(recs)]
        if not chunks:
            return None
        part = []     # per record: its partition
        per_batch = []   # per batch: the batch
        counts = []
        for run, recs in chunks:
            nb = [len(self.batches[i]) for i in run]
            in_part = np.add.reduceat(recs.counts, np.cumsum([0] + nb[:-1]))
            part.append(np.repeat(np.asarray(run, np.int64), in_part))
            per_batch += [b for i in run for b in self.batches[i]]
            counts.append(recs.counts)
        rec_part = np.concatenate(part)
        n, count = len(rec_part), np.concatenate(counts)
        batches = len(per_batch)

        def by_batch(attr: str, default: int, dtype: Any) -> np.ndarray:
            return np.repeat(np.fromiter((getattr(b, attr, default) for b in per_batch),
                                         dtype, batches), count)

        meta = list(zip(*self.meta))
        names, tids, partitions, errors, bases, append_times, produce = meta
        has_base = np.fromiter((b is not None for b in bases), bool, len(bases))[rec_part]
        base = np.fromiter((b or 0 for b in bases), np.int64, len(bases))[rec_part]
        append_time = np.fromiter(append_times, np.int64, len(bases))[rec_part]
        produced = np.fromiter(produce, bool, len(bases))[rec_part]
        # a produced record's offset is the broker's base offset plus its place in the request
        first = np.flatnonzero(np.r_[True, rec_part[1:] != rec_part[:-1]])
        place = np.arange(n) - np.repeat(first, np.diff(np.r_[first, n]))
        offset = np.where(has_base, base + place,
                          np.concatenate([recs.offset for _, recs in chunks]))
        attrs = by_batch("attributes", 0, np.int64)
        magic = by_batch("magic", 0, np.int64)
        stamped = append_time >= 0  # the broker stamped them: the log holds its time
        timestamp = np.where(stamped, append_time,
                             np.concatenate([recs.timestamp for _, recs in chunks]))
        ts_type = np.where(stamped, 1, np.where(magic == 0, -1, (attrs & 0x08) >> 3))
        take = pa.array(rec_part)
        cols = {
            "topic": pa.array(names, pa.string()).take(take),
            "topic_id": pa.array(tids, pa.string()).take(take),
            "partition": pa.array(np.fromiter(partitions, np.int32, len(bases))[rec_part]),
            "offset": pa.array(offset, mask=produced & ~has_base),
            "timestamp": pa.array(timestamp).view(pa.timestamp("ms", tz="UTC")),
            "timestamp_type": pa.array(ts_type.astype(np.int8)),
            "key": pa.concat_arrays([recs.key for _, recs in chunks]),
            "value": pa.concat_arrays([recs.value for _, recs in chunks]),
            "headers": pa.concat_arrays([recs.headers for _, recs in chunks]),
            "leader_epoch": pa.array(by_batch("partition_leader_epoch", -1, np.int32)),
            "producer_id": pa.array(by_batch("producer_id", -1, np.int64)),
            "producer_epoch": pa.array(by_batch("producer_epoch", -1, np.int16)),
            "is_transactional": pa.array((attrs & 0x10) != 0),
            "error_code": pa.array(np.fromiter(errors, np.int16, len(bases))[rec_part]),
        }
        return np.asarray(self.owner, np.int64)[rec_part], cols

    def batch(self, file: str, schema: pa.Schema) -> pa.RecordBatch | None:
        """The records as rows of ``schema`` (a subset of :data:`RECORD_SCHEMA`), each with
        its exchange's identity columns."""
        got = self.columns()
        if got is None:
            return None
        owner, cols = got
        idents, add = _columns([n for n in schema.names if n in _IDENTITY_SCHEMA.names], file)
        for index, ex in self.exchanges:
            add(index, ex)
        take = pa.array(owner)
        for name, values in idents.items():
            cols[name] = pa.array(values, RECORD_SCHEMA.field(name).type).take(take)
        return pa.RecordBatch.from_arrays([cols[n] for n in schema.names], schema=schema)


def exchange_records(ex: Exchange) -> pa.Table | None:
    """The records of a Produce request or (Share)Fetch response (other exchanges: None) with the
    record columns of :data:`RECORD_SCHEMA` (no identity columns). A records field that does
    not decode is left out; a partial batch ending a Fetch response is not a record."""
    records = _Records()
    records.add(0, ex)
    got = records.columns()
    return None if got is None else pa.table([got[1][n] for n in _RECORD_COLUMNS],
                                             names=_RECORD_COLUMNS)


def record_batches(exchanges: Iterable[Exchange], file: str, *, batch_rows: int = 8192,
                   schema: pa.Schema = RECORD_SCHEMA) -> Iterator[pa.RecordBatch]:
    """One row per record of the Produce requests and (Share)Fetch responses among the exchanges
    of capture ``file``, with the exchange's identity columns (:data:`RECORD_SCHEMA`, or the
    subset ``schema`` names), about ``batch_rows`` per Arrow batch."""
    records = _Records()
    for index, ex in enumerate(exchanges):
        if ex.api_key != ApiKey.PRODUCE and ex.api_key not in _FETCHES:
            continue
        records.add(index, ex)
        if records.rows >= batch_rows:
            rb = records.batch(file, schema)
            if rb is not None:
                yield rb
            records = _Records()
    rb = records.batch(file, schema)
    if rb is not None:
        yield rb


def group_files(files: Sequence[tuple[str, int]], budget: int) -> list[list[str]]:
    """Consecutive files grouped into lists of at most ``budget`` bytes (a larger file is a
    group of its own): the tasks of a read."""
    groups: list[list[str]] = []
    size = 0
    for path, n in files:
        if groups and size + n <= budget:
            groups[-1].append(path)
            size += n
        else:
            groups.append([path])
            size = n
    return groups
