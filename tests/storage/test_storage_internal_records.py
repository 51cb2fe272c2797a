"""Every record type of Kafka 4.3.1's internal topics, written by kproto's writer into a log dir
and read back by ``read_internal`` and ``kproto dump-log --decode-internal``: the keys and values
of the group-coordinator (``__consumer_offsets``: offsets, classic, KIP-848 consumer, share and
streams groups), transaction-coordinator (``__transaction_state``) and share-coordinator
(``__share_group_state``) folders, and every metadata record and version (``__cluster_metadata``
and a KRaft snapshot), taken from the golden vectors Apache Kafka 4.3.1's classes wrote
(``$KPROTO_VECTORS/kafka-4.3/messages.jsonl.gz``)."""
from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict

import pytest

from kproto.codecs import message
from kproto.problems import Problems
from kproto.records import RecordBatchBuilder
from kproto.storage import LogDirWriter
from kproto.storage.internal import COORDINATOR_TOPICS, read_internal, record_types

from storage_fixtures import REPO, run_cli, same_as_kafka_json

VECTORS = os.path.join(os.environ.get("KPROTO_VECTORS", os.path.join(REPO, "..", "shared",
                                                                     "vectors")),
                       "kafka-4.3", "messages.jsonl.gz")
TOPIC_OF = {source: topic for topic, source in COORDINATOR_TOPICS.items()}
TOPIC_OF["metadata"] = "__cluster_metadata"
SNAPSHOT = "00000000000000000100-0000000003.checkpoint"


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _vectors() -> list[dict]:
    with gzip.open(VECTORS, "rt", encoding="utf-8") as f:  # missing vectors fail loudly
        return [v for v in map(json.loads, f)
                if v["kind"] == "data" and v["source"] in TOPIC_OF]


def _records(vectors: list[dict]) -> dict[str, list[tuple[bytes | None, bytes | None, dict]]]:
    """Per topic, (key, value, expected decoded line without offset) for: every value vector
    under a key vector of its record type (the key vectors taken in turn), every key vector
    again as a tombstone, every metadata vector in a KRaft frame."""
    keys: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for v in vectors:
        if v["spec_type"] == "coordinator-key":
            keys[(v["source"], v["api_key"])].append(v)
    out: dict[str, list] = defaultdict(list)
    turn: dict[tuple[str, int], int] = defaultdict(int)
    for v in vectors:
        topic, rtype = TOPIC_OF[v["source"]], v["api_key"]
        if v["spec_type"] == "metadata":
            value = (_uvarint(1) + _uvarint(rtype) + _uvarint(v["version"])
                     + bytes.fromhex(v["hex"]))
            out[topic].append((None, value, {"frame_version": 1, "api_key": rtype,
                                             "version": v["version"], "data": v["json"],
                                             "name": v["name"]}))
            continue
        ks = keys[(v["source"], rtype)]
        k = ks[turn[(v["source"], rtype)] % len(ks)]
        key = rtype.to_bytes(2, "big") + bytes.fromhex(k["hex"])
        want_key = {"version": rtype, "type": k["name"], "data": k["json"]}
        if v["spec_type"] == "coordinator-value":
            turn[(v["source"], rtype)] += 1
            value = v["version"].to_bytes(2, "big", signed=True) + bytes.fromhex(v["hex"])
            out[topic].append((key, value, {"key": want_key, "value": {
                "version": v["version"], "type": v["name"], "data": v["json"]}}))
        else:
            out[topic].append((key, None, {"key": want_key, "value": None}))
    return out


def _batch(base: int, items, control_value: tuple[int, bytes] | None = None) -> bytes:
    b = RecordBatchBuilder(base_offset=base, control=control_value is not None)
    if control_value is not None:
        b.append_control(control_value[0], control_value[1], 1_700_000_000_000)
    for i, (key, value, _want) in enumerate(items):
        b.append(1_700_000_000_000 + i, key, value)
    return b.build()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """The log dir, the expected lines per (topic, offset) and the snapshot's expected lines."""
    vectors = _vectors()
    path = str(tmp_path_factory.mktemp("internal43") / "kafka")
    writer = LogDirWriter(path, cluster_id="AAAAAAAAAAAAAAAAAAAAAA", created=0)
    expected: dict[tuple[str, int], dict] = {}
    for topic, items in sorted(_records(vectors).items()):
        part = writer.partition(topic, 0)
        for start in range(0, len(items), 7):  # several records per batch, several batches
            chunk = items[start:start + 7]
            base = part.next_offset
            part.append(_batch(base, chunk))
            for i, (_k, _v, want) in enumerate(chunk):
                expected[(topic, base + i)] = want
    writer.close()
    # a KRaft snapshot: header control batch, the metadata records, footer control batch
    meta = _records(vectors)["__cluster_metadata"]
    head, foot = message("SnapshotHeaderRecord"), message("SnapshotFooterRecord")
    header = head.encode(head.cls(version=0, last_contained_log_timestamp=1_700_000_000_000), 0)
    footer = foot.encode(foot.cls(version=0), 0)
    data = _batch(0, [], (3, header)) + _batch(1, meta) + _batch(1 + len(meta), [], (4, footer))
    snap = os.path.join(path, "__cluster_metadata-0", SNAPSHOT)
    with open(snap, "wb") as f:
        f.write(data)
    snap_want = [{"offset": 0, "is_control": True}] + \
        [{"offset": 1 + i, "is_control": False, **w} for i, (_k, _v, w) in enumerate(meta)] + \
        [{"offset": 1 + len(meta), "is_control": True}]
    return path, expected, snap_want, vectors




