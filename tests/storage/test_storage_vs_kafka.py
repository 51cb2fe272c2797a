"""Apache Kafka's own files and tools judge kproto's storage reader and ``dump-log``.

One Apache Kafka 4.4.0 node writes log directories under scripted workloads (see
``kafka_logdir_support``); its ``DumpLogSegments`` dumps every file of them, one JVM per kind
of file, and every fact it states (offsets, positions, sizes, CRCs, producer fields, flags,
timestamps, compression, keys, values, header keys, index entries, decoded internal records)
must be what kproto's ``dump-log`` says, field by field.

The session's shared 3-broker Apache Kafka cluster writes a partition's replicas through
leader changes (a killed leader's acks=1 tail truncated when it comes back as a follower), and
kproto reads each replica as Kafka's tool, its leader-epoch-checkpoint and a consumer do.

Deliberate differences (kproto's JSON carries more or other forms of the same facts) are
normalised in ``_kproto_*`` below, each with its reason.
"""
from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from kproto.cli.dump_log import dump_path
from kproto.records.compression import DEFAULT_MAX_SIZE
from kproto.testing import require_apache_kafka
from kproto.testing.apache import DEFAULT_VERSION

import kafka_logdir_support as kls


STATES = ("clean", "killed")


@pytest.fixture(scope="session")
def kafka_logdirs(tmp_path_factory) -> kls.KafkaLogDirs:
    require_apache_kafka(DEFAULT_VERSION)
    pytest.importorskip("confluent_kafka")
    return kls.build(tmp_path_factory.mktemp("kafka-logdirs"))


def _args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"batches_only": False, "verify": False, "decode_internal": False,
                                 "index_sanity_check": False, "max_decompressed": DEFAULT_MAX_SIZE,
                                 **kw})


def _files(root: Path, pattern: str, internal: bool = False) -> list[Path]:
    """Files of ``root``'s partition folders (not the internal topics' unless ``internal``)."""
    return sorted(f for f in root.glob(f"*-*/{pattern}")
                  if internal or not f.parent.name.startswith("__"))


def _text(b64: str | None) -> str | None:
    # Kafka's tool prints keys and values as ``new String(bytes, UTF_8)``: no escaping at all
    return None if b64 is None else base64.b64decode(b64).decode("utf-8", "replace")


_BATCH_FACTS = ("base_offset", "last_offset", "count", "base_sequence", "last_sequence",
                "producer_id", "producer_epoch", "partition_leader_epoch", "is_transactional",
                "is_control", "delete_horizon_ms", "position", "timestamp_type", "max_timestamp",
                "size_in_bytes", "magic", "compression", "crc", "is_valid")


def _kproto_batches(path: Path) -> list[dict[str, Any]]:
    """kproto's dump of a segment in the shape of :func:`kls.parse_log_dump`'s batches."""
    batches: list[dict[str, Any]] = []
    for line in dump_path(str(path), _args()):
        if line["type"] == "batch":
            batches.append({**{k: line[k] for k in _BATCH_FACTS}, "records": []})
        elif line["type"] == "record":
            r = {"offset": line["offset"], "timestamp": line["timestamp"],
                 "key_size": line["key_size"], "value_size": line["value_size"],
                 "sequence": line["sequence"], "header_keys": [h["key"] for h in line["headers"]],
                 "key": _text(line["key"]), "payload": _text(line["value"]), "tail": ""}
            if "control" in line:
                # Kafka prints a transaction marker's type and coordinator epoch instead of
                # its key and value
                c = line["control"]
                r.update(key=None, payload=None,
                         tail=f"endTxnMarker: {c['type']} coordinatorEpoch: {c['coordinator_epoch']}"
                         if c["type"] in ("COMMIT", "ABORT") else c["type"])
            batches[-1]["records"].append(r)
        elif line["type"] == "error":
            raise AssertionError(f"kproto: {line}")
    return batches


