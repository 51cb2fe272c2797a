"""The four assignors against the results of Kafka 3.9's Java assignors (every scenario)."""
from __future__ import annotations

from collections import Counter

import pytest

from kproto.client.assignors import (
    ASSIGNORS, Subscription, decode_sticky_user_data, encode_sticky_user_data, java_hash_order,
    java_string_hash)

from _client_vectors import load_jsonl

SCENARIOS = load_jsonl("assignors.jsonl.gz")
NAMES = ["range", "roundrobin", "sticky", "cooperative-sticky"]


def cluster_of(sc):
    return {t["topic"]: (t["replica_racks"] if t["replica_racks"] is not None else t["partitions"])
            for t in sc["topics"]}


def subscriptions_of(sc, assignor):
    subs = {}
    for m in sc["members"]:
        user_data = None
        if assignor == "sticky" and m["sticky_user_data"] is not None:
            user_data = bytes.fromhex(m["sticky_user_data"])
        subs[m["member_id"]] = Subscription(
            topics=list(m["topics"]), user_data=user_data,
            owned_partitions=[tuple(tp) for tp in m["owned_partitions"]],
            generation_id=m["generation"], rack_id=m["rack"], group_instance_id=m["group_instance_id"])
    return subs


def as_lists(result):
    return {m: sorted([list(tp) for tp in parts]) for m, parts in result.items()}


def test_vector_file_is_complete():
    assert len(SCENARIOS) == 300
    for sc in SCENARIOS:
        assert set(sc["assignments"]) == set(NAMES)


def test_java_string_hash():
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == (-2147483648) & 0xFFFFFFFF
    assert java_string_hash("\U0001f600") == (0xD83D * 31 + 0xDE00)


def test_java_hash_order():
    # "Aa" and "BB" collide (2112): same bucket, so insertion order decides
    assert java_hash_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert java_hash_order(["Aa", "BB"]) == ["Aa", "BB"]
    # "b" (98) lands after "a" (97) whatever the insertion order
    assert java_hash_order(["b", "a"]) == ["a", "b"]


def _structure_ok(name, sc, got, want):
    """For results Kafka itself gives in hash-map order: coverage, balance and stickiness."""
    universe = {(t["topic"], p) for t in sc["topics"] for p in range(t["partitions"])}
    owned = {m["member_id"]: {tuple(tp) for tp in m["owned_partitions"]} for m in sc["members"]}
    flat = [tuple(tp) for parts in got.values() for tp in parts]
    assert len(flat) == len(set(flat)), "a partition assigned twice"
    assert set(flat) <= universe
    if name == "sticky":
        assert Counter(map(tuple, (tp for p in want.values() for tp in p))) == Counter(flat)
    assert sorted(map(len, got.values())) == sorted(map(len, want.values())), "balance differs"
    kept = sum(len(owned[m] & {tuple(tp) for tp in got[m]}) for m in got)
    kept_kafka = sum(len(owned[m] & {tuple(tp) for tp in want[m]}) for m in want)
    assert kept == kept_kafka, "stickiness differs"


@pytest.mark.parametrize("name", NAMES)
def test_every_scenario(name):
    bad = []
    for sc in SCENARIOS:
        got = as_lists(ASSIGNORS[name](cluster_of(sc), subscriptions_of(sc, name)))
        want = sc["assignments"][name]
        if sc["insertion_order_stable"][name]:
            if got != want:
                bad.append(sc["scenario"])
        else:
            _structure_ok(name, sc, got, want)
    assert not bad, f"{len(bad)} scenarios differ from Kafka: {bad[:20]}"


def test_sticky_user_data_round_trip_and_vectors():
    n = 0
    for sc in SCENARIOS:
        for m in sc["members"]:
            if m["sticky_user_data"] is None:
                continue
            data = bytes.fromhex(m["sticky_user_data"])
            owned = [tuple(tp) for tp in m["owned_partitions"]]
            gen = -1 if m["generation"] is None else m["generation"]
            assert encode_sticky_user_data(owned, m["generation"]) == data
            assert decode_sticky_user_data(data) == (owned, gen)
            n += 1
    assert n > 100


def test_sticky_user_data_fallbacks():
    v1 = encode_sticky_user_data([("t", 1), ("t", 2)], 5)
    assert decode_sticky_user_data(v1[:-4]) == ([("t", 1), ("t", 2)], None)   # V0 layout
    assert decode_sticky_user_data(b"\x00\x00") == ([], -1)                    # unreadable
    assert decode_sticky_user_data(b"\xff\xff\xff\xff") == ([], -1)
    assert decode_sticky_user_data(None) == ([], None)
    assert decode_sticky_user_data(b"") == ([], None)


def test_assign_by_name():
    from kproto.client.assignors import assign

    subs = {"m1": Subscription(["t"]), "m2": Subscription(["t"])}
    assert assign("range", {"t": 3}, subs) == {"m1": [("t", 0), ("t", 1)], "m2": [("t", 2)]}
    with pytest.raises(ValueError):
        assign("nope", {"t": 3}, subs)


def test_cooperative_reads_generation_from_user_data_before_v2():
    # both claim t-0; without generation fields the assignor reads the claimant's generation from
    # the int32 user data (so b's 2 beats a's absent one; were it ignored, both would be -1 and
    # t-0 would be revoked from both). Kafka compares with the *subscription* generation of the
    # earlier claimant (absent before v2), hence a's claim counts as -1 whatever its user data.
    import struct

    from kproto.client.assignors import cooperative_sticky_assign

    def sub(gen):
        return Subscription(["t"], user_data=struct.pack(">i", gen), owned_partitions=[("t", 0)])

    got = cooperative_sticky_assign({"t": 2}, {"a": sub(1), "b": sub(2)})
    assert ("t", 0) in got["b"] and ("t", 0) not in got["a"]
    got = cooperative_sticky_assign({"t": 2}, {"a": sub(5), "b": sub(-1)})
    assert ("t", 0) not in got["a"] + got["b"]  # equal generations: revoked from both first
    # unreadable user data counts as generation -1
    got = cooperative_sticky_assign({"t": 2}, {"a": Subscription(["t"], b"\x01", [("t", 0)]), "b": sub(0)})
    assert ("t", 0) in got["b"]


def test_members_sorted_in_java_string_order():
    # U+FF5E is one UTF-16 unit (0xFF5E); U+1F600 is the pair 0xD83D 0xDE00, so Java sorts the
    # emoji id first although its code point is larger
    subs = {"c-\uff5e": Subscription(["t"]), "c-\U0001f600": Subscription(["t"])}
    got = ASSIGNORS["range"]({"t": 2}, subs)
    assert got == {"c-\U0001f600": [("t", 0)], "c-\uff5e": [("t", 1)]}
    got = ASSIGNORS["sticky"]({"t": 3}, subs)
    assert len(got["c-\U0001f600"]) == 2  # the constrained path fills members in Java order
