"""Headers, size prefixes and header versions."""
from __future__ import annotations

import pytest

import kproto
from kproto.framing import FrameBuffer, decode_response_version, peek_request_header


def test_request_round_trip_with_size_prefix():
    h = kproto.RequestHeader(request_api_key=3, request_api_version=12, correlation_id=42, client_id="cli")
    body = kproto.request(3).cls(topics=None, allow_auto_topic_creation=False)
    frame = kproto.encode_request(h, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, obj = kproto.decode_request(frame)
    assert header == h and obj == body
    # header v2: api key, version, correlation id, int16 client id (never compact), tagged fields
    assert frame[4:4 + 14].hex() == "0003000c0000002a0003636c6900"
    header2, obj2 = kproto.decode_request(frame[4:], size_prefix=False)
    assert (header2, obj2) == (header, obj)
    assert peek_request_header(frame) == (3, 12, 42)


def test_header_versions():
    assert kproto.request_header_version(3, 8) == 1
    assert kproto.request_header_version(3, 9) == 2
    assert kproto.request_header_version(7, 0) == 0      # ControlledShutdown v0
    assert kproto.response_header_version(3, 9) == 1
    assert kproto.response_header_version(18, 3) == 0    # ApiVersions: always v0
    assert kproto.response_header_version(0, 8) == 0


def test_api_versions_response_uses_header_v0():
    codec = kproto.response(18)
    body = codec.cls(error_code=0, api_keys=[codec.cls.ApiVersion(api_key=0, min_version=0, max_version=11)])
    frame = kproto.encode_response(kproto.ResponseHeader(correlation_id=9), body, 18, 3)
    # correlation id directly followed by the body: no tagged-field byte of header v1
    assert frame[4:8] == (9).to_bytes(4, "big") and frame[8:10] == b"\x00\x00"
    header, obj = kproto.decode_response(frame, 18, 3)
    assert header.correlation_id == 9 and obj == body


@pytest.mark.parametrize("asked", [1, 3, 4])
def test_api_versions_response_falls_back_to_v0(asked):
    # a broker answers an ApiVersions version it does not know with a v0 body and error 35
    codec = kproto.response(18)
    body = codec.cls(error_code=35, api_keys=[codec.cls.ApiVersion(api_key=18, min_version=0,
                                                                    max_version=3)])
    frame = kproto.encode_response(kproto.ResponseHeader(correlation_id=5), body, 18, 0)
    with pytest.raises(kproto.DecodeError):
        codec.decode(frame[8:], asked)  # not a body of the version asked for
    header, obj = kproto.decode_response(frame, 18, asked)
    assert header.correlation_id == 5 and obj.error_code == 35
    assert [(k.api_key, k.max_version) for k in obj.api_keys] == [(18, 3)]
    assert decode_response_version(frame, 18, asked)[2] == 0  # says the body was read as v0
    newer = codec.valid_versions[-1] + 1  # a client newer than the schemas gets the same answer
    assert decode_response_version(frame, 18, newer)[1:] == (obj, 0)
    v3 = kproto.encode_response(kproto.ResponseHeader(correlation_id=5), obj, 18, 3)
    assert decode_response_version(v3, 18, 3)[1:] == (obj, 3)


def test_no_v0_fallback_for_other_apis_or_bad_bodies():
    with pytest.raises(kproto.DecodeError):  # neither a v3 nor a v0 body
        kproto.decode_response(bytes.fromhex("00000005" "0023" "ff"), 18, 3, size_prefix=False)
    meta_v0 = kproto.encode_response(kproto.ResponseHeader(correlation_id=1),
                                     kproto.response(3).cls(), 3, 0)
    with pytest.raises(kproto.DecodeError):
        kproto.decode_response(meta_v0, 3, 12)


def test_controlled_shutdown_v0_header_has_no_client_id():
    h = kproto.RequestHeader(request_api_key=7, request_api_version=0, correlation_id=1, client_id="x")
    frame = kproto.encode_request(h, kproto.request(7).cls(broker_id=5))
    assert frame == bytes.fromhex("0000000c" "0007" "0000" "00000001" "00000005")


def test_bad_frames():
    with pytest.raises(kproto.DecodeError, match="size prefix"):
        kproto.decode_request(b"\x00\x00\x00\x09\x00\x03")
    with pytest.raises(kproto.DecodeError, match="unknown API key"):
        kproto.decode_request(bytes.fromhex("0000000a" "7fff0000" "00000001" "0000"))
    with pytest.raises(kproto.DecodeError, match="no version"):
        kproto.decode_request(bytes.fromhex("0000000a" "00037fff" "00000001" "0000"))


def test_frame_buffer_cuts_a_stream():
    h = kproto.RequestHeader(request_api_key=18, request_api_version=0, correlation_id=1, client_id="a")
    f1 = kproto.encode_request(h, kproto.request(18).cls())
    h.correlation_id = 2
    f2 = kproto.encode_request(h, kproto.request(18).cls())
    stream = f1 + f2
    fb = FrameBuffer()
    got = []
    for i in range(0, len(stream), 3):
        fb.feed(stream[i:i + 3])
        got += list(fb.frames())
    assert got == [f1[4:], f2[4:]] and len(fb) == 0
    fb.feed(b"\xff\xff\xff\xff")
    with pytest.raises(kproto.DecodeError, match="frame size"):
        list(fb.frames())
