"""Decoded traffic as Arrow tables: one row per exchange (the ``decode-pcap --format jsonl``
line, typed), or one row per record of the Produce requests and Fetch responses.

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
import json
import os
from dataclasses import replace
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from kproto.capture.exchange import Exchange, _iso, exchange_to_json
from kproto.capture.pcap import Packet, _damage, iter_packets, read_packets
from kproto.errors import DecodeError
from kproto.problems import Problem
from kproto.schemas.api_keys import ApiKey
from kproto.storage import fs

__all__ = ["EXCHANGE_SCHEMA", "RECORD_SCHEMA", "capture_files", "capture_packets",
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

#: one row per record of a Produce request or Fetch response (control batches left out);
#: ``offset`` of a produced record comes from the response's base offset (null without one)
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


def capture_packets(path: str) -> Iterator[Packet | Problem]:
    """The packets of a capture file: :func:`~kproto.capture.pcap.read_packets` of a local
    one, the same of a URI's bytes (one ranged read: a capture is decoded from its start)."""
    if not fs.is_remote(path):
        return read_packets(path)
    return _packets_of(fs.read_range(path), path)


def _packets_of(data: bytes, source: str) -> Iterator[Packet | Problem]:
    if not data:
        yield replace(_damage("empty file", 0, 0), source=source)
        return
    for item in iter_packets(data):
        yield replace(item, source=source) if isinstance(item, Problem) else item


def _ts(text: str | None) -> _dt.datetime | None:
    """The JSON line's time back as a datetime (None for a damaged header's raw seconds)."""
    if text is None or not text.endswith("Z"):
        return None
    return _dt.datetime.fromisoformat(text)


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _identity(file: str, index: int, doc: dict) -> dict:
    return {"file": file, "index": index, "ts": _ts(doc["ts"]), "client": doc["client"],
            "broker": doc["broker"], "api_key": doc["api_key"], "api_name": doc["api_name"],
            "api_version": doc["api_version"], "correlation_id": doc["correlation_id"],
            "client_id": doc["client_id"]}


def _identity_of(file: str, index: int, ex: Exchange) -> dict:
    """:func:`_identity` without the bodies' JSON (as :func:`exchange_to_json` gives them)."""
    return {"file": file, "index": index, "ts": _ts(_iso(ex.ts)), "client": str(ex.client),
            "broker": str(ex.broker), "api_key": ex.api_key, "api_name": ex.api_name,
            "api_version": ex.api_version, "correlation_id": ex.correlation_id,
            "client_id": ex.client_id}


