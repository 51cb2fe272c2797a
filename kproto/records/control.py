"""Control records (records of a batch with the control attribute bit set).

The key is ``version int16 | type int16``; the value starts with its own ``version int16``.
COMMIT/ABORT values are ``coordinator_epoch int32`` (``EndTransactionMarker``), a fixed layout;
the KRaft ones are protocol messages decoded with :func:`kproto.message`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from kproto.errors import DecodeError

__all__ = ["ControlRecord", "CONTROL_TYPES", "decode_control", "encode_control_key",
           "encode_end_txn_marker", "check_control_keys"]

_I16 = struct.Struct(">h")
_KEY = struct.Struct(">hh")
_END_TXN = struct.Struct(">hi")

# ControlRecordType ids -> (name, schema of the value message or None for fixed layouts)
CONTROL_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("ABORT", None),
    1: ("COMMIT", None),
    2: ("LEADER_CHANGE", "LeaderChangeMessage"),
    3: ("SNAPSHOT_HEADER", "SnapshotHeaderRecord"),
    4: ("SNAPSHOT_FOOTER", "SnapshotFooterRecord"),
    5: ("KRAFT_VERSION", "KRaftVersionRecord"),
    6: ("KRAFT_VOTERS", "VotersRecord"),
}
CONTROL_TYPE_IDS = {name: tid for tid, (name, _) in CONTROL_TYPES.items()}


@dataclass
class ControlRecord:
    """A decoded control record; ``message`` is the decoded value message for KRaft types."""

    type: str
    type_id: int
    key_version: int
    value_version: int | None
    coordinator_epoch: int | None = None
    message: Any = None
    fields: dict = field(default_factory=dict)


def decode_control(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Decode the key and value of a control record."""
    if key is None or len(key) < 4:
        raise DecodeError("control record key must hold version and type (4 bytes)",
                          what="ControlRecord")
    key_version, type_id = _KEY.unpack_from(key, 0)
    name, schema = CONTROL_TYPES.get(type_id, ("UNKNOWN", None))
    if value is None or len(value) < 2:
        return ControlRecord(name, type_id, key_version, None)
    value_version = _I16.unpack_from(value, 0)[0]
    rec = ControlRecord(name, type_id, key_version, value_version)
    if type_id in (0, 1):
        if len(value) < 6:
            raise DecodeError("end transaction marker value is shorter than 6 bytes",
                              what="ControlRecord")
        rec.coordinator_epoch = _END_TXN.unpack_from(value, 0)[1]
    elif schema is not None:
        from kproto.codecs import message
        codec = message(schema)
        # The value's leading int16 is the message's own Version field, decoded with it.
        version = value_version if value_version in codec.valid_versions \
            else codec.valid_versions[-1]
        rec.message = codec.decode(value, version)
        if type_id == 2:
            rec.fields = {
                "leader_id": rec.message.leader_id,
                "voters": [v.voter_id for v in rec.message.voters],
                "granted_voters": [v.voter_id for v in rec.message.granting_voters],
            }
        else:
            rec.fields = codec.to_json(rec.message, value_version)
    return rec


def encode_control_key(type_id: int, version: int = 0) -> bytes:
    return _KEY.pack(version, type_id)


def encode_end_txn_marker(coordinator_epoch: int, version: int = 0) -> bytes:
    """Value of a COMMIT/ABORT control record."""
    return _END_TXN.pack(version, coordinator_epoch)


def check_control_keys(keys: list[bytes | None]) -> None:
    """Raise :class:`DecodeError` unless every key is a control record's key as Kafka's
    ``ControlRecordType.parse`` accepts it (at least version and type, a version not below 0;
    an unknown type is accepted, as Kafka skips it). Kafka's read_committed consumer parses
    a control batch's first key, its read_uncommitted one none: every key is checked here, so
    that a data batch whose control bit was set by damage is reported, not skipped unseen."""
    for i, key in enumerate(keys):
        if key is None or len(key) < 4:
            raise DecodeError(f"record {i} of a control batch has no control key (version and "
                              "type: 4 bytes)", what="ControlRecord")
        if _I16.unpack_from(key, 0)[0] < 0:
            raise DecodeError(f"record {i} of a control batch has a negative control key "
                              "version", what="ControlRecord")
