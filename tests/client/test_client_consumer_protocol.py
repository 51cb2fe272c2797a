"""Consumer-protocol bytes against Kafka's ConsumerProtocol (every member, every version)."""
from __future__ import annotations

import pytest

from kproto.client.assignors import Subscription, encode_sticky_user_data
from kproto.client.consumer_protocol import (
    Assignment, decode_assignment, decode_subscription, encode_assignment, encode_subscription)
from kproto.errors import DecodeError, EncodeError

from _client_vectors import load_jsonl

SCENARIOS = load_jsonl("assignors.jsonl.gz")
VERSIONS = ["0", "1", "2", "3"]


def _sub(m, user_data=None):
    return Subscription(topics=list(m["topics"]), user_data=user_data,
                        owned_partitions=[tuple(tp) for tp in m["owned_partitions"]],
                        generation_id=m["generation"], rack_id=m["rack"])


def _expected_decoded(m, v, user_data):
    """What Kafka's deserializer keeps of the subscription at version v."""
    return Subscription(topics=sorted(m["topics"]), user_data=user_data,
                        owned_partitions=sorted(tuple(tp) for tp in m["owned_partitions"]) if v >= 1 else [],
                        generation_id=m["generation"] if v >= 2 else None,
                        rack_id=(m["rack"] or None) if v >= 3 else None)


def test_every_subscription_vector():
    checked = 0
    for sc in SCENARIOS:
        for m in sc["members"]:
            sticky_ud = None if m["sticky_user_data"] is None else bytes.fromhex(m["sticky_user_data"])
            for key, ud in (("subscription", None), ("sticky_subscription", sticky_ud)):
                assert sorted(m[key]) == VERSIONS
                for v in VERSIONS:
                    want = bytes.fromhex(m[key][v])
                    assert encode_subscription(_sub(m, ud), int(v)) == want, (sc["scenario"], m["member_id"], key, v)
                    got, ver = decode_subscription(want)
                    assert ver == int(v)
                    assert got == _expected_decoded(m, int(v), ud)
                    checked += 1
    assert checked == sum(len(sc["members"]) for sc in SCENARIOS) * 8


def test_every_assignment_vector():
    checked = 0
    for sc in SCENARIOS:
        for name, per_member in sc["assignment_bytes"].items():
            for member, by_version in per_member.items():
                parts = [tuple(tp) for tp in sc["assignments"][name][member]]
                assert sorted(by_version) == VERSIONS
                for v in VERSIONS:
                    want = bytes.fromhex(by_version[v])
                    assert encode_assignment(parts, int(v)) == want
                    assert decode_assignment(want) == (Assignment(parts, None), int(v))
                    checked += 1
    assert checked == sum(len(sc["members"]) for sc in SCENARIOS) * 4 * 4


def test_newer_versions_read_as_latest_and_ignore_appended_fields():
    sub = Subscription(["b", "a"], b"ud", [("a", 1)], 7, "r1")
    v3 = encode_subscription(sub, 3)
    v9 = encode_subscription(sub, 9)
    assert v9 == v3
    future = b"\x00\x05" + v3[2:] + b"\x00\x00\x00\x2a"   # v5 with a field we do not know
    got, ver = decode_subscription(future)
    assert ver == 5 and got.topics == ["a", "b"] and got.rack_id == "r1" and got.user_data == b"ud"
    a = encode_assignment(Assignment([("t", 0), ("u", 1), ("t", 2)], b"x"), 1)
    assert decode_assignment(a)[0] == Assignment([("t", 0), ("t", 2), ("u", 1)], b"x")


def test_sticky_user_data_inside_subscription():
    ud = encode_sticky_user_data([("t", 3)], 4)
    got, _ = decode_subscription(encode_subscription(Subscription(["t"], ud), 0))
    assert got.user_data == ud


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff", b"\x00\x00\x00\x00\x00\x01",
                                  b"\x00\x03\x7f\xff\xff\xff", b"\x00\x01\x00\x00\x00\x01\x00\x05ab"])
def test_malformed(data):
    with pytest.raises(DecodeError):
        decode_subscription(data)
    with pytest.raises(DecodeError):
        decode_assignment(data)


def test_negative_version_rejected():
    with pytest.raises(EncodeError):
        encode_subscription(Subscription(["t"]), -1)
    with pytest.raises(EncodeError):
        encode_assignment([], -1)


_topic = __import__("hypothesis").strategies.text("abcxyz._-", min_size=1, max_size=6)


def test_round_trip_property():
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=200, deadline=None)
    @given(topics=st.lists(_topic, max_size=5, unique=True), user_data=st.none() | st.binary(max_size=20),
           owned=st.lists(st.tuples(_topic, st.integers(0, 2**31 - 1)), max_size=6, unique=True),
           gen=st.none() | st.integers(0, 2**31 - 1), rack=st.none() | _topic, version=st.integers(0, 3))
    def check(topics, user_data, owned, gen, rack, version):
        sub = Subscription(topics, user_data, owned, gen, rack)
        got, v = decode_subscription(encode_subscription(sub, version))
        assert v == version
        assert got == Subscription(sorted(topics), user_data, sorted(owned) if version >= 1 else [],
                                   gen if version >= 2 else None, rack if version >= 3 else None)
        a = Assignment(owned, user_data)
        back, _ = decode_assignment(encode_assignment(a, version))
        # grouped per topic in first-appearance order, order within a topic kept
        order = list(dict.fromkeys(t for t, _ in owned))
        assert back == Assignment(sorted(owned, key=lambda tp: order.index(tp[0])), user_data)

    check()
