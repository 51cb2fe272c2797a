"""Records of Kafka's internal topics decoded through the schemas (never by hand):

* the coordinator topics, ``__consumer_offsets`` (the group-coordinator folder's records:
  offsets, classic groups, KIP-848 consumer groups, share groups, streams groups),
  ``__transaction_state`` (transaction-coordinator) and ``__share_group_state``
  (share-coordinator: ShareSnapshot, ShareUpdate): key and value each start with an int16; the
  key's is the record type (before Kafka 4.0 it was called the key's version, and it is reported
  as ``version``), the key itself is read at version 0, the value at its int16 version. A null
  value is a tombstone. Which record type is which message comes from the schemas'
  ``coordinator-key``/``coordinator-value`` records of that folder, so a release that adds
  record types needs no code here.
* ``__cluster_metadata`` (and KRaft snapshots): null key; the value is a KRaft frame
  ``uvarint frame_version (1), uvarint api_key, uvarint version`` followed by the metadata
  record, found by its type among the schemas' ``metadata`` records.

Output is Kafka's generated JSON form, as in the fixtures' ``.log.decoded.jsonl`` files.
"""
from __future__ import annotations

import re
import struct
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from kproto.errors import DecodeError
from kproto.problems import Problems

if TYPE_CHECKING:  # pyarrow is imported only by the Arrow helpers
    import pyarrow as pa

#: Coordinator topic -> the spec folder of its records (Kafka's code ties the two; the record
#: types within a folder come from the schemas).
COORDINATOR_TOPICS = {"__consumer_offsets": "group-coordinator",
                      "__transaction_state": "transaction-coordinator",
                      "__share_group_state": "share-coordinator"}
INTERNAL_TOPICS = (*COORDINATOR_TOPICS, "__cluster_metadata")
_VERSION = struct.Struct(">h")


@lru_cache(maxsize=None)
def record_types(source: str) -> dict[int, tuple[str, str]]:
    """Record type -> (key message, value message) of a coordinator spec folder
    (``"group-coordinator"``, ...), from the schemas."""
    from kproto.codecs import coordinator_record, messages, schema

    out = {}
    for name in messages("coordinator-key"):
        s = schema(name)
        if s.source == source and s.api_key is not None:
            key, value = coordinator_record(s.source, s.api_key)
            out[s.api_key] = (key.name, value.name)
    return out


def _record_names(topic: str, key: bytes | memoryview | None) -> tuple[int, tuple[str, str]]:
    """The record type of a coordinator topic's key and its (key, value) message names."""
    try:
        source = COORDINATOR_TOPICS[topic]
    except KeyError:
        raise ValueError(f"{topic!r} is not an internal topic with a schema") from None
    if key is None or len(key) < 2:
        raise DecodeError("missing key version", what=topic)
    (kv,) = _VERSION.unpack_from(key, 0)
    names = record_types(source).get(kv)
    if names is None:
        raise DecodeError(f"unknown key version {kv}", what=topic)
    return kv, names


def _versioned(data: bytes | memoryview, name: str, what: str) -> dict[str, Any]:
    from kproto.codecs import message

    if len(data) < 2:
        raise DecodeError("missing int16 version", what=what, offset=0)
    (version,) = _VERSION.unpack_from(data, 0)
    codec = message(name)
    at = 0 if codec.kind == "coordinator-key" else version   # a key's int16 is its record type
    if at not in codec.valid_versions:
        raise DecodeError(f"unknown {name} version {version}", what=what, offset=0)
    obj = codec.decode(memoryview(data)[2:], at)
    return {"version": version, "type": name, "data": codec.to_json(obj, at)}


def _key_value(key: bytes | memoryview | None, value: bytes | memoryview | None,
               key_name: str, value_name: str, what: str) -> dict[str, Any]:
    if key is None:
        raise DecodeError("null key", what=what)
    return {"key": _versioned(key, key_name, f"{what} key"),
            "value": None if value is None else _versioned(value, value_name, f"{what} value")}


