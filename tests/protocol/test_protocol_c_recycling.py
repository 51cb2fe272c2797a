"""What the C decoder keeps between messages: freed lists, ints and byte views recycled, empty arrays
left to their LazyDefault, short strings and UUIDs shared. Each is invisible to users: values
kept by the user survive, recycled objects behave as new ones, buffers are released, and every
decoded object equals the generated Python decoder's."""
from __future__ import annotations

import gc
import random
import sys

import pytest

import kproto
from kproto.codecs import Uuid
from kproto.codecs import program as _program

_decoder = _program._decoder
#: ints and views are recycled where CPython lays them out as 3.10 and 3.11 do; lists and message
#: objects everywhere
INTS_AND_VIEWS = sys.version_info[:2] in ((3, 10), (3, 11))
pytestmark = pytest.mark.skipif(_decoder is None, reason="the C decoder is not built (KPROTO_PURE)")

MD = kproto.response(3)
FETCH = kproto.response(1)


def _metadata(names, version=12, offline=()):
    C = MD.cls
    topics = [C.MetadataResponseTopic(
        name=name, topic_id=Uuid(random.Random(name).randbytes(16)), partitions=[
            C.MetadataResponsePartition(partition_index=p, leader_id=p % 3, leader_epoch=1_000_000 + p,
                                        replica_nodes=[1, 2, 3], isr_nodes=[1, 2], offline_replicas=list(offline))
            for p in range(4)]) for name in names]
    return MD.encode(C(brokers=[C.MetadataResponseBroker(node_id=1, host="h", port=9092)], topics=topics),
                     version)


def _fetch(n=6, hw=10_000_000):
    R = FETCH.cls
    return FETCH.encode(R(responses=[R.FetchableTopicResponse(topic="t", partitions=[
        R.PartitionData(partition_index=p, high_watermark=hw + p, last_stable_offset=hw, log_start_offset=-(2 ** 63),
                        records=bytes([p]) * (100 + p)) for p in range(n)])]), 12)


def _python(codec, data, version):
    obj, pos = codec._get(version).decode_py(data, 0)
    assert pos == len(data)
    return obj


def test_freed_lists_ints_and_views_are_reused():
    data = _fetch()
    gc.collect()
    kproto.codecs.clear_pools()
    assert set(_decoder.pool_stats().values()) == {0}
    msg = FETCH.decode(data, 12)
    assert len(msg.responses[0].partitions) == 6   # built (arrays of structs wait for their first read)
    before = _decoder.pool_stats()
    del msg
    kept = _decoder.pool_stats()
    # six partitions: the partitions list, big ints, and five of the six views (the last frees the buffer)
    assert kept["lists"] > before["lists"] and kept["objects"] >= before["objects"] + 8
    if INTS_AND_VIEWS:
        assert kept["ints"] >= before["ints"] + 12 and kept["views"] == before["views"] + 5
    else:
        assert kept["ints"] == kept["views"] == 0
    again = FETCH.decode(data, 12)
    assert len(again.responses[0].partitions) == 6   # built: the kept views are used again
    assert _decoder.pool_stats()["views"] == before["views"] and again == _python(FETCH, data, 12)
    del again
    _decoder.clear_pools()   # kept objects freed (views as released ones): nothing leaks or breaks
    assert set(_decoder.pool_stats().values()) == {0} and FETCH.decode(data, 12) == _python(FETCH, data, 12)


def test_values_the_user_keeps_are_not_recycled():
    data = _fetch()
    msg = FETCH.decode(data, 12)
    part = msg.responses[0].partitions[2]
    hw, records, parts = part.high_watermark, part.records, msg.responses[0].partitions
    del msg, part
    for n in range(20):   # the pools are emptied and filled again around what is kept
        other = FETCH.decode(_fetch(n % 7 + 1, hw=5_000_000_000 + n), 12)
        assert other == _python(FETCH, _fetch(n % 7 + 1, hw=5_000_000_000 + n), 12)
        del other
    assert hw == 10_000_002 and bytes(records) == bytes([2]) * 102 and len(parts) == 6
    assert [p.partition_index for p in parts] == list(range(6))