def _assert_same(ours: list, theirs: list, what: str) -> None:
    assert len(ours) == len(theirs), f"{what}: kproto {len(ours)} items, Kafka {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a == b, f"{what}, item {i}:\n kproto {a}\n Kafka  {b}"


@pytest.mark.parametrize("state", STATES)
def test_segments_batches_and_records_are_kafkas(kafka_logdirs, state):
    root = getattr(kafka_logdirs, state)
    segments = _files(root, "*.log")
    assert len(segments) >= 12
    dumps = kls.run_dump(DEFAULT_VERSION, segments, "--deep-iteration", "--print-data-log")
    seen = set()
    for seg in segments:
        start, theirs = kls.parse_log_dump(dumps[str(seg)])
        assert start == int(seg.stem), seg
        ours = _kproto_batches(seg)
        _assert_same(ours, theirs, str(seg))
        for b in theirs:
            seen.add(b["compression"])
            seen.update(k for k in ("is_transactional", "is_control") if b[k])
            seen.update(("delete_horizon",) if b["delete_horizon_ms"] is not None else ())
    # the workload wrote what the comparison is for
    assert seen >= {"none", "gzip", "snappy", "lz4", "zstd", "is_transactional", "is_control"}
    if state == "clean":
        assert "delete_horizon" in seen


def _kproto_index_lines(path: Path) -> list[str]:
    out = []
    for line in dump_path(str(path), _args()):
        if line["type"] == "entry":
            out.append(f"offset: {line['offset']} position: {line['position']}" if "position" in line
                       else f"timestamp: {line['timestamp']} offset: {line['offset']}")
        elif line["type"] == "error":
            raise AssertionError(f"kproto: {line}")
    return out


def _zero_first_slot(path: Path) -> bool:
    size = 8 if path.suffix == ".index" else 12
    with open(path, "rb") as f:
        slot = f.read(size)
    return len(slot) == size and not any(slot)


@pytest.mark.parametrize("state", STATES)
def test_index_entries_are_kafkas(kafka_logdirs, state):
    root = getattr(kafka_logdirs, state)
    files = _files(root, "*.index", internal=True) + _files(root, "*.timeindex", internal=True)
    dumps = kls.run_dump(DEFAULT_VERSION, files)
    entries = zero_slots = 0
    for f in files:
        theirs = [line for line in dumps[str(f)]
                  if line.startswith(("offset: ", "timestamp: "))]
        ours = _kproto_index_lines(f)
        # Deliberate difference: Kafka's tool prints slot 0 of an index whatever it holds (it
        # stops at the first slot after it that points at the base offset), so the all-zero
        # slot 0 of a preallocated index nothing was written to (kill -9) reads as an entry
        # "base offset at position 0" / "timestamp 0". kproto counts no entries there: Kafka
        # writes an index entry only after index.interval.bytes of a segment, never for
        # position 0, and a time index entry never has timestamp 0 from a producer's clock.
        if _zero_first_slot(f) and theirs:
            first = theirs.pop(0)
            assert first in (f"offset: {int(f.stem)} position: 0",
                             f"timestamp: 0 offset: {int(f.stem)}"), (f, first)
            zero_slots += 1
        _assert_same(ours, theirs, str(f))
        entries += len(ours)
    assert entries >= 20
    assert (zero_slots > 0) == (state == "killed")


def _kproto_sanity_verdict(path: Path) -> str:
    from kproto.cli.dump_log import CorruptIndexError, kafka_lines

    try:
        (line,) = kafka_lines(str(path), _args(index_sanity_check=True))
    except CorruptIndexError as e:
        return f"CorruptIndexException: {e}"
    return line


