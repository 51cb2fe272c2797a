"""Nullable struct fields carried as tagged fields: Kafka writes a null one as the tag, size 1 and
the byte 0 (a regular nullable struct's null is -1), and a present one as the byte 1 and the
struct. Checked on every such field of the schemas, in the C and Python decoders, and against
Apache Kafka's own bytes (4.3.1's and 4.4's) for ConsumerGroupMemberMetadataValue.ClassicMemberMetadata."""
from __future__ import annotations

import pytest

import kproto
from kproto.codecs import messages, schema
from protocol_support import VECTOR_SETS, good_vectors


def _tagged_nullable_structs():
    """(message, version, field path) of every tagged nullable struct field (or array of structs)
    at the top level."""
    out = []
    for name in messages():
        msg = schema(name)
        for f in msg.fields:
            if not f.is_struct_type or f.tag is None:
                continue
            for v in kproto.message(name).valid_versions:
                if v in f.tagged_range and v in f.nullable_range and v in msg.flexible_range:
                    out.append((name, v, f))
    return out


CASES = _tagged_nullable_structs()


def test_the_schemas_have_such_fields():
    names = {n for n, _, _ in CASES}
    assert "ConsumerGroupMemberMetadataValue" in names


def _decoders(name, version):
    compiled = kproto.message(name)._get(version)
    return [fn for fn in (compiled.decode_c, compiled.decode_py) if fn is not None]


@pytest.mark.parametrize("name,version,field", CASES,
                         ids=[f"{n}-v{v}-{f.name}" for n, v, f in CASES])
def test_null_and_present_tagged_struct(name, version, field):
    codec = kproto.message(name)
    obj = codec.cls()
    setattr(obj, field.attr, None)
    data = codec.encode(obj, version)
    tag = bytes([field.tag])
    # the message ends with its tagged fields: one field, this tag, 1 byte, the byte 0
    assert data.endswith(b"\x01" + tag + b"\x01\x00"), data.hex()
    for decode in _decoders(name, version):
        back, end = decode(data, 0)
        assert end == len(data) and getattr(back, field.attr) is None
    # a present (default-valued) struct: the byte 1, then the struct (an array: its elements)
    sub = codec.classes[field.element_type]()
    if field.is_array:
        sub = [sub]
    setattr(obj, field.attr, sub)
    assert codec.decode(codec.encode(obj, version), version) == obj
    if field.is_array:     # a null compact array is the length 0, tagged or not
        return
    # what a regular nullable struct uses for null (-1) is still read as null
    legacy = data[:-1] + b"\xff"
    for decode in _decoders(name, version):
        back, _ = decode(legacy, 0)
        assert getattr(back, field.attr) is None


def _kafka_vectors(name, kafka):
    return [d for d in good_vectors(kafka) if d["name"] == name]


@pytest.mark.parametrize("kafka", [k for k in sorted(VECTOR_SETS) if k != "3.9.1"])  # 3.9.1: messages only
def test_kafka_bytes_for_classic_member_metadata(kafka):
    codec = kproto.message("ConsumerGroupMemberMetadataValue")
    vecs = _kafka_vectors("ConsumerGroupMemberMetadataValue", kafka)
    nulls = [v for v in vecs if "classicMemberMetadata" in v["json"]
             and v["json"]["classicMemberMetadata"] is None]
    present = [v for v in vecs if v["json"].get("classicMemberMetadata")]
    assert nulls and present  # both forms are in Kafka's vectors
    for vec in nulls + present:
        version = vec["version"]
        data = bytes.fromhex(vec["hex"])
        assert codec.encode(codec.from_json(vec["json"], version), version) == data
        for decode in _decoders("ConsumerGroupMemberMetadataValue", version):
            obj, end = decode(data, 0)
            assert end == len(data)
            assert codec.to_json(obj, version) == vec["json"]
