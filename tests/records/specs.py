"""Builds the bytes a vector's ``.spec.json`` asks for with kproto's builders, following what
Kafka's ``MemoryRecordsBuilder`` / ``MemoryRecords.filterTo`` do with the same input."""
from __future__ import annotations

import base64

from kproto.records.builder import LegacyMessageBuilder, RecordBatchBuilder
from kproto.records.control import CONTROL_TYPE_IDS

_TS_TYPES = {"CreateTime": 0, "LogAppendTime": 1}


def _blob(rec: dict, name: str) -> bytes | None:
    if rec.get(name + "_b64") is not None:
        return base64.b64decode(rec[name + "_b64"])
    v = rec.get(name)
    return None if v is None else v.encode("utf-8")


def _headers(rec: dict) -> list[tuple[str, bytes | None]]:
    return [(h["key"], _blob(h, "value")) for h in rec.get("headers", [])]


def build_batch(spec: dict) -> bytes:
    magic = spec.get("magic", 2)
    comp = spec.get("compression", "none")
    level = spec.get("compression_level")
    ts_type = _TS_TYPES[spec.get("timestamp_type", "CreateTime")]
    if magic < 2:
        b = LegacyMessageBuilder(magic, compression=comp, compression_level=level,
                                 base_offset=spec.get("base_offset", 0), timestamp_type=ts_type,
                                 log_append_time=spec.get("log_append_time"))
        for r in spec["records"]:
            b.append(r["timestamp"], _blob(r, "key"), _blob(r, "value"), r.get("offset"))
        return b.build()
    control = spec.get("control")
    kw = dict(compression=comp, compression_level=level, base_offset=spec.get("base_offset", 0),
              timestamp_type=ts_type, log_append_time=spec.get("log_append_time"),
              partition_leader_epoch=spec.get("partition_leader_epoch", -1),
              producer_id=spec.get("producer_id", -1),
              producer_epoch=spec.get("producer_epoch", -1),
              base_sequence=spec.get("base_sequence", -1),
              transactional=spec.get("transactional", False),
              delete_horizon_ms=spec.get("delete_horizon_ms"))
    if control is not None:
        kw["control"] = True
        b = RecordBatchBuilder(**kw)
        if control["type"] in ("COMMIT", "ABORT"):
            b.transactional = True
            b.append_end_txn_marker(control["type"] == "COMMIT", control["coordinator_epoch"],
                                    control["timestamp"])
        else:
            import kproto
            codec = kproto.message("LeaderChangeMessage")
            msg = codec.from_json({"version": 0, "leaderId": control["leader_id"],
                                   "voters": [{"voterId": v} for v in control["voters"]],
                                   "grantingVoters": [{"voterId": v}
                                                     for v in control["granted_voters"]]}, 0)
            b.append_control(CONTROL_TYPE_IDS[control["type"]], codec.encode(msg, 0),
                             control["timestamp"])
        return b.build()
    b = RecordBatchBuilder(**kw)
    for r in spec["records"]:
        b.append(r["timestamp"], _blob(r, "key"), _blob(r, "value"), _headers(r), r.get("offset"))
    compact = spec.get("compact")
    if compact is None:
        return b.build()
    # MemoryRecords.filterTo: retained records rewritten under the original base offset,
    # last offset, producer fields and codec (default level); nothing retained -> empty header.
    keep = set(compact["keep_offsets"])
    full = b._records
    orig_max = max(r[1] for r in full)
    last = full[-1][0]
    b._records = [r for r in full if r[0] in keep]
    b.compression_level = None
    b.last_offset = last
    if not b._records:
        b.first_timestamp, b.max_timestamp = -1, orig_max
    return b.build()


def build_spec(spec: dict) -> bytes:
    """The whole file the spec describes, mutations applied."""
    parts = [bytearray(build_batch(s)) for s in spec["batches"]]
    for m in spec.get("mutations", []):
        part = parts[m["batch"]]
        at = m["at"] if m["at"] >= 0 else len(part) + m["at"]
        if m["op"] == "xor":
            part[at] ^= m["mask"]
        elif m["op"] == "truncate":
            del part[at:]
        else:
            raise ValueError(f"unknown mutation {m['op']}")
    return b"".join(bytes(p) for p in parts)
