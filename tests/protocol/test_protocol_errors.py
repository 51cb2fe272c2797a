"""Bad input gets a DecodeError naming the message, field path and offset; bad values an EncodeError."""
from __future__ import annotations

import pytest

import kproto
from kproto.codecs import Uuid


def _metadata_request_v4(topics):
    codec = kproto.request(3)
    return codec, codec.encode(codec.cls(topics=[codec.cls.MetadataRequestTopic(name=t) for t in topics]), 4)


def test_truncated_string_reports_path_and_offset():
    codec, data = _metadata_request_v4(["alpha", "beta"])
    with pytest.raises(kproto.DecodeError) as info:
        codec.decode(data[:-3], 4)
    err = info.value
    assert err.what == "MetadataRequest v4"
    assert err.path == "topics[1].name"
    assert err.offset == 13   # after the 4-byte count, "alpha" (2+5) and beta's 2-byte length
    assert "MetadataRequest v4" in str(err) and "topics[1].name" in str(err)


def test_huge_array_count_does_not_allocate():
    codec = kproto.request(3)
    data = bytes.fromhex("7fffffff") + b"\x00\x01"   # 2^31-1 topics claimed, 3 bytes present
    with pytest.raises(kproto.DecodeError, match="array of 2147483647 elements"):
        codec.decode(data, 1)


def test_negative_length_on_non_nullable_field():
    codec = kproto.request(3)
    data = bytes.fromhex("00000001ffff")   # one topic whose (non-nullable) name has length -1
    with pytest.raises(kproto.DecodeError, match="non-nullable field Name"):
        codec.decode(data, 1)


def test_nullable_array_null_is_accepted():
    codec = kproto.request(3)
    assert codec.decode(bytes.fromhex("ffffffff01"), 4).topics is None


def test_invalid_utf8():
    codec = kproto.request(3)
    data = bytes.fromhex("000000010002c328")   # "\xc3\x28" is not UTF-8
    with pytest.raises(kproto.DecodeError) as info:
        codec.decode(data, 1)
    assert info.value.path == "topics[0].name" and info.value.offset == 6


def test_trailing_bytes():
    codec, data = _metadata_request_v4(["a"])
    with pytest.raises(kproto.DecodeError, match="1 trailing bytes") as info:
        codec.decode(data + b"\x00", 4)
    assert info.value.offset == len(data)


def test_varint_too_long():
    codec = kproto.request(18)   # ApiVersionsRequest v3 is flexible: compact strings
    with pytest.raises(kproto.DecodeError, match="varint"):
        codec.decode(b"\xff\xff\xff\xff\xff\xff", 3)


def test_unknown_tagged_fields_are_kept_and_written_back():
    codec = kproto.request(18)
    obj = codec.cls(client_software_name="kp", client_software_version="1",
                    _unknown_tagged_fields=[(7, b"\x01\x02"), (300, b"")])
    data = codec.encode(obj, 3)
    back = codec.decode(data, 3)
    assert back._unknown_tagged_fields == [(7, b"\x01\x02"), (300, b"")]
    assert codec.encode(back, 3) == data
    # a known tagged field and unknown ones are written in tag order
    meta = kproto.response(3)
    m = meta.cls(cluster_id="c", _unknown_tagged_fields=[(5, b"\x09")])
    raw = meta.encode(m, 12)
    assert meta.decode(raw, 12) == m


def test_unordered_and_repeated_unknown_tags_are_read_in_wire_order_and_written_sorted():
    # Kafka's generated readers take tagged fields in any order; its RawTaggedFieldWriter wants
    # them ascending, so kproto writes them sorted (stable: repeated tags keep their order)
    codec = kproto.response(26)  # EndTxnResponse v3: throttle, error code, tagged fields
    wire = bytes.fromhex("00000005" "0000" "03" "ff01" "01" "06" "29" "00" "06" "01" "aa")
    obj = codec.decode(wire, 3)
    assert obj._unknown_tagged_fields == [(255, b"\x06"), (41, b""), (6, b"\xaa")]
    again = codec.encode(obj, 3)
    assert again == bytes.fromhex("00000005" "0000" "03" "06" "01" "aa" "29" "00" "ff01" "01" "06")
    assert codec.decode(again, 3)._unknown_tagged_fields == [(6, b"\xaa"), (41, b""), (255, b"\x06")]


