"""murmur2 / default partition against Kafka's Java client, and the sticky partitioner's rules."""
from __future__ import annotations

import itertools

import pytest

from kproto.client import partitioner
from kproto.client.partitioner import (
    StickyPartitioner, murmur2, murmur2_batch, partition_for_key, partitions_for_keys, to_positive)

from _client_vectors import load_jsonl

MURMUR = load_jsonl("murmur2.jsonl.gz")


def test_vector_file_is_complete():
    assert len(MURMUR) == 5000
    assert {v["kind"] for v in MURMUR} == {"ascii", "utf8", "int32_be", "random"}


def test_every_murmur2_vector():
    bad = []
    for i, v in enumerate(MURMUR):
        key = bytes.fromhex(v["key_hex"])
        if "key_text" in v and v["key_text"] is not None:
            assert v["key_text"].encode("utf-8") == key
        h = murmur2(key)
        got = {"murmur2": h, "to_positive": to_positive(h),
               "partitions": {c: partition_for_key(key, int(c)) for c in v["partitions"]}}
        want = {k: v[k] for k in ("murmur2", "to_positive", "partitions")}
        if got != want:
            bad.append((i, got, want))
    assert not bad, f"{len(bad)} mismatches, first: {bad[:3]}"


@pytest.mark.parametrize("impl", ["python", "c"])
def test_both_murmur2_match_every_vector(impl):
    # the accelerator's murmur2 (the one partitioning uses when built) and the pure Python one
    if impl == "c" and partitioner._speedups is None:
        pytest.skip("the records accelerator is not built")
    fn = partitioner._murmur2_py if impl == "python" else partitioner._speedups.murmur2
    keys = [bytes.fromhex(v["key_hex"]) for v in MURMUR]
    assert [fn(k) for k in keys] == [v["murmur2"] for v in MURMUR]
    assert fn(bytearray(keys[7])) == fn(memoryview(keys[7])) == MURMUR[7]["murmur2"]
    with pytest.raises(TypeError):
        fn("text")


def test_batch_matches_every_vector():
    keys = [bytes.fromhex(v["key_hex"]) for v in MURMUR]
    assert murmur2_batch(keys).tolist() == [v["murmur2"] for v in MURMUR]
    for count in MURMUR[0]["partitions"]:
        got = partitions_for_keys(keys, int(count)).tolist()
        assert got == [v["partitions"][count] for v in MURMUR]
    assert murmur2_batch([]).tolist() == []
    with pytest.raises(ValueError):
        partitions_for_keys(keys, 0)


def test_to_positive_is_not_abs():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2 ** 31)) == 0
    assert to_positive(5) == 5


def test_murmur2_accepts_buffer_types():
    key = b"hello world!!"
    assert murmur2(bytearray(key)) == murmur2(memoryview(key)) == murmur2(key)


def test_partition_count_must_be_positive():
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)


def _counter(values):
    it = itertools.cycle(values)
    return lambda: next(it)


def test_sticky_switches_after_batch_size():
    sp = StickyPartitioner(100, random=_counter([7, 8, 9]))
    avail = [0, 1, 2, 3, 4]
    assert sp.partition(avail, 5) == 7 % 5
    sp.on_append(60, avail, 5)
    assert sp.partition(avail, 5) == 2          # 60 < 100: stay
    sp.on_append(40, avail, 5)                  # 100 reached: switch
    assert sp.partition(avail, 5) == 8 % 5
    sp.on_append(150, avail, 5, enable_switch=False)
    assert sp.partition(avail, 5) == 3          # switching disabled below 2x
    sp.on_append(50, avail, 5, enable_switch=False)
    assert sp.partition(avail, 5) == 9 % 5      # 2x batch size forces it


def test_sticky_uses_available_partitions_only():
    sp = StickyPartitioner(1, random=_counter([0, 1, 2, 3]))
    seen = []
    for _ in range(4):
        seen.append(sp.partition([2, 5], 6))
        sp.on_append(1, [2, 5], 6)
    assert seen == [2, 5, 2, 5]
    sp2 = StickyPartitioner(1, random=_counter([11]))
    assert sp2.partition([], 6) == 11 % 6       # no leader anywhere: any partition


def test_adaptive_weights_follow_queue_sizes():
    # queue sizes 0 3 1 -> CFT 4 5 8 (BuiltInPartitioner's own example)
    sp = StickyPartitioner(1, random=_counter(range(8)))
    sp.update_load_stats([0, 3, 1], [10, 11, 12])
    got = []
    for _ in range(8):
        got.append(sp.partition([10, 11, 12], 3))
        sp.on_append(1, [10, 11, 12], 3)
    assert got[:8] == [10, 10, 10, 10, 11, 12, 12, 12]


def test_adaptive_disabled_when_equal_or_tiny():
    sp = StickyPartitioner(1, random=_counter([5]))
    sp.update_load_stats([2, 2, 2], [0, 1, 2])
    assert sp.partition([0, 1, 2], 3) == 5 % 3
    sp.update_load_stats([4], [0])
    sp.update_load_stats([1, 2, 1], [0, 1, 2], length=0)
    sp.on_append(1, [0, 1, 2], 3)
    assert sp.current == 5 % 3


def test_adaptive_with_excluded_partitions():
    # all equal but one excluded by length: adaptive still applies to the remaining two
    sp = StickyPartitioner(1, random=_counter([0, 1]))
    sp.update_load_stats([1, 1, 1], [4, 5, 6], length=2)
    assert sp.partition([4, 5, 6], 3) == 4
    sp.on_append(1, [4, 5, 6], 3)
    assert sp.current == 5


def test_bad_batch_size():
    with pytest.raises(ValueError):
        StickyPartitioner(0)
