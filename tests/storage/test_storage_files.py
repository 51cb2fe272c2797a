"""Every non-.log file of the fixture log dirs: dumps equal the expected files, and our encoders
reproduce the broker's bytes from the parsed objects."""
from __future__ import annotations

import random

import pytest

from kproto.errors import DecodeError
from kproto.storage.checkpoints import (CleanShutdown, LeaderEpochCheckpoint, MetaProperties,
                                        OffsetCheckpoint, PartitionMetadata, parse_properties)
from kproto.storage.dump import dump_file
from kproto.storage.indexes import OffsetIndex, TimeIndex, encode_txn_index, parse_txn_index
from kproto.storage.layout import file_kind
from kproto.storage.snapshot import encode_snapshot, java_hashmap_order, parse_snapshot

from storage_fixtures import expected_files, load_expected, read_bytes, source_of

NON_LOG = [p for p in expected_files("**/*.json*")
           if ".log." not in p and not p.endswith("partition.json")]


def test_every_kind_present():
    kinds = {file_kind(source_of(p))[0] for p in NON_LOG}
    assert kinds == {"index", "timeindex", "txnindex", "snapshot", "leader-epoch-checkpoint",
                     "partition.metadata", "meta.properties", "clean-shutdown",
                     "offset-checkpoint"}


@pytest.mark.parametrize("rel", NON_LOG)
def test_dump_matches_expected(rel):
    assert dump_file(source_of(rel)) == load_expected(rel)


@pytest.mark.parametrize("rel", NON_LOG)
def test_encode_reproduces_bytes(rel):
    src = source_of(rel)
    data = read_bytes(src)
    kind, offset = file_kind(src)
    if kind == "index":
        assert OffsetIndex.parse(data, offset).encode(len(data)) == data
    elif kind == "timeindex":
        assert TimeIndex.parse(data, offset).encode(len(data)) == data
    elif kind == "txnindex":
        assert encode_txn_index(parse_txn_index(data)) == data
    elif kind == "snapshot":
        snap = parse_snapshot(data)
        assert snap.crc_valid
        assert encode_snapshot(snap.entries) == data
    elif kind == "leader-epoch-checkpoint":
        assert LeaderEpochCheckpoint.parse(data).encode() == data
    elif kind == "offset-checkpoint":
        assert OffsetCheckpoint.parse(data).encode() == data
    elif kind == "partition.metadata":
        assert PartitionMetadata.parse(data).encode() == data
    elif kind == "clean-shutdown":
        assert CleanShutdown.parse(data).encode() == data
    elif kind == "meta.properties":
        props = MetaProperties.parse(data).properties
        shuffled = dict(sorted(props.items(), reverse=True))  # Java's order is not insertion order
        ours = MetaProperties(shuffled).encode().split(b"\n")
        theirs = data.split(b"\n")
        # line 2 is the date comment
        assert ours[:1] + ours[2:] == theirs[:1] + theirs[2:]
    else:  # pragma: no cover - guarded by test_every_kind_present
        raise AssertionError(kind)


@pytest.mark.parametrize("rel", [p for p in NON_LOG if p.endswith(".snapshot.jsonl")])
def test_snapshot_entry_order_is_java_hashmap_order(rel):
    ids = [e["producer_id"] for e in load_expected(rel)[1:]]
    shuffled = ids[:]
    random.Random(rel).shuffle(shuffled)
    assert java_hashmap_order(shuffled) == ids


def test_java_hashmap_order_collisions_keep_insertion_order():
    # 1 and 17 share bucket 1 of a 16-slot table; 2 is in bucket 2
    assert java_hashmap_order([17, 2, 1]) == [17, 1, 2]
    assert java_hashmap_order([1, 2, 17]) == [1, 17, 2]
    # 13 keys grow the table to 32 buckets, separating 1 and 17 again
    assert java_hashmap_order([17] + list(range(1, 13))).index(17) == 12


def test_snapshot_crc_mismatch_is_reported():
    data = bytearray(encode_snapshot([]))
    data[-1] ^= 1
    with pytest.raises(DecodeError):  # count no longer matches
        parse_snapshot(bytes(data))
    rel = next(p for p in NON_LOG if p.endswith(".snapshot.jsonl") and load_expected(p)[0]["entries"])
    raw = bytearray(read_bytes(source_of(rel)))
    raw[20] ^= 0x40
    snap = parse_snapshot(bytes(raw))
    assert not snap.crc_valid
    assert snap.crc == load_expected(rel)[0]["crc"]


@pytest.mark.parametrize("data", [
    b"", b"\x00\x01\x00\x00", b"\x00\x02" + bytes(8),
    b"\x00\x01\x00\x00\x00\x00\x7f\xff\xff\xff",  # count far beyond the data
    b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff",  # negative count
])
def test_snapshot_malformed(data):
    with pytest.raises(DecodeError):
        parse_snapshot(data)


