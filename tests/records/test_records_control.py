"""Control records: transaction markers by fixed layout, KRaft records through the codecs."""
from __future__ import annotations

import pytest

import kproto
from kproto.records import RecordBatchBuilder, decode_control, iter_batches
from kproto.records.control import CONTROL_TYPE_IDS
from kproto.records.dump import dump_lines


def _control_batch(type_name: str, msg) -> bytes:
    codec = kproto.message(type(msg).__name__)
    b = RecordBatchBuilder(control=True, base_offset=3)
    b.append_control(CONTROL_TYPE_IDS[type_name], codec.encode(msg, 0), 1234)
    return b.build()


@pytest.mark.parametrize("type_name,schema,kwargs", [
    ("SNAPSHOT_HEADER", "SnapshotHeaderRecord", {"last_contained_log_timestamp": 99}),
    ("SNAPSHOT_FOOTER", "SnapshotFooterRecord", {}),
    ("KRAFT_VERSION", "KRaftVersionRecord", {"kraft_version": 1}),
])
def test_kraft_control_records(type_name, schema, kwargs):
    msg = kproto.message(schema).cls(**kwargs)
    data = _control_batch(type_name, msg)
    batch = next(iter_batches(data))
    assert batch.is_control
    (rec,) = batch.records()
    c = decode_control(rec.key, rec.value)
    assert (c.type, c.type_id, c.value_version) == (type_name, CONTROL_TYPE_IDS[type_name], 0)
    assert c.message == msg
    line = list(dump_lines(data))[1]
    assert line["control"]["type"] == type_name


def test_transaction_markers():
    for commit in (True, False):
        b = RecordBatchBuilder(control=True, transactional=True, producer_id=9, producer_epoch=1)
        b.append_end_txn_marker(commit, coordinator_epoch=42, timestamp=5)
        (rec,) = next(iter_batches(b.build())).records()
        c = decode_control(rec.key, rec.value)
        assert (c.type, c.coordinator_epoch) == ("COMMIT" if commit else "ABORT", 42)


def test_bad_control_keys():
    with pytest.raises(kproto.DecodeError):
        decode_control(b"\0", b"")
    with pytest.raises(kproto.DecodeError):
        decode_control(b"\0\0\0\1", b"\0\0\0")
    assert decode_control(b"\0\0\0\x63", b"\0\0").type == "UNKNOWN"