def test_recycled_views_are_memoryviews_of_the_source():
    data = _fetch()
    FETCH.decode(data, 12)   # fill the view pool
    src = bytearray(data)
    msg = FETCH.decode(src, 12)
    views = [p.records for p in msg.responses[0].partitions]
    for p, v in enumerate(views):
        assert type(v) is memoryview and v.obj is src and v.nbytes == len(v) == 100 + p
        assert v.readonly is False and v.contiguous and v.format == "B" and v.ndim == 1
        assert v.tobytes() == bytes([p]) * (100 + p) and bytes(v[1:3]) == bytes([p, p])
        assert v.cast("B").tolist()[:2] == [p, p]
    with pytest.raises(BufferError):
        src.extend(b"x")   # exported while any view lives
    views[0].release()
    del views, v
    msg.responses[0].partitions[1].records[0] = 0xFF   # a writable view of the bytearray
    assert src[data.index(bytes([1]) * 101)] == 0xFF
    del msg
    src.extend(b"x")   # every view gave its export back, recycled or freed
    ro = FETCH.decode(data, 12).responses[0].partitions[3].records
    assert ro.readonly and hash(ro) == hash(bytes([3]) * 103)


def test_a_view_of_a_released_buffer_is_not_recycled():
    data = _fetch()
    msg = FETCH.decode(memoryview(bytearray(data)), 12)
    for p in msg.responses[0].partitions:
        p.records.release()
    del msg
    assert FETCH.decode(data, 12) == _python(FETCH, data, 12)


def test_empty_arrays_are_left_to_their_lazy_default():
    C = MD.cls
    assert type(C.MetadataResponsePartition.__dict__["offline_replicas"]).__name__ == "LazyDefault"
    data = _metadata(["a", "b"])
    msg = MD.decode(data, 12)
    part = msg.topics[0].partitions[0]
    assert MD.encode(msg, 12) == data   # written from the empty slots
    assert MD._get(12).encode_c(msg) == data
    empty = part.offline_replicas
    assert empty == [] and part.offline_replicas is empty   # made once, then kept
    empty.append(7)
    changed = MD.encode(msg, 12)
    assert MD.decode(changed, 12).topics[0].partitions[0].offline_replicas == [7]
    assert msg == _python(MD, changed, 12)
    del part.offline_replicas   # an emptied slot reads as its default again
    assert part.offline_replicas == [] and MD.encode(msg, 12) == data
    with_offline = _metadata(["a"], offline=[4, 5])
    assert MD.decode(with_offline, 12).topics[0].partitions[3].offline_replicas == [4, 5]


def test_a_null_array_stays_null():
    F = FETCH.cls
    obj = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[
        F.PartitionData(aborted_transactions=None), F.PartitionData(aborted_transactions=[])])])
    data = FETCH.encode(obj, 12)
    back = FETCH.decode(data, 12)
    assert back.responses[0].partitions[0].aborted_transactions is None
    assert back.responses[0].partitions[1].aborted_transactions == []
    assert FETCH.encode(back, 12) == data and back == obj


def test_strings_and_uuids_shared_only_when_equal():
    names = [f"topic-{i:05d}" for i in range(3000)] + ["tópico-ü", "x" * 64, "y" * 65, ""]
    data = _metadata(names)
    for _ in range(2):   # the second time through the caches
        msg = MD.decode(data, 12)
        assert [t.name for t in msg.topics] == names and msg == _python(MD, data, 12)
        assert all(type(t.topic_id) is Uuid for t in msg.topics)
        ids = [t.topic_id for t in msg.topics]
        assert ids == [Uuid(random.Random(n).randbytes(16)) for n in names]
        assert all(hash(u) == hash(bytes(u)) for u in ids[:50])
    small = _metadata(["orders", "payments"])
    one, two = MD.decode(small, 12), MD.decode(small, 12)
    assert one.topics[1].name is two.topics[1].name   # a short ASCII name recurring is shared
    assert one.topics[1].topic_id is two.topics[1].topic_id


def test_names_that_differ_in_one_byte_all_stay_shared():
    """Ten topic names a byte apart, and 200 of a common shape, all survive in the caches from one
    decode to the next (a weak hash put several in one slot, where they evicted one another)."""
    for names in ([f"topic-{i}" for i in range(10)], [f"topic-{i:04d}.events" for i in range(200)]):
        data = _metadata(names)
        _decoder.clear_pools()
        one, two = MD.decode(data, 12, lazy=False), MD.decode(data, 12, lazy=False)
        assert [t.name for t in two.topics] == names
        unshared = [t.name for a, t in zip(one.topics, two.topics) if a.name is not t.name]
        unshared_ids = [t.name for a, t in zip(one.topics, two.topics) if a.topic_id is not t.topic_id]
        assert unshared == [] and unshared_ids == []