def exchange_batches(exchanges: Iterable[Exchange], file: str, *, batch_rows: int = 4096,
                     schema: pa.Schema = EXCHANGE_SCHEMA) -> Iterator[pa.RecordBatch]:
    """The exchanges of capture ``file`` as rows of :data:`EXCHANGE_SCHEMA` (or the subset
    ``schema`` names), ``batch_rows`` per Arrow batch."""
    rows: list[dict] = []
    for index, ex in enumerate(exchanges):
        doc = exchange_to_json(ex)
        row = _identity(file, index, doc)
        for name in ("kind", "decoded_as", "latency_ms", "request_bytes", "response_bytes",
                     "errors", "problems", "notes"):
            row[name] = doc[name]
        for name in _JSON_TEXT:
            row[name] = _json_text(doc.get(name))
        rows.append(row)
        if len(rows) >= batch_rows:
            yield pa.RecordBatch.from_pylist(rows, schema=schema)
            rows = []
    if rows:
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


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
    of each partition with records in a Produce request or Fetch response."""
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
    elif ex.api_key == ApiKey.FETCH and ex.response is not None:
        for t in ex.response.responses:
            topic = _topic(t, ex.topic_names)
            for p in t.partitions:
                yield *topic, p.partition_index, p.error_code, p.records, None, -1


def exchange_records(ex: Exchange) -> pa.Table | None:
    """The records of a Produce request or Fetch response (other exchanges: None) with the
    record columns of :data:`RECORD_SCHEMA` (no identity columns). A records field that does
    not decode is left out; a partial batch ending a Fetch response is not a record."""
    from kproto.records.batch import RecordBatch
    from kproto.records.columns import decode_arrow
    from kproto.records.reader import iter_batches

    parts = []
    for name, tid, partition, error, data, base, append_time in _partition_records(ex):
        if not data:
            continue
        try:
            batches = [b for b in iter_batches(data)
                       if not (isinstance(b, RecordBatch) and b.is_control)]
            recs = decode_arrow(batches) if batches else None
        except (DecodeError, OverflowError):
            continue
        if recs is None or not len(recs):
            continue
        n, counts = len(recs), recs.counts
        nb = len(batches)

        def per_batch(attr: str, default: int, dtype: Any) -> pa.Array:
            return pa.array(np.repeat(np.fromiter(
                (getattr(b, attr, default) for b in batches), dtype, nb), counts))

        attrs = np.repeat(np.fromiter((b.attributes for b in batches), np.int64, nb), counts)
        magic = np.repeat(np.fromiter((b.magic for b in batches), np.int64, nb), counts)
        ts_type = np.where(magic == 0, -1, (attrs & 0x08) >> 3).astype(np.int8)
        timestamp = recs.timestamp
        if append_time >= 0:  # the broker stamped them: the log holds its time
            timestamp, ts_type = np.full(n, append_time, np.int64), np.ones(n, np.int8)
        # a produced record's offset is the broker's base offset plus its place in the request
        offset = pa.array(base + np.arange(n, dtype=np.int64)) if base is not None else (
            pa.nulls(n, pa.int64()) if ex.api_key == ApiKey.PRODUCE else pa.array(recs.offset))
        parts.append(pa.table({
            "topic": pa.array([name] * n, pa.string()),
            "topic_id": pa.array([tid] * n, pa.string()),
            "partition": pa.array(np.full(n, partition, np.int32)),
            "offset": offset,
            "timestamp": pa.array(timestamp).view(pa.timestamp("ms", tz="UTC")),
            "timestamp_type": pa.array(ts_type),
            "key": recs.key, "value": recs.value, "headers": recs.headers,
            "leader_epoch": per_batch("partition_leader_epoch", -1, np.int32),
            "producer_id": per_batch("producer_id", -1, np.int64),
            "producer_epoch": per_batch("producer_epoch", -1, np.int16),
            "is_transactional": pa.array((attrs & 0x10) != 0),
            "error_code": pa.array(np.full(n, error, np.int16)),
        }))
    return pa.concat_tables(parts) if parts else None


def record_batches(exchanges: Iterable[Exchange], file: str, *, batch_rows: int = 8192,
                   schema: pa.Schema = RECORD_SCHEMA) -> Iterator[pa.RecordBatch]:
    """One row per record of the Produce requests and Fetch responses among the exchanges
    of capture ``file``, with the exchange's identity columns (:data:`RECORD_SCHEMA`, or the
    subset ``schema`` names), about ``batch_rows`` per Arrow batch."""
    idents: list[dict] = []
    parts: list[pa.Table] = []
    rows = 0
    for index, ex in enumerate(exchanges):
        if ex.api_key not in (ApiKey.PRODUCE, ApiKey.FETCH):
            continue
        records = exchange_records(ex)
        if records is None:
            continue
        idents.append(_identity_of(file, index, ex))
        parts.append(records)
        rows += records.num_rows
        if rows >= batch_rows:
            yield from _with_identity(idents, parts, schema)
            idents, parts, rows = [], [], 0
    if parts:
        yield from _with_identity(idents, parts, schema)


_IDENTITY_SCHEMA = pa.schema(_IDENTITY)


def _with_identity(idents: list[dict], parts: list[pa.Table],
                   schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The records of ``parts`` beside the identity of the exchange each came from (one
    assembly for many exchanges: Arrow calls cost more than small exchanges hold)."""
    owner = np.repeat(np.arange(len(parts)), [p.num_rows for p in parts])
    ident = pa.Table.from_pylist(idents, schema=_IDENTITY_SCHEMA).take(pa.array(owner))
    records = pa.concat_tables(parts)
    cols = [ident.column(n) if n in _IDENTITY_SCHEMA.names else records.column(n)
            for n in schema.names]
    yield from pa.table(cols, names=schema.names).cast(schema).to_batches()


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