def _type_name(name: str) -> str:
    """``FeatureLevelRecord`` -> ``FEATURE_LEVEL_RECORD`` (Kafka's MetadataRecordType names)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def read_metadata_frame(value: bytes | memoryview, what: str = "__cluster_metadata record"
                        ) -> tuple[int, int, Any, int]:
    """The KRaft frame of a ``__cluster_metadata`` value: ``(record type, version, codec,
    position of the record body)``; :class:`DecodeError` for an unknown frame, type or version."""
    from kproto.codecs import metadata_record
    from kproto.codecs.primitives import read_uvarint

    frame_version, pos = read_uvarint(value, 0)
    if frame_version != 1:
        raise DecodeError(f"unknown frame version {frame_version}", what=what, offset=0)
    api_key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    try:
        codec = metadata_record(api_key)
    except KeyError:
        raise DecodeError(f"unknown metadata record type {api_key}", what=what) from None
    if version not in codec.valid_versions:
        raise DecodeError(f"unknown {codec.name} version {version}", what=what)
    return api_key, version, codec, pos


def decode_metadata_frame(value: bytes | memoryview) -> dict[str, Any]:
    """A ``__cluster_metadata`` record value: frame fields and the record in JSON form."""
    api_key, version, codec, pos = read_metadata_frame(value)
    obj = codec.decode(memoryview(value)[pos:], version)
    return {"frame_version": 1, "api_key": api_key, "type": _type_name(codec.name),
            "version": version, "data": codec.to_json(obj, version)}


def decode_internal_record(topic: str, offset: int, key: bytes | memoryview | None,
                           value: bytes | memoryview | None, is_control: bool = False
                           ) -> dict[str, Any]:
    """One record of an internal topic in the ``.log.decoded.jsonl`` form. Control records
    (transaction markers, KRaft LeaderChange) carry only ``offset`` and ``is_control``."""
    out: dict[str, Any] = {"offset": offset, "is_control": is_control}
    if is_control:
        return out
    if topic == "__cluster_metadata":
        if value is None:
            raise DecodeError("null value", what=topic)
        out.update(decode_metadata_frame(value))
    else:
        _kv, names = _record_names(topic, key)
        out.update(_key_value(key, value, *names, topic))
    return out


# -- typed Arrow tables -----------------------------------------------------------------------

def _arrow_types():
    import pyarrow as pa

    return {"bool": pa.bool_(), "int8": pa.int8(), "int16": pa.int16(), "uint16": pa.uint16(),
            "int32": pa.int32(), "uint32": pa.uint32(), "int64": pa.int64(),
            "float64": pa.float64(), "string": pa.string(), "bytes": pa.binary(),
            "records": pa.binary(), "uuid": pa.string()}


def _struct_type(fields, structs):
    import pyarrow as pa

    prims = _arrow_types()

    def field_type(f):
        t = f.type
        inner = t[2:] if t.startswith("[]") else t
        if inner in prims:
            base = prims[inner]
        else:
            base = _struct_type(f.fields or structs[inner].fields, structs)
        return pa.list_(base) if t.startswith("[]") else base

    return pa.struct([pa.field(f.attr, field_type(f)) for f in fields])


@lru_cache(maxsize=None)
def arrow_type(name: str):
    """Arrow struct type of a schema'd message: every field of every version (snake_case
    names; uuids as Kafka's base64 strings), so one type holds all versions."""
    from kproto.codecs import schema

    s = schema(name)
    return _struct_type(s.fields, s.structs())


def _to_python(obj: Any, fields, structs, version: int) -> dict[str, Any]:
    prims = _arrow_types()
    out: dict[str, Any] = {}
    for f in fields:
        if version not in f.version_range:
            out[f.attr] = None
            continue
        v = getattr(obj, f.attr, None)
        inner = f.type[2:] if f.type.startswith("[]") else f.type
        if v is None or inner in ("bool", "int8", "int16", "uint16", "int32", "uint32", "int64",
                                  "float64", "string"):
            out[f.attr] = v
        elif inner == "uuid":
            out[f.attr] = [str(x) for x in v] if f.type.startswith("[]") else str(v)
        elif inner in prims:  # bytes, records
            out[f.attr] = [bytes(x) for x in v] if f.type.startswith("[]") else bytes(v)
        else:
            sub = f.fields or structs[inner].fields
            out[f.attr] = [_to_python(x, sub, structs, version) for x in v] \
                if f.type.startswith("[]") else _to_python(v, sub, structs, version)
    return out


def _typed(name: str, data: bytes | memoryview, version: int) -> dict[str, Any]:
    from kproto.codecs import message, schema

    s = schema(name)
    return _to_python(message(name).decode(data, version), s.fields, s.structs(), version)