def test_index_sanity_check_verdicts_are_kafkas(kafka_logdirs):
    """Kafka's ``--index-sanity-check`` (the check a broker runs at start to decide whether to
    rebuild an index) and kproto's give every index and time index of both copies the same
    verdict, with the same message where it fails."""
    files = [f for state in STATES for pattern in ("*.index", "*.timeindex")
             for f in _files(getattr(kafka_logdirs, state), pattern, internal=True)]
    theirs = kls.run_index_sanity_check(DEFAULT_VERSION, files)
    assert len(theirs) == len(files)
    failed = {"clean": 0, "killed": 0}
    for f in files:
        verdict = _kproto_sanity_verdict(f)
        assert verdict == theirs[str(f)], f
        if verdict.startswith("CorruptIndexException"):
            failed[f.parents[1].name] += 1
    # a time index left preallocated after entries were written fails Kafka's check (its
    # last slot's timestamp 0 is below the first): the KRaft log's after a clean stop too,
    # every active segment's after kill -9
    assert 1 <= failed["clean"] < failed["killed"], failed
    assert any(v.endswith(" passed sanity check.") for v in theirs.values())
    assert any(v.endswith(" is empty.") for v in theirs.values())


def test_index_sanity_check_format_kafka_stops_as_kafkas_tool(kafka_logdirs):
    """``kproto dump-log --format kafka --index-sanity-check`` prints what Kafka's tool prints
    up to the first index that fails, and stops there with exit status 1."""
    from kproto.testing import apache

    folder = kafka_logdirs.killed / "__cluster_metadata-0"
    files = sorted(folder.glob("*.index")) + sorted(folder.glob("*.timeindex")) + \
        sorted(kafka_logdirs.killed.glob("rolled-0/*.timeindex"))
    kafka = apache.run_tool(DEFAULT_VERSION, kls.DUMP_LOG_SEGMENTS, "--index-sanity-check",
                            "--files", ",".join(map(str, files)), check=False, binary=True)
    ours = subprocess.run([sys.executable, "-m", "kproto", "dump-log", "--format", "kafka",
                           "--index-sanity-check", *map(str, files)], capture_output=True,
                          timeout=120)
    assert kafka.returncode == ours.returncode == 1
    assert ours.stdout == kafka.stdout
    assert ours.stdout.count(b"Dumping ") == 2   # the offset index passes, the time index not
    message = ours.stderr.decode().split("CorruptIndexException: ", 1)[1].strip()
    assert f"CorruptIndexException: {message}" in kafka.stderr.decode()


def test_txnindex_and_producer_snapshots_are_kafkas(kafka_logdirs):
    root = kafka_logdirs.clean
    txn = _files(root, "*.txnindex")
    snaps = _files(root, "*.snapshot", internal=True)
    assert txn and snaps
    dumps = kls.run_dump(DEFAULT_VERSION, txn + snaps)
    aborted = 0
    for f in txn:
        ours = [f"version: {e['version']} producerId: {e['producer_id']} "
                f"firstOffset: {e['first_offset']} lastOffset: {e['last_offset']} "
                f"lastStableOffset: {e['last_stable_offset']}" for e in dump_path(str(f), _args())]
        _assert_same(ours, [line for line in dumps[str(f)] if line], str(f))
        aborted += len(ours)
    assert aborted == 2
    producers = 0
    for f in snaps:
        ours = []
        for e in dump_path(str(f), _args()):
            if e["type"] != "producer":
                continue
            # Kafka states the batch's first sequence (a snapshot stores the last and the
            # offset delta) and the entry's timestamp twice
            first_txn = e["current_txn_first_offset"]
            ours.append(f"producerId: {e['producer_id']} producerEpoch: {e['producer_epoch']} "
                        f"coordinatorEpoch: {e['coordinator_epoch']} currentTxnFirstOffset: "
                        f"{'OptionalLong.empty' if first_txn < 0 else f'OptionalLong[{first_txn}]'} "
                        f"lastTimestamp: {e['timestamp']} "
                        f"firstSequence: {e['last_sequence'] - e['offset_delta']} "
                        f"lastSequence: {e['last_sequence']} lastOffset: {e['last_offset']} "
                        f"offsetDelta: {e['offset_delta']} timestamp: {e['timestamp']}")
        _assert_same(ours, [line for line in dumps[str(f)] if line], str(f))
        producers += len(ours)
    assert producers >= 3