def test_every_43_record_type_is_written(logdir):
    """The log dir holds every record message of the four folders 4.3.1 defines, at every
    version, and the share-coordinator's records in __share_group_state."""
    _path, expected, _snap, vectors = logdir
    seen = {(w.get("name") or (w["value"] or w["key"])["type"],
             w["version"] if "name" in w else (w["value"] or w["key"])["version"])
            for w in expected.values()}
    seen |= {(w["key"]["type"], 0) for w in expected.values() if "key" in w}
    assert seen >= {(v["name"], v["version"]) for v in vectors}
    share = {w["key"]["type"] for (t, _o), w in expected.items() if t == "__share_group_state"}
    assert share == {"ShareSnapshotKey", "ShareUpdateKey"}
    assert {"StreamsGroupTopologyValue", "ConsumerGroupRegularExpressionValue",
            "ShareGroupStatePartitionMetadataValue"} <= {
        w["value"]["type"] for (t, _o), w in expected.items()
        if t == "__consumer_offsets" and w["value"]}


def test_record_types_come_from_the_schemas():
    assert record_types("share-coordinator") == {0: ("ShareSnapshotKey", "ShareSnapshotValue"),
                                                 1: ("ShareUpdateKey", "ShareUpdateValue")}
    assert record_types("transaction-coordinator") == {0: ("TransactionLogKey",
                                                           "TransactionLogValue")}
    groups = record_types("group-coordinator")
    assert groups[23] == ("StreamsGroupTopologyKey", "StreamsGroupTopologyValue")
    assert groups[15] == ("ShareGroupStatePartitionMetadataKey",
                          "ShareGroupStatePartitionMetadataValue")
    assert groups[16] == ("ConsumerGroupRegularExpressionKey", "ConsumerGroupRegularExpressionValue")


def test_read_internal_decodes_every_record(logdir):
    path, expected, _snap, _vectors = logdir
    found = Problems()
    tables = read_internal(path, problems=found)
    assert not found, found.reasons()
    rows = {(r["topic"], r["offset"]): (name, r) for name, t in tables.items()
            for r in t.to_pylist()}
    assert set(rows) == set(expected)
    for where, want in expected.items():
        name, row = rows[where]
        if "name" in want:
            assert name == want["name"] and row["version"] == want["version"]
            assert same_as_kafka_json(want["data"], row["record"]), where
        else:
            assert name + "Key" == want["key"]["type"]
            assert row["key_version"] == want["key"]["version"]
            assert same_as_kafka_json(want["key"]["data"], row["key"]), where
            if want["value"] is None:
                assert row["value"] is None and row["value_version"] is None
            else:
                assert row["value_version"] == want["value"]["version"]
                assert same_as_kafka_json(want["value"]["data"], row["value"]), where
    assert {"ShareSnapshot", "ShareUpdate", "StreamsGroupTopology", "ConsumerGroupMetadata",
            "ShareGroupMetadata", "TransactionLog", "OffsetCommit"} <= set(tables)
    assert set(tables["ShareSnapshot"].column("topic").to_pylist()) == {"__share_group_state"}


def _kafka_line(want: dict, offset: int) -> dict:
    if "name" in want:
        from kproto.storage.internal import _type_name

        return {"offset": offset, "is_control": False, "frame_version": 1,
                "api_key": want["api_key"], "type": _type_name(want["name"]),
                "version": want["version"], "data": want["data"]}
    return {"offset": offset, "is_control": False, "key": want["key"], "value": want["value"]}


@pytest.mark.parametrize("topic", [*COORDINATOR_TOPICS, "__cluster_metadata"])
def test_dump_log_decode_internal(logdir, topic):
    path, expected, _snap, _vectors = logdir
    folder = os.path.join(path, f"{topic}-0")
    segment = os.path.join(folder, "00000000000000000000.log")
    rc, out = run_cli(["dump-log", "--decode-internal", "--format", "jsonl", segment])
    assert rc == 0
    got = [json.loads(line) for line in out.splitlines()]
    want = [_kafka_line(w, o) for (t, o), w in sorted(expected.items()) if t == topic]
    assert got == want


def test_dump_log_decode_internal_snapshot(logdir):
    path, _expected, snap_want, _vectors = logdir
    rc, out = run_cli(["dump-log", "--decode-internal", "--format", "jsonl",
                       os.path.join(path, "__cluster_metadata-0", SNAPSHOT)])
    assert rc == 0
    got = [json.loads(line) for line in out.splitlines()]
    assert got == [w if w["is_control"] else _kafka_line(w, w["offset"]) for w in snap_want]


def test_unknown_record_type_is_a_problem_not_a_crash(tmp_path):
    """A record type the schemas do not know (a newer release's) is reported and skipped."""
    writer = LogDirWriter(str(tmp_path), cluster_id="AAAAAAAAAAAAAAAAAAAAAA", created=0)
    part = writer.partition("__share_group_state", 0)
    part.append(_batch(0, [(b"\x00\x63\x00", b"\x00\x00", {})]))
    writer.close()
    found = Problems()
    assert read_internal(str(tmp_path), problems=found) == {}
    assert [p.kind for p in found] == ["record"] and "unknown key version 99" in found.reasons()[0]
