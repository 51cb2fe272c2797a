"""Property tests over every message and version: round trips, and decode never fails unclearly."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kproto
from protocol_support import all_message_versions, objects

PAIRS = list(all_message_versions())
_FAST = settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.mark.parametrize("name,version", PAIRS, ids=[f"{n}-v{v}" for n, v in PAIRS])
def test_encode_decode_round_trip(name, version):
    codec = kproto.message(name)

    @_FAST
    @given(objects(codec, version))
    def check(obj):
        data = codec.encode(obj, version)
        back = codec.decode(data, version)
        assert back == obj
        assert codec.encode(back, version) == data
        doc = codec.to_json(obj, version)   # JSON never carries unknown tagged fields
        assert codec.to_json(codec.from_json(doc, version), version) == doc

    check()


@pytest.mark.parametrize("name,version", PAIRS, ids=[f"{n}-v{v}" for n, v in PAIRS])
def test_decode_arbitrary_bytes_only_raises_decode_error(name, version):
    codec = kproto.message(name)

    @_FAST
    @given(st.binary(max_size=64))
    def check(data):
        try:
            obj = codec.decode(data, version)
        except kproto.DecodeError as exc:
            assert exc.what and exc.offset is not None
        else:
            # Kafka reads some bytes leniently (a bool byte other than 0/1, an over-long varint),
            # so re-encoding need not give the same bytes, but it must give the same message.
            assert codec.decode(codec.encode(obj, version), version) == obj

    check()


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=256))
def test_mutated_valid_messages(data):
    codec = kproto.request(3)
    for v in (0, 9, 12):
        try:
            codec.decode(data, v)
        except kproto.DecodeError:
            pass