# Kafka's TransactionState names, by the id a __transaction_state value stores
_TXN_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
               "CompleteAbort", "Dead", "PrepareEpochFence")


def _consumer_protocol_json(b64: str, name: str) -> dict[str, Any]:
    from kproto.codecs import message
    from kproto.storage.internal import _VERSION

    raw = base64.b64decode(b64)
    (version,) = _VERSION.unpack_from(raw, 0)
    codec = message(name)
    return codec.to_json(codec.decode(memoryview(raw)[2:], version), version)


def _kafka_form(topic: str, doc: dict[str, Any]) -> tuple[str | None, str | None]:
    """kproto's decoded record as Kafka's --offsets-decoder / --transaction-log-decoder print
    its key and payload (JSON texts compared as data)."""
    key = {"type": str(doc["key"]["version"]), "data": doc["key"]["data"]}
    value = doc["value"]
    if value is None:
        return json.dumps(key), None
    data = dict(value["data"])
    if topic == "__transaction_state":
        # kproto keeps the state id the record stores; Kafka prints its name
        data["transactionStatus"] = _TXN_STATES[data["transactionStatus"]]
    if value["type"] == "GroupMetadataValue":
        # the schema declares subscription and assignment as bytes (kproto keeps them so);
        # Kafka's decoder decodes them with the consumer protocol when the group uses it
        data["members"] = [{**m, "subscription": _consumer_protocol_json(
                                m["subscription"], "ConsumerProtocolSubscription"),
                            "assignment": _consumer_protocol_json(
                                m["assignment"], "ConsumerProtocolAssignment")}
                           for m in data["members"]]
    return json.dumps(key), json.dumps({"version": str(value["version"]), "data": data})


@pytest.mark.parametrize("topic,option", [("__consumer_offsets", "--offsets-decoder"),
                                          ("__transaction_state", "--transaction-log-decoder"),
                                          ("__share_group_state", "--share-group-state-decoder")])
def test_internal_topics_decode_as_kafkas(kafka_logdirs, topic, option):
    segments = sorted(kafka_logdirs.clean.glob(f"{topic}-*/*.log"))
    assert segments
    dumps = kls.run_dump(DEFAULT_VERSION, segments, option)
    records = 0
    for seg in segments:
        _start, theirs = kls.parse_log_dump(dumps[str(seg)])
        ours_batches = _kproto_batches(seg)
        # batch facts as in a plain dump; the records' keys and values decoded
        strip = [{k: v for k, v in b.items() if k != "records"} for b in theirs]
        _assert_same([{k: v for k, v in b.items() if k != "records"} for b in ours_batches],
                     strip, str(seg))
        decoded = [d for d in dump_path(str(seg), _args(decode_internal=True))]
        theirs_records = [r for b in theirs for r in b["records"]]
        assert len(decoded) == len(theirs_records)
        for d, r in zip(decoded, theirs_records):
            assert d["offset"] == r["offset"]
            if d["is_control"]:
                continue
            key, payload = _kafka_form(topic, d)
            assert json.loads(r["key"]) == json.loads(key), (seg, r["offset"])
            if payload is None:
                assert r["payload"] in (None, "<DELETE>"), (seg, r)
            else:
                assert json.loads(r["payload"]) == json.loads(payload), (seg, r["offset"])
            records += 1
    # the share coordinator writes a snapshot, then an update per batch of acknowledgements
    assert records >= (3 if topic == "__share_group_state" else 4)