def test_long_chains_of_objects_free_without_deep_recursion():
    R = FETCH.cls
    chain = None
    for i in range(200_000):
        chain = R.PartitionData(partition_index=i, records=chain)
    del chain   # CPython's trashcan: no C stack overflow
    nested: list = []
    for _ in range(200_000):
        nested = [nested]
    holder = R.PartitionData(aborted_transactions=nested)
    del nested, holder


def test_mixed_decodes_agree_with_python():
    rnd = random.Random(7)
    inputs = [(MD, _metadata([f"t{i}" for i in range(rnd.randint(0, 40))], v), v) for v in (1, 9, 12)]
    inputs += [(FETCH, _fetch(rnd.randint(0, 30), hw=rnd.choice([5, 2 ** 31, 2 ** 62])), 12) for _ in range(5)]
    held = []
    for _ in range(300):
        codec, data, version = rnd.choice(inputs)
        obj = codec.decode(data, version)
        assert obj == _python(codec, data, version)
        if rnd.random() < 0.2:
            held.append((obj, codec, data, version))   # some survive while others are recycled
        if held and rnd.random() < 0.2:
            held.pop(rnd.randrange(len(held)))
    for obj, codec, data, version in held:
        assert obj == _python(codec, data, version) and codec.encode(obj, version) == data


def test_objects_made_and_freed_are_tracked_and_untracked_by_the_garbage_collector():
    """The decoder links objects into the collector's lists itself: what it makes is tracked (a
    cycle through it is collected), what it frees leaves the lists, and the lists stay whole
    across collections of every generation while messages are made and dropped."""
    data = _fetch()
    for round_ in range(3):
        msgs = [FETCH.decode(data, 12) for _ in range(50)]
        assert all(gc.is_tracked(m) and gc.is_tracked(m.responses[0].partitions) and
                   gc.is_tracked(m.responses[0].partitions[0]) and gc.is_tracked(m.responses[0].partitions[0].records)
                   for m in msgs)
        tracked = {id(o) for o in gc.get_objects()}
        assert id(msgs[-1]) in tracked and id(msgs[-1].responses[0].partitions[2]) in tracked
        gc.collect(round_)   # each generation in turn walks the lists the decoder linked into
        # a cycle through decoded objects is the collector's to break
        cyc = msgs.pop()
        cyc.responses[0].partitions[0].records = cyc
        del cyc
        del msgs
        assert gc.collect() >= 1
    kept = FETCH.decode(data, 12)
    part = kept.responses[0].partitions[5]   # built on this first read
    ids = {id(o) for o in gc.get_objects()}
    assert id(kept) in ids and id(part) in ids and id(kept.responses[0].partitions) in ids
    assert kept == _python(FETCH, data, 12)


def _random_fetch(rnd, version=12):
    """A FetchResponse whose shape and values vary: counts, nulls, tagged fields present or not,
    small and large ints, records of several sizes."""
    R = FETCH.cls
    big = rnd.choice([7, 300, 2 ** 31 + 5, 2 ** 62 + 9, -(2 ** 40)])

    def part(p):
        kw = dict(partition_index=p, error_code=rnd.choice([0, 3]), high_watermark=big + p,
                  last_stable_offset=rnd.choice([big + p, big - 1]), log_start_offset=rnd.choice([0, big]),
                  aborted_transactions=rnd.choice([None, [], [R.AbortedTransaction(producer_id=big, first_offset=p)]]),
                  records=rnd.choice([None, bytes([p % 256]) * rnd.randrange(0, 300)]))
        if rnd.random() < 0.3:   # tagged fields, on the wire only when not at their default
            kw["diverging_epoch"] = R.EpochEndOffset(epoch=p, end_offset=big)
            kw["current_leader"] = R.LeaderIdAndEpoch(leader_id=p % 3, leader_epoch=big % 1000)
        return R.PartitionData(**kw)

    return FETCH.encode(R(throttle_time_ms=rnd.choice([0, 100_000]), responses=[
        R.FetchableTopicResponse(topic=rnd.choice(["t", "orders", "tópico"]),
                                 partitions=[part(p) for p in range(rnd.randrange(0, 9))])
        for _ in range(rnd.randrange(0, 4))]), version)