def decode_internal_typed(topic: str, key: bytes | None, value: bytes | None
                          ) -> tuple[str, dict[str, Any]]:
    """``(table name, row)`` for one non-control record of an internal topic: the row holds
    ``key_version``/``key``/``value_version``/``value`` (null value: tombstone) for the
    coordinator topics, ``version``/``record`` for ``__cluster_metadata``."""
    if topic == "__cluster_metadata":
        from kproto.codecs import metadata_record
        from kproto.codecs.primitives import read_uvarint

        if value is None:
            raise DecodeError("null value", what=topic)
        frame, pos = read_uvarint(value, 0)
        api_key, pos = read_uvarint(value, pos)
        version, pos = read_uvarint(value, pos)
        if frame != 1:
            raise DecodeError(f"unknown frame version {frame}", what=topic)
        try:
            name = metadata_record(api_key).name
        except KeyError:
            raise DecodeError(f"unknown metadata record type {api_key}", what=topic) from None
        return name, {"version": version, "record": _typed(name, memoryview(value)[pos:], version)}
    kv, names = _record_names(topic, key)
    assert key is not None
    # the key's int16 is its record type; keys are read at version 0
    row: dict[str, Any] = {"key_version": kv, "key": _typed(names[0], memoryview(key)[2:], 0),
                           "value_version": None, "value": None}
    if value is not None:
        if len(value) < 2:
            raise DecodeError("missing value version", what=topic)
        (vv,) = _VERSION.unpack_from(value, 0)
        row["value_version"] = vv
        row["value"] = _typed(names[1], memoryview(value)[2:], vv)
    return table_name(names[0]), row


def table_name(key_name: str) -> str:
    """The table of a coordinator record: its key's name without ``Key``."""
    return key_name[:-3] if key_name.endswith("Key") else key_name


def read_internal(path: str, *, problems: Problems | None = None,
                  **options) -> dict[str, pa.Table]:
    """Every internal-topic record under ``path`` (log dir or partition folder), decoded through
    the schemas into one typed ``pyarrow.Table`` per record type: ``OffsetCommit``,
    ``GroupMetadata``, ``ConsumerGroupMetadata``, ``StreamsGroupTopology``, ``ShareSnapshot``,
    ``TransactionLog``, ``RegisterBrokerRecord``, ``PartitionChangeRecord``, ... (a coordinator
    record's table is named by its key without ``Key``). Each has ``topic``, ``partition``, ``offset``, ``timestamp`` and the decoded columns.
    Records that do not decode are reported in ``problems`` (kind ``record``) and left out."""
    import pyarrow as pa

    from kproto.storage.reader import iter_arrow

    rows: dict[str, list[dict[str, Any]]] = {}
    messages: dict[str, tuple[str, str]] = {}  # coordinator table -> (key, value) message
    for rb in iter_arrow(path, topics=INTERNAL_TOPICS, problems=problems, **options):
        cols = {c: rb.column(c).to_pylist() for c in ("topic", "partition", "offset",
                                                      "timestamp", "key", "value", "segment",
                                                      "position")}
        for i in range(rb.num_rows):
            topic = cols["topic"][i]
            try:
                name, row = decode_internal_typed(topic, cols["key"][i], cols["value"][i])
            except DecodeError as exc:
                if problems is not None:
                    problems.report("record", f"offset {cols['offset'][i]}: {exc}",
                                    source=cols["segment"][i], position=cols["position"][i],
                                    topic=topic, partition=cols["partition"][i])
                continue
            if topic in COORDINATOR_TOPICS and name not in messages:
                messages[name] = record_types(COORDINATOR_TOPICS[topic])[row["key_version"]]
            rows.setdefault(name, []).append({"topic": topic, "partition": cols["partition"][i],
                                              "offset": cols["offset"][i],
                                              "timestamp": cols["timestamp"][i], **row})
    out = {}
    for name, rs in sorted(rows.items()):
        head = [pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
                pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("ms", "UTC"))]
        if "record" in rs[0]:
            fields = head + [pa.field("version", pa.int16()), pa.field("record", arrow_type(name))]
        else:
            key_name, value_name = messages[name]
            fields = head + [pa.field("key_version", pa.int16()),
                             pa.field("key", arrow_type(key_name)),
                             pa.field("value_version", pa.int16()),
                             pa.field("value", arrow_type(value_name))]
        out[name] = pa.Table.from_pylist(rs, schema=pa.schema(fields))
    return out


# -- one table for every record type (the Spark source's decode=internal) ----------------------