def test_share_group_state_is_what_the_share_consumer_did(kafka_logdirs):
    """The share coordinator's records, as kproto decodes them: the partition's state made
    (ShareSnapshot), then each acknowledgement of Kafka's Java share consumer (ShareUpdate),
    the last one of them stating every record acknowledged, the released one delivered twice."""
    segments = sorted(kafka_logdirs.clean.glob("__share_group_state-*/*.log"))
    decoded = [d for seg in segments for d in dump_path(str(seg), _args(decode_internal=True))
               if not d["is_control"]]
    assert [d["key"]["type"] for d in decoded][:1] == ["ShareSnapshotKey"]
    updates = [d["value"]["data"] for d in decoded if d["key"]["type"] == "ShareUpdateKey"]
    assert len(updates) >= 2
    assert {d["key"]["data"]["groupId"] for d in decoded} == {"share-group"}
    # what the consumer was told of each record it accepted
    delivered = {r["offset"]: r["delivery"] for r in kafka_logdirs.shared}
    assert delivered == {o: 2 if o == 0 else 1 for o in range(kls.SHARED_RECORDS)}
    # the state of each offset after the last update (ACKNOWLEDGED is delivery state 2)
    state: dict[int, tuple[int, int]] = {}
    for u in updates:
        for b in u["stateBatches"]:
            for o in range(b["firstOffset"], b["lastOffset"] + 1):
                state[o] = (b["deliveryState"], b["deliveryCount"])
    assert {o: s for o, s in state.items() if o in delivered} == \
        {o: (2, n) for o, n in delivered.items()}


def test_cluster_metadata_log_and_snapshots_decode_as_kafkas(kafka_logdirs):
    folder = next(kafka_logdirs.clean.glob("__cluster_metadata-0"))
    files = sorted(folder.glob("*.log")) + sorted(folder.glob("*.checkpoint"))
    assert any(f.suffix == ".checkpoint" for f in files)
    dumps = kls.run_dump(DEFAULT_VERSION, files, "--cluster-metadata-decoder")
    records = controls = 0
    for f in files:
        start, theirs = kls.parse_log_dump(dumps[str(f)])
        assert start == int(f.stem.split("-")[0]), f
        _assert_same([{k: v for k, v in b.items() if k != "records"} for b in _kproto_batches(f)],
                     [{k: v for k, v in b.items() if k != "records"} for b in theirs], str(f))
        decoded = list(dump_path(str(f), _args(decode_internal=True)))
        theirs_records = [r for b in theirs for r in b["records"]]
        assert len(decoded) == len(theirs_records), f
        for d, r in zip(decoded, theirs_records):
            assert d["offset"] == r["offset"]
            if d["is_control"]:
                # KRaft control records (LeaderChange, SnapshotHeader/Footer, KRaftVersion,
                # KRaftVoters): kproto's decoder marks them without decoding their body
                assert r["payload"] is None and r["tail"].split(" ")[0].rstrip(":") in (
                    "LeaderChange", "SnapshotHeader", "SnapshotFooter", "KRaftVersion",
                    "KRaftVoters"), r
                controls += 1
                continue
            assert json.loads(r["payload"]) == {k: d[k] for k in ("type", "version", "data")}, \
                (f, r["offset"])
            records += 1
    assert records >= 20 and controls >= 3


def _partition_state(kafka, topic: str) -> tuple[int | None, list[int], list[int]]:
    """The partition's leader, replicas and ISR as a running broker's Metadata states them."""
    p = kafka.metadata([topic]).topics[0].partitions[0]
    return (p.leader_id if p.error_code == 0 and p.leader_id >= 0 else None,
            list(p.replica_nodes), list(p.isr_nodes))


def _produce_acked(bootstrap: str, topic: str, n: int, prefix: str, acks: str) -> list[int]:
    """``n`` records produced with ``acks``; the offsets the leader acknowledged."""
    p = kls._producer(bootstrap, acks=acks)
    offsets: list[int] = []

    def done(err, msg):
        assert err is None, err
        offsets.append(msg.offset())
    for i in range(n):
        p.produce(topic, f"{prefix}-{i}".encode(), f"k{i}".encode(), on_delivery=done)
    assert p.flush(30) == 0
    return offsets