@pytest.mark.parametrize("cls,data", [
    (LeaderEpochCheckpoint, b"0\n2\n0 0\n"),  # count says 2
    (LeaderEpochCheckpoint, b"1\n0\n"),  # version
    (LeaderEpochCheckpoint, b"0\n1\n0 x\n"),
    (LeaderEpochCheckpoint, b"1\n"),  # only a version line, but not version 0
    (OffsetCheckpoint, b"0\n1\ntopic 0\n"),
    (OffsetCheckpoint, b"0\n1\n\xff 0 0\n"),
    (PartitionMetadata, b"version: 0\ntopic_id: short"),
    (PartitionMetadata, b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"),
    (PartitionMetadata, b"topic_id: AAAAAAAAAAAAAAAAAAAAAQ"),
    (MetaProperties, b"node.id=1\ncluster.id=x\n"),  # no version: Kafka will not start
    (MetaProperties, b"version=one\n"),
    (CleanShutdown, b"{"),
    (CleanShutdown, b'{"version": 0}'),
    (CleanShutdown, b'{"version": "0", "brokerEpoch": 3}'),  # a mix of two forms
    (CleanShutdown, b"brokerEpoch: 3\nversion: 0"),  # lines out of order
    (CleanShutdown, b"shutdown at 12:00"),
    (CleanShutdown, b"[]"),
])
def test_text_files_malformed(cls, data):
    with pytest.raises(DecodeError):
        cls.parse(data)


def test_txn_index_malformed():
    good = encode_txn_index(parse_txn_index(read_bytes(source_of(
        next(p for p in NON_LOG if p.endswith(".txnindex.jsonl") and load_expected(p))))))
    with pytest.raises(DecodeError):
        parse_txn_index(good[:-1])
    with pytest.raises(DecodeError):
        parse_txn_index(b"\x00\x07" + good[2:34])


def test_properties_escapes_round_trip():
    props = {"a key": "x=y:z", "uni": "caf\u00e9 \u4e2d", "lead": " spaced", "p.q": "#!\\",
             "version": "1"}
    encoded = MetaProperties(props).encode()
    assert encoded.startswith(b"#\n#")
    assert MetaProperties.parse(encoded).properties == props


def test_properties_continuation_and_separators():
    text = b"# c\n! c\na = 1\nb:2\nc 3\nd=long\\\n   value\n\ne\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "longvalue", "e": ""}


def test_leader_epoch_for_offset():
    cp = LeaderEpochCheckpoint.parse(b"0\n3\n0 0\n1 834\n3 1905\n")
    assert [cp.epoch_for(o) for o in (0, 833, 834, 1904, 1905, 10**9)] == [0, 0, 1, 1, 3, 3]
    assert LeaderEpochCheckpoint.parse(b"0\n1\n9 80\n").epoch_for(79) == -1


def _aborted_txn_vectors():
    import gzip
    import json
    import os
    from pathlib import Path
    vectors = Path(os.environ.get("KPROTO_VECTORS", Path(__file__).resolve().parents[2].parent / "shared" / "vectors"))
    out = []
    for name in ("messages.jsonl.gz", "messages-edge.jsonl.gz"):
        with gzip.open(vectors / "kafka-4.4" / name, "rt") as fh:
            out += [v for v in map(json.loads, fh) if v["name"] == "AbortedTxn"]
    return out


def test_txn_index_entries_are_kafka_4_4_aborted_txn_bodies():
    """A .txnindex entry is an int16 version and the body of Kafka 4.4's AbortedTxn spec: the
    bodies Kafka's own AbortedTxn class wrote read as entries, and entries write them again; the
    message objects of the spec convert both ways."""
    import kproto
    from kproto.storage.indexes import AbortedTxn
    codec = kproto.message("AbortedTxn")
    vecs = _aborted_txn_vectors()
    assert len(vecs) == 6
    data = b"".join(b"\x00\x00" + bytes.fromhex(v["hex"]) for v in vecs)
    entries = parse_txn_index(data)
    for entry, vec in zip(entries, vecs):
        assert {"producerId": entry.producer_id, "firstOffset": entry.first_offset,
                "lastOffset": entry.last_offset, "lastStableOffset": entry.last_stable_offset} == vec["json"]
        msg = codec.decode(bytes.fromhex(vec["hex"]), 0)
        assert AbortedTxn.from_message(msg) == entry and entry.to_message() == msg
    assert encode_txn_index(entries) == data
    # a version AbortedTxn does not define is refused where it stands, as Kafka refuses it
    with pytest.raises(DecodeError) as err:
        parse_txn_index(data[:34] + b"\x00\x01" + data[36:68])
    assert err.value.offset == 34
