"""Internal-topic records decoded through the schemas equal the fixtures' .log.decoded.jsonl
(keys and values taken from the expected .log.jsonl, so this runs independently of the
segment reader; test_log.py checks the same through the reader)."""
from __future__ import annotations

import base64
import os

import pytest

from kproto.errors import DecodeError
from kproto.storage.internal import decode_internal_record, decode_metadata_frame
from kproto.problems import Problems

from storage_fixtures import expected_files, load_expected, same_as_kafka_json

DECODED = expected_files("*/*/*.log.decoded.jsonl")


def _b64(v):
    return None if v is None else base64.b64decode(v)


@pytest.mark.parametrize("rel", DECODED)
def test_decoded_matches_expected(rel):
    topic = os.path.basename(os.path.dirname(rel)).rsplit("-", 1)[0]
    lines = load_expected(rel.replace(".decoded", ""))
    batches = {b["index"]: b for b in lines if b["type"] == "batch"}
    records = [r for r in lines if r["type"] == "record"]
    want = load_expected(rel)
    assert len(records) == len(want)
    for r, w in zip(records, want):
        got = decode_internal_record(topic, r["offset"], _b64(r["key"]), _b64(r["value"]),
                                     batches[r["batch_index"]]["is_control"])
        assert got == w


@pytest.mark.parametrize("topic,key,value", [
    ("__consumer_offsets", b"\x00", b""),
    ("__consumer_offsets", b"\x7f\x00", None),
    ("__consumer_offsets", None, None),
    ("__consumer_offsets", b"\x00\x01\x00\x05ab", None),
    ("__transaction_state", b"\x00\x00\x00\x03abc", b"\x00\x09"),
    ("__cluster_metadata", None, None),
    ("__cluster_metadata", None, b"\x02\x0c\x00"),
    ("__cluster_metadata", None, b"\x01\x7f\x00"),
    ("__cluster_metadata", None, b"\x01\x0c\x63"),
    ("__cluster_metadata", None, b"\x01\x0c\x00\x05"),
    ("__cluster_metadata", None, b"\x01\x8c"),
])
def test_bad_internal_records_raise_decode_error(topic, key, value):
    with pytest.raises(DecodeError):
        decode_internal_record(topic, 0, key, value)


def test_not_internal():
    with pytest.raises(ValueError):
        decode_internal_record("orders", 0, b"", b"")
    with pytest.raises(DecodeError):
        decode_metadata_frame(b"")




def test_read_internal_typed_tables_match_expected():
    from kproto.storage.internal import read_internal

    from storage_fixtures import LOGDIRS

    damage = Problems()
    tables = read_internal(os.path.join(LOGDIRS, "broker1-clean"), problems=damage)
    assert not damage
    rows = {(r["topic"], r["offset"]): (name, r) for name, t in tables.items() for r in t.to_pylist()}
    expected = 0
    for rel in DECODED:
        topic = os.path.basename(os.path.dirname(rel)).rsplit("-", 1)[0]
        for w in load_expected(rel):
            if w["is_control"]:
                assert (topic, w["offset"]) not in rows
                continue
            expected += 1
            name, r = rows[(topic, w["offset"])]
            if topic == "__cluster_metadata":
                assert name.upper() == w["type"].replace("_", "")
                assert r["version"] == w["version"] and same_as_kafka_json(w["data"], r["record"])
            else:
                assert name + "Key" == w["key"]["type"] or name == "TransactionLog"
                assert r["key_version"] == w["key"]["version"] and same_as_kafka_json(w["key"]["data"], r["key"])
                if w["value"] is None:
                    assert r["value"] is None and r["value_version"] is None
                else:
                    assert r["value_version"] == w["value"]["version"]
                    assert same_as_kafka_json(w["value"]["data"], r["value"])
    assert expected == len(rows)


def test_mutated_internal_records_raise_only_decode_error():
    import random

    from kproto.storage.internal import decode_internal_typed

    rng = random.Random(3)
    samples = []
    for rel in DECODED:
        topic = os.path.basename(os.path.dirname(rel)).rsplit("-", 1)[0]
        for r in load_expected(rel.replace(".decoded", "")):
            if r["type"] == "record" and r["value"] is not None and r["key_size"] != 4:
                samples.append((topic, _b64(r["key"]), _b64(r["value"])))
    decoded = failed = 0
    for i in range(1500):
        topic, key, value = samples[i % len(samples)]
        target = bytearray(value if (i % 2 or key is None) else key)
        for _ in range(rng.randint(1, 3)):
            target[rng.randrange(len(target))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            del target[rng.randrange(len(target)):]
        k, v = (key, bytes(target)) if (i % 2 or key is None) else (bytes(target), value)
        try:
            decode_internal_record(topic, 0, k, v)
            decode_internal_typed(topic, k, v)
            decoded += 1
        except DecodeError:
            failed += 1
    assert decoded and failed