@pytest.mark.apache_kafka(nodes=3, controllers=1)
def test_replicas_through_leader_changes_are_read_as_kafkas(apache_kafka_cluster):
    """Three brokers' replicas of a partition that went through leader changes: acks=all
    records (epoch 0); acks=1 records only its leader has (the followers paused) before it is
    killed; a new leader elected from the ISR that writes over those offsets; the old leader
    back as a follower that truncated its divergent tail; the preferred replica made leader
    again. Every replica's segments read by kproto state what DumpLogSegments states (batch
    and record facts, leader epochs), kproto's reading of each replica's
    leader-epoch-checkpoint is where each epoch starts in that log, and read_arrow over each
    broker's log dir gives the rows a consumer reads."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    import pyarrow as pa

    from kproto.storage import read_arrow
    from kproto.storage.partition import Partition

    kafka = apache_kafka_cluster
    topic = f"epochs-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1, 3, configs={"min.insync.replicas": 1,
                                             "unclean.leader.election.enable": "false"})
    kafka.wait_for(lambda: len(_partition_state(kafka, topic)[2]) == 3, 30, "a full ISR")
    first, replicas, _ = _partition_state(kafka, topic)
    assert first == replicas[0]   # the preferred replica leads a new partition
    _produce_acked(kafka.bootstrap, topic, 12, "all", "all")
    followers = [r for r in replicas if r != first]
    # acks=1 records only the leader has: its followers frozen (0.15 s here, well below the
    # broker session timeout: they stay registered and in the ISR), then the leader killed
    only_leader = kls._producer("%s:%d" % kafka.address(first), acks="1")
    only_leader.produce(topic, b"warm", b"w")
    assert only_leader.flush(30) == 0
    lost: list[int] = []
    for f in followers:
        kafka.pause(f)
    try:
        for i in range(5):
            only_leader.produce(topic, f"lost-{i}".encode(), b"l",
                                on_delivery=lambda err, msg: lost.append(msg.offset()))
        assert only_leader.flush(10) == 0 and len(lost) == 5
        kafka.stop(first, abrupt=True)
    finally:
        for f in followers:
            kafka.resume(f)
    del only_leader
    kafka.wait_for(lambda: _partition_state(kafka, topic)[0] in followers, 30, "a new leader")
    running = ",".join("%s:%d" % kafka.address(f) for f in followers)
    over = _produce_acked(running, topic, 8, "new", "1")
    assert over[0] == lost[0]   # the new leader writes where the lost records were
    kafka.start(first)
    kafka.wait_for(lambda: len(_partition_state(kafka, topic)[2]) == 3, 60, "the old leader in the ISR")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    elected = admin.elect_leaders(confluent_kafka.ElectionType.PREFERRED,
                                  [confluent_kafka.TopicPartition(topic, 0)]).result(30)
    assert all(err is None for err in elected.values()), elected
    kafka.wait_for(lambda: _partition_state(kafka, topic)[0] == first, 30, "the preferred leader")
    _produce_acked(kafka.bootstrap, topic, 6, "back", "all")
    consumed = kls.consume_all(kafka.bootstrap, topic, "read_uncommitted")
    assert [v for *_, v, _h, _t in consumed if v and v.startswith(b"lost")] == []

    dirs = {r: kafka.log_dir(r) / f"{topic}-0" for r in replicas}
    # every replica has the records a consumer read (the followers fetch on their own time)
    def log_end(d: Path) -> int:
        return max((b.last_offset + 1 for _seg, b in Partition.open(str(d)).batches()), default=0)
    kafka.wait_for(lambda: all(log_end(d) == consumed[-1][1] + 1 for d in dirs.values()), 30,
                   "every replica caught up")
    segments = [seg for d in dirs.values() for seg in sorted(d.glob("*.log"))]
    dumps = kls.run_dump(DEFAULT_VERSION, segments, "--deep-iteration", "--print-data-log")
    logs = {}
    for r, d in dirs.items():
        batches = []
        for seg in sorted(d.glob("*.log")):
            _start, theirs = kls.parse_log_dump(dumps[str(seg)])
            _assert_same(_kproto_batches(seg), theirs, str(seg))
            batches += theirs
        logs[r] = batches
        # where each epoch starts in this replica's log, as Kafka's tool states its batches
        starts: list[tuple[int, int]] = []
        for b in batches:
            if not starts or starts[-1][0] != b["partition_leader_epoch"]:
                starts.append((b["partition_leader_epoch"], b["base_offset"]))
        # Kafka writes the file when a replica learns of an epoch (a follower from the batches
        # it fetches): wait for it to state the log's last epoch
        def epochs(d: Path = d) -> list[tuple[int, int]]:
            ckpt = Partition.open(str(d)).leader_epochs
            return [(e.epoch, e.start_offset) for e in ckpt.entries] if ckpt else []
        kafka.wait_for(lambda: epochs()[-1:] == starts[-1:], 15,
                       f"broker {r}'s leader-epoch-checkpoint")
        assert epochs() == starts, r
        assert len(starts) >= 3, (r, starts)
        table = read_arrow(str(kafka.log_dir(r)), topics=[topic])
        ts = table.column("timestamp").cast(pa.int64()).to_pylist()
        rows = [(x["partition"], x["offset"], x["key"], x["value"],
                 [(h["key"], h["value"]) for h in x["headers"]], t)
                for x, t in zip(table.select(["partition", "offset", "key", "value", "headers"])
                                .to_pylist(), ts)]
        assert rows == consumed, r
    # and kproto's --format kafka prints what Kafka's tool prints for every file of them
    kls.assert_format_kafka_is_kafkas(DEFAULT_VERSION, [
        f for d in dirs.values() for ext in kls.DUMPED_SUFFIXES for f in sorted(d.glob(f"*.{ext}"))])
    # the replicas hold the same batches; the old leader's lost tail is gone from its log
    facts = {r: [(b["base_offset"], b["partition_leader_epoch"], b["crc"]) for b in batches]
             for r, batches in logs.items()}
    assert facts[first] == facts[followers[0]] == facts[followers[1]]
    assert all(not (r["payload"] or "").startswith("lost")
               for b in logs[first] for r in b["records"])


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_read_arrow_rows_are_what_a_consumer_read(kafka_logdirs, isolation):
    import pyarrow as pa

    from kproto.storage import read_arrow

    checked = set()
    for (topic, iso), consumed in kafka_logdirs.consumed.items():
        if iso != isolation:
            continue
        table = read_arrow(str(kafka_logdirs.clean), topics=[topic], isolation=isolation)
        ts = table.column("timestamp").cast(pa.int64()).to_pylist()
        rows = [(r["partition"], r["offset"], r["key"], r["value"],
                 [(h["key"], h["value"]) for h in r["headers"]], t)
                for r, t in zip(table.select(["partition", "offset", "key", "value", "headers"])
                                .to_pylist(), ts)]
        assert rows == consumed, topic
        checked.add(topic)
    assert {"txn", "compact", "deleted", "codec-zstd"} <= checked
    if isolation == "read_committed":   # the aborted transactions' records are not there
        assert len(kafka_logdirs.consumed[("txn", "read_committed")]) < \
            len(kafka_logdirs.consumed[("txn", "read_uncommitted")])


@pytest.mark.parametrize("state", STATES)
def test_format_kafka_prints_what_kafkas_tool_prints(kafka_logdirs, state):
    """``kproto dump-log --format kafka`` is byte for byte Kafka's ``--deep-iteration
    --print-data-log`` output over every segment, KRaft snapshot, index, transaction index and
    producer snapshot (binary values of internal topics included)."""
    files = kls.dumped_files(getattr(kafka_logdirs, state))
    assert len(files) >= 50
    kls.assert_format_kafka_is_kafkas(DEFAULT_VERSION, files)


def test_format_kafka_ignores_files_kafkas_tool_does_not_dump(tmp_path, capsys):
    from kproto.cli.dump_log import run

    f = tmp_path / "partition.metadata"
    f.write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    empty = tmp_path / "00000000000000000000.index"
    empty.write_bytes(b"")
    assert run(_args(files=[str(f), str(empty)], format="kafka")) == 0
    out, err = capsys.readouterr()
    assert out == f"Dumping {empty}\n{empty} is empty.\n"
    assert err == f"Ignoring unknown file {f}\n"


def test_format_kafka_refuses_old_magic_and_skips_other_files_of_a_folder(tmp_path, capsys):
    from kproto.cli.dump_log import run
    from kproto.records.builder import LegacyMessageBuilder

    part = tmp_path / "old-0"
    part.mkdir()
    b = LegacyMessageBuilder(1)
    b.append(1_700_000_000_000, b"k", b"v")
    (part / "00000000000000000000.log").write_bytes(b.build())
    (part / "00000000000000000000.index").write_bytes(b"")
    (part / "leader-epoch-checkpoint").write_text("0\n0\n")
    assert run(_args(files=[str(part)], format="kafka")) == 1
    out, err = capsys.readouterr()
    # the folder's checkpoint is not Kafka's tool's business; a magic 1 batch is not done
    assert out == f"Dumping {part / '00000000000000000000.index'}\n" \
                  f"{part / '00000000000000000000.index'} is empty.\n"
    assert "magic 2 only" in err and "Ignoring" not in err


@pytest.mark.parametrize("raw,java", [
    # what ``new String(bytes, UTF_8)`` makes of malformed UTF-8 (Java 17), re-encoded
    ("eda080", "efbfbd"), ("eda041", "efbfbd41"), ("eda0", "efbfbd"), ("edbfbf41", "efbfbd41"),
    ("41eda0", "41efbfbd"), ("eda0eda080", "efbfbdefbfbd"), ("ed9fbf", "ed9fbf"),
    ("ed41", "efbfbd41"), ("eda080c3a9", "efbfbdc3a9"), ("f09f41", "efbfbd41"),
    ("e08041", "efbfbdefbfbd41"), ("f4908080", "efbfbdefbfbdefbfbdefbfbd")])
def test_format_kafka_replaces_malformed_utf8_as_java_does(raw, java):
    from kproto.cli.dump_log import _java_string

    text = _java_string(base64.b64encode(bytes.fromhex(raw)).decode())
    assert text.encode("utf-8").hex() == java


def test_kafkas_metadata_snapshot_loads_to_the_image_of_its_log(kafka_logdirs):
    """kproto's image of a snapshot Apache Kafka wrote is the image of Kafka's log up to the
    snapshot's end, and the image's own snapshot records (what a kproto cluster writes) give
    it back."""
    from kproto.broker.cluster.snapshots import decode_snapshot
    from kproto.storage.metadata_image import MetadataImage, encode_metadata_record
    from kproto.storage.partition import Partition

    folder = next(kafka_logdirs.clean.glob("__cluster_metadata-0"))
    snaps = sorted(f for f in folder.glob("*.checkpoint") if not f.name.startswith("0" * 20))
    assert snaps
    end = int(snaps[-1].name.split("-")[0])
    from_log = MetadataImage()
    for _seg, batch in Partition.open(str(folder)).batches():
        if batch.is_control:
            continue
        for r in batch.records():
            if r.offset < end and r.value is not None:
                from_log.replay_value(bytes(r.value), r.offset)
    from_snapshot = MetadataImage()
    for value in decode_snapshot(snaps[-1].read_bytes())[1]:
        from_snapshot.replay_value(value, end - 1)
    again = MetadataImage()
    for obj, version in from_snapshot.records():
        again.replay_value(encode_metadata_record(obj, version), end - 1)
    assert from_log.topics and from_log.brokers
    for image in (from_snapshot, again):
        assert image.topics == from_log.topics
        assert image.brokers == from_log.brokers
        assert image.configs == from_log.configs
        assert image.features == from_log.features
        assert image.controllers == from_log.controllers
        assert image.next_producer_id == from_log.next_producer_id