def internal_arrow_schema() -> pa.Schema:
    """Columns of :func:`decode_internal_batch`: the record's place (``topic``, ``partition``,
    ``offset``, ``timestamp``, ``is_control``), its ``record_type`` (the table name of
    :func:`read_internal`: ``OffsetCommit``, ``GroupMetadata``, ``TransactionLog``,
    ``PartitionChangeRecord``, ...), ``key_version`` (a coordinator key's record type),
    ``value_version`` (a value's or metadata record's version), ``key``/``value`` in Kafka's
    JSON form as text (a metadata record is its ``value``; a tombstone's is null), the facts
    most asked for as typed columns (``group_id``, ``member_id``; an offset commit's
    ``committed_*``, ``commit_metadata``, ``commit_timestamp``, ``expire_timestamp``; a
    transaction's ``transactional_id``, ``producer_id``, ``producer_epoch``,
    ``transaction_status``; a ``__cluster_metadata`` record's ``broker_id``, ``broker_epoch``,
    ``fenced``, ``rack``, ``topic_id`` (Kafka's base64 form), ``topic_name``, ``partition_id``,
    ``leader``, ``leader_epoch``, ``partition_epoch``, ``replicas``, ``isr``, and a config's
    ``config_resource_type``/``config_resource_name``/``config_name``/``config_value``; a
    PartitionChangeRecord's leader, replicas and ISR are null where they did not change), and
    ``decode_error`` for a record that does not decode (its other decoded columns null)."""
    import pyarrow as pa

    ms = pa.timestamp("ms", tz="UTC")
    return pa.schema([
        pa.field("topic", pa.string(), False), pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.int64(), False), pa.field("timestamp", ms, False),
        pa.field("is_control", pa.bool_(), False), pa.field("record_type", pa.string()),
        pa.field("key_version", pa.int16()), pa.field("value_version", pa.int16()),
        pa.field("key", pa.string()), pa.field("value", pa.string()),
        pa.field("group_id", pa.string()), pa.field("member_id", pa.string()),
        pa.field("committed_topic", pa.string()), pa.field("committed_partition", pa.int32()),
        pa.field("committed_offset", pa.int64()), pa.field("committed_leader_epoch", pa.int32()),
        pa.field("commit_metadata", pa.string()), pa.field("commit_timestamp", ms),
        pa.field("expire_timestamp", ms), pa.field("transactional_id", pa.string()),
        pa.field("producer_id", pa.int64()), pa.field("producer_epoch", pa.int16()),
        pa.field("transaction_status", pa.int8()),
        # __cluster_metadata: brokers, topics, partitions and configs over time
        pa.field("broker_id", pa.int32()), pa.field("broker_epoch", pa.int64()),
        pa.field("fenced", pa.bool_()), pa.field("rack", pa.string()),
        pa.field("topic_id", pa.string()), pa.field("topic_name", pa.string()),
        pa.field("partition_id", pa.int32()), pa.field("leader", pa.int32()),
        pa.field("leader_epoch", pa.int32()), pa.field("partition_epoch", pa.int32()),
        pa.field("replicas", pa.list_(pa.int32())), pa.field("isr", pa.list_(pa.int32())),
        pa.field("config_resource_type", pa.int8()), pa.field("config_resource_name", pa.string()),
        pa.field("config_name", pa.string()), pa.field("config_value", pa.string()),
        pa.field("decode_error", pa.string()),
    ])


# typed column -> the field of the key (k) or value (v) JSON it comes from, per record type
_OFFSET_COMMIT = {"group_id": ("k", "group"), "committed_topic": ("k", "topic"),
                  "committed_partition": ("k", "partition"), "committed_offset": ("v", "offset"),
                  "committed_leader_epoch": ("v", "leaderEpoch"),
                  "commit_metadata": ("v", "metadata"),
                  "commit_timestamp": ("v", "commitTimestamp"),
                  "expire_timestamp": ("v", "expireTimestamp")}
_TYPED = {"OffsetCommit": _OFFSET_COMMIT, "LegacyOffsetCommit": _OFFSET_COMMIT,
          "GroupMetadata": {"group_id": ("k", "group")},
          "TransactionLog": {"transactional_id": ("k", "transactionalId"),
                             "producer_id": ("v", "producerId"),
                             "producer_epoch": ("v", "producerEpoch"),
                             "transaction_status": ("v", "transactionStatus")}}
# any other coordinator key naming these (KIP-848 consumer, share and streams groups)
_ANY_KEY = {"group_id": "groupId", "member_id": "memberId"}
# __cluster_metadata: typed column -> the field of the record it comes from, per record type
_BROKER = {"broker_id": "brokerId", "broker_epoch": "brokerEpoch"}
_PARTITION = {"topic_id": "topicId", "partition_id": "partitionId", "leader": "leader",
              "replicas": "replicas", "isr": "isr"}