def test_a_message_freed_by_its_user_is_kept_by_its_program_not_the_pools():
    """A message decoded whole and freed is kept as it is by its program, which decodes the next
    message into its objects: none of its objects, lists and ints goes to a pool when it is freed."""
    data = _fetch(30)
    expected = _python(FETCH, data, 12)
    assert FETCH.decode(data, 12, lazy=False) == expected
    for _ in range(5):
        msg = FETCH.decode(data, 12, lazy=False)
        assert len(msg.responses[0].partitions) == 30
        assert msg.responses[0].partitions[29].high_watermark == 10_000_029
        before = _decoder.pool_stats()
        del msg
        after = _decoder.pool_stats()
        assert after["objects"] == before["objects"] and after["lists"] == before["lists"]
        assert after["ints"] == before["ints"]
    assert FETCH.decode(data, 12, lazy=False) == expected


def test_decoding_into_a_freed_message_leaves_what_the_user_kept_alone():
    """Messages of every shape decoded whole into the last one freed, while the user keeps some of
    their parts (partitions, lists, ints, views, tagged structs) and changes others: every message
    equals the Python decoder's, and every kept part keeps its value."""
    rnd = random.Random(11)
    held = []
    for i in range(400):
        data = _random_fetch(rnd)
        msg = FETCH.decode(bytearray(data) if i % 5 == 0 else data, 12, lazy=False)
        assert msg == _python(FETCH, data, 12)
        for t in msg.responses:   # changed by the user before the message is freed
            for p in t.partitions:
                if rnd.random() < 0.05:
                    p.records = rnd.choice([b"mine", None, 42])
                    p.aborted_transactions = rnd.choice([[1, "x"], None, (), held[-1][0] if held else []])
                    p.high_watermark = "not an int"
        for t in msg.responses:
            if rnd.random() < 0.2:
                held.append((t.partitions, repr(t.partitions)))
            for p in t.partitions:
                r = rnd.random()
                if r < 0.1:
                    held.append((p, repr(p)))
                elif r < 0.15:
                    held.append((p.high_watermark, repr(p.high_watermark)))
                elif r < 0.2 and isinstance(p.records, memoryview):
                    held.append((p.records, bytes(p.records)))
                elif r < 0.25:
                    held.append((p.current_leader, repr(p.current_leader)))
        if rnd.random() < 0.1 and msg.responses:
            msg.responses = [msg.responses[0], msg.responses[0]]   # one object twice
        del msg
        if len(held) > 60:
            held = held[30:]
        for obj, was in held:
            assert (bytes(obj) if isinstance(obj, memoryview) else repr(obj)) == was


def test_a_kept_message_gives_its_buffer_back():
    """The views of a freed message's buffer are dropped when its program keeps it: the buffer is
    released (a bytearray can grow again, a bytes object loses the references the views held)."""
    data = _fetch(8)
    src = bytearray(data)
    msg = FETCH.decode(src, 12, lazy=False)
    with pytest.raises(BufferError):
        src.extend(b"x")
    del msg
    src.extend(b"x")
    refs = sys.getrefcount(data)
    msg = FETCH.decode(data, 12, lazy=False)
    assert sys.getrefcount(data) > refs
    del msg
    assert sys.getrefcount(data) == refs


def test_kept_messages_are_collected_and_cleared():
    """A message in a cycle of the user's is freed by the collector and kept; what is decoded into
    it next is whole. clear_pools frees the kept messages."""
    data = _fetch(4)
    for _ in range(3):
        msg = FETCH.decode(data, 12, lazy=False)
        msg.responses[0].partitions[0].records = msg   # a cycle through the message
        del msg
        gc.collect()
        assert FETCH.decode(data, 12, lazy=False) == _python(FETCH, data, 12)
    kproto.codecs.clear_pools()
    assert set(_decoder.pool_stats().values()) == {0}
    assert FETCH.decode(data, 12, lazy=False) == _python(FETCH, data, 12)


def test_a_malformed_message_decoded_into_a_kept_one_fails_as_before():
    good = _fetch(6)
    FETCH.decode(good, 12, lazy=False)
    for cut in (7, len(good) // 2, len(good) - 1):
        with pytest.raises(kproto.DecodeError):
            FETCH.decode(good[:cut], 12, lazy=False)
        assert FETCH.decode(good, 12, lazy=False) == _python(FETCH, good, 12)