def test_unsupported_version_non_default_value():
    codec = kproto.request(3)
    obj = codec.cls(topics=[], allow_auto_topic_creation=False)   # AllowAutoTopicCreation is v4+
    with pytest.raises(kproto.UnsupportedVersionError, match="AllowAutoTopicCreation at version 3"):
        codec.encode(obj, 3)
    assert codec.encode(codec.cls(topics=[]), 3) == bytes.fromhex("00000000")


def test_ignorable_field_is_dropped_silently():
    codec = kproto.request(1)   # FetchRequest.MaxBytes (v3+) is ignorable
    obj = codec.cls(max_bytes=1234, topics=[])
    assert codec.decode(codec.encode(obj, 2), 2).max_bytes == 0x7FFFFFFF


def test_null_in_non_nullable_field_is_an_encode_error():
    codec = kproto.request(3)
    obj = codec.cls(topics=[codec.cls.MetadataRequestTopic(name=None)])
    with pytest.raises(kproto.EncodeError, match="topics\\[0\\].name"):
        codec.encode(obj, 4)   # name is nullable only from v10


def test_out_of_range_integer_is_an_encode_error():
    codec = kproto.request(0)
    with pytest.raises(kproto.EncodeError, match="acks"):
        codec.encode(codec.cls(acks=70000, timeout_ms=1, topic_data=[]), 3)


def test_unknown_version():
    with pytest.raises(kproto.UnsupportedVersionError):
        kproto.request(3).decode(b"", 99)


def test_message_objects_behave():
    cls = kproto.request(1).cls
    a = cls(max_wait_ms=5, topics=[cls.FetchTopic(topic="t")])
    b = cls(max_wait_ms=5, topics=[cls.FetchTopic(topic="t")])
    assert a == b and a is not b
    assert a.topics is not cls().topics                       # fresh mutable defaults
    assert cls().session_epoch == -1 and cls().max_bytes == 0x7FFFFFFF   # spec defaults
    assert "max_wait_ms=5" in repr(a) and repr(a).startswith("FetchRequest(")
    assert cls.__annotations__["max_wait_ms"] == "int"
    with pytest.raises(TypeError):
        cls(no_such_field=1)
    with pytest.raises(AttributeError):
        a.no_such_field = 1   # __slots__
    assert a.copy(max_wait_ms=6).max_wait_ms == 6


def test_uuid_type():
    u = Uuid("_____________________w")
    assert str(u) == "_____________________w" and len(u) == 16
    assert str(Uuid.ZERO) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert Uuid(u.uuid) == u


def test_uuid_text_is_urlsafe_base64_without_padding():
    import base64
    import os

    for raw in [bytes(16), b"\xff" * 16, bytes(range(16))] + [os.urandom(16) for _ in range(2000)]:
        u = Uuid(raw)
        assert str(u) == base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        assert Uuid(str(u)) == u


def test_large_decodes_leave_the_garbage_collector_as_they_found_it():
    import gc

    codec = kproto.request(3)
    big = codec.encode(codec.cls(topics=[codec.cls.MetadataRequestTopic(name="t" * 50)] * 200), 4)
    assert len(big) > 4096
    assert gc.isenabled()
    codec.decode(big, 4)
    assert gc.isenabled()
    with pytest.raises(kproto.DecodeError):
        codec.decode(big[:-1], 4)
    assert gc.isenabled()
    gc.disable()
    try:
        codec.decode(big, 4)
        assert not gc.isenabled()
    finally:
        gc.enable()