_METADATA_TYPED = {
    "RegisterBrokerRecord": {**_BROKER, "fenced": "fenced", "rack": "rack"},
    "BrokerRegistrationChangeRecord": {**_BROKER, "fenced": "fenced"},
    "UnregisterBrokerRecord": _BROKER,
    "FenceBrokerRecord": {"broker_id": "id", "broker_epoch": "epoch"},
    "UnfenceBrokerRecord": {"broker_id": "id", "broker_epoch": "epoch"},
    "ProducerIdsRecord": _BROKER,
    "TopicRecord": {"topic_name": "name", "topic_id": "topicId"},
    "RemoveTopicRecord": {"topic_id": "topicId"},
    "PartitionRecord": {**_PARTITION, "leader_epoch": "leaderEpoch", "partition_epoch": "partitionEpoch"},
    "PartitionChangeRecord": _PARTITION,
    "ConfigRecord": {"config_resource_type": "resourceType", "config_resource_name": "resourceName",
                     "config_name": "name", "config_value": "value"},
}


def _metadata_row(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """The typed columns of a ``__cluster_metadata`` record of type ``name``."""
    row = {col: data.get(field) for col, field in _METADATA_TYPED.get(name, {}).items()}
    if name == "BrokerRegistrationChangeRecord":   # an int8: 1 fenced, -1 unfenced, 0 unchanged
        row["fenced"] = {1: True, -1: False}.get(data.get("fenced", 0))
    elif name in ("FenceBrokerRecord", "UnfenceBrokerRecord"):   # before BrokerRegistrationChange
        row["fenced"] = name == "FenceBrokerRecord"
    elif name == "PartitionChangeRecord" and row.get("leader") == -2:   # Kafka's "no change"
        row["leader"] = None
    return row


def _internal_row(topic: str, offset: int, key: bytes | None, value: bytes | None,
                  is_control: bool) -> dict[str, Any]:
    """The decoded columns of one record (see :func:`internal_arrow_schema`)."""
    import json

    from kproto.codecs import metadata_record

    if is_control:
        return {}
    try:
        doc = decode_internal_record(topic, offset, key, value)
    except DecodeError as exc:
        return {"decode_error": str(exc)}
    if topic == "__cluster_metadata":
        name = metadata_record(doc["api_key"]).name
        return {"record_type": name, "value_version": doc["version"],
                "value": json.dumps(doc["data"], ensure_ascii=False),
                **_metadata_row(name, doc["data"])}
    k, v = doc["key"], doc["value"]
    name = table_name(k["type"])
    kd, vd = k["data"], (v or {}).get("data") or {}
    row: dict[str, Any] = {"record_type": name, "key_version": k["version"],
                           "value_version": None if v is None else v["version"],
                           "key": json.dumps(kd, ensure_ascii=False),
                           "value": None if v is None else json.dumps(vd, ensure_ascii=False)}
    for col, field in _ANY_KEY.items():
        if field in kd:
            row[col] = kd[field]
    for col, (side, field) in _TYPED.get(name, {}).items():
        row[col] = (kd if side == "k" else vd).get(field)
    for col in ("commit_timestamp", "expire_timestamp"):
        if row.get(col) == -1:  # Kafka's "not set"
            row[col] = None
    return row


def decode_internal_batch(rb: pa.RecordBatch) -> pa.RecordBatch:
    """Records of internal topics (an Arrow batch with the columns of
    :func:`kproto.storage.arrow_schema`) decoded into one row each with the columns of
    :func:`internal_arrow_schema` (sans-I/O; what the Spark source's ``decode=internal``
    returns)."""
    import pyarrow as pa

    cols = {c: rb.column(c).to_pylist() for c in ("topic", "offset", "key", "value",
                                                  "is_control")}
    rows = [_internal_row(cols["topic"][i], cols["offset"][i], cols["key"][i],
                          cols["value"][i], cols["is_control"][i]) for i in range(rb.num_rows)]
    schema = internal_arrow_schema()
    arrays = []
    for f in schema:
        if f.name in ("topic", "partition", "offset", "timestamp", "is_control"):
            arrays.append(rb.column(f.name).cast(f.type))
        else:
            arrays.append(pa.array([r.get(f.name) for r in rows], f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
