"""The writer reproduces the broker's partition folders byte for byte when fed the same appends,
and what it writes reads back."""
from __future__ import annotations

import os

import pytest

from kproto.errors import EncodeError
from kproto.records import RecordBatchBuilder
from kproto.storage.dump import dump_file
from kproto.storage.partition import Partition
from kproto.storage.reader import read_arrow
from kproto.storage.writer import LogDirWriter, PartitionWriter

from storage_fixtures import LOGDIRS, load_expected, partition_dirs

PARTS = partition_dirs()


def _appends(part: Partition):
    """The fixture's batches as appends: one batch each, except that a run of batches ending at
    an offset-index entry's offset is one append (users-0 was written with multi-batch
    appends; only those at index entries can be recognised)."""
    for seg in part.segments:
        data = seg.read()
        idx = seg.offset_index
        ends = dict(zip(idx.positions.tolist(), idx.offsets.tolist())) if idx is not None else {}
        group, until = [], None
        for b in seg.scan(data=data):
            if until is None and ends.get(b.position, -1) > b.last_offset:
                until = ends[b.position]
            group.append(data[b.position:b.position + b.size_in_bytes])
            if until is None or b.last_offset >= until:
                yield b"".join(group)
                group, until = [], None


def _crashed(src: str) -> bool:
    return any(load_expected(os.path.join(os.path.relpath(src, LOGDIRS), n + ".jsonl"))[0]
               .get("preallocated") for n in os.listdir(src) if n.endswith(".index"))


@pytest.mark.parametrize("rel", PARTS)
def test_replay_reproduces_partition_folder(rel, tmp_path):
    src = os.path.join(LOGDIRS, rel)
    part = Partition.open(src)
    crashed = _crashed(src)
    index_bytes = os.path.getsize(os.path.join(src, part.segments[-1].name[:-4] + ".index")) \
        if crashed else 10 * 1024 * 1024
    w = PartitionWriter(str(tmp_path), part.topic, part.partition, topic_id=part.topic_id,
                        segment_bytes=65536, segment_index_bytes=index_bytes)
    for data in _appends(part):
        w.append(data)
    w.close(clean=not crashed)
    assert sorted(os.listdir(w.path)) == sorted(os.listdir(src))
    info = load_expected(os.path.join(rel, "partition.json"))[0]
    for name in sorted(os.listdir(src)):
        with open(os.path.join(src, name), "rb") as f:
            want = f.read()
        with open(os.path.join(w.path, name), "rb") as f:
            got = f.read()
        seg = next((s for s in info["segments"] if f"{s['base_offset']:020d}.log" == name), None)
        if seg is not None and seg["valid_bytes"] < seg["log_size"]:
            want = want[:seg["valid_bytes"]]  # a torn tail is not something a writer writes
        if "users-0" in rel and name.endswith("index") and got != want:
            # appends not starting at an index entry cannot be recovered from the files:
            # check the entries still follow Kafka's rule against the batches
            batches = [x for x in load_expected(
                os.path.join(rel, name.split(".")[0] + ".log.jsonl")) if x["type"] == "batch"]
            starts = {x["position"]: x for x in batches}
            ends = {x["last_offset"]: x for x in batches}
            for e in dump_file(os.path.join(w.path, name))[1:]:
                assert e["offset"] in ends
                if name.endswith(".index"):
                    assert e["offset"] >= starts[e["position"]]["last_offset"]
                else:
                    assert e["timestamp"] == ends[e["offset"]]["max_timestamp"]
            continue
        assert got == want, name


def _batch(w, n, ts, **kw):
    b = RecordBatchBuilder(base_offset=w.next_offset, **kw)
    for i in range(n):
        b.append(ts + i, f"k{i}".encode(), f"value-{w.next_offset + i}".encode() * 20,
                 [("h", b"x")])
    return b.build()


def _marker(w, commit, pid, epoch, ts):
    b = RecordBatchBuilder(base_offset=w.next_offset, producer_id=pid, producer_epoch=epoch,
                           transactional=True, control=True)
    b.append_end_txn_marker(commit, 7, ts)
    return b.build()


def test_log_dir_writer_round_trip(tmp_path):
    d = LogDirWriter(str(tmp_path / "logs"), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A",
                     segment_bytes=20000)
    w = d.partition("my.topic-x_y", 3)
    ts = 1_700_000_000_000
    w.append(_batch(w, 10, ts, compression="lz4", partition_leader_epoch=0))
    # producer 9: committed transaction, then an aborted one interleaved with plain batches
    w.append(_batch(w, 5, ts + 10, producer_id=9, producer_epoch=0, base_sequence=0,
                    transactional=True, partition_leader_epoch=2))
    w.append(_marker(w, True, 9, 0, ts + 20))
    first = w.next_offset
    for i in range(40):
        w.append(_batch(w, 5, ts + 30 + i, producer_id=9, producer_epoch=0,
                        base_sequence=5 + 5 * i, transactional=True, partition_leader_epoch=2))
        w.append(_batch(w, 3, ts + 30 + i, compression="zstd", partition_leader_epoch=2))
    last = w.next_offset
    w.append(_marker(w, False, 9, 0, ts + 99))
    w.append(_batch(w, 4, ts + 100, partition_leader_epoch=2))
    d.partition("other", 0).append(_batch(d.partition("other", 0), 3, ts))
    d.close(broker_epoch=5)

    root = str(tmp_path / "logs")
    part = Partition.open(os.path.join(root, "my.topic-x_y-3"))
    assert len(part.segments) > 2
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in part.aborted] == [(9, first, last)]
    assert [(e.epoch, e.start_offset) for e in part.leader_epochs.entries] == [(0, 0), (2, 10)]
    snap = part.snapshot(w.next_offset)
    assert [(e.producer_id, e.current_txn_first_offset, e.coordinator_epoch)
            for e in snap.entries] == [(9, -1, 7)]
    every = read_arrow(root, topics=["my.topic-x_y"])
    assert every.column("offset").to_pylist() == [o for o in range(w.next_offset)
                                                  if o not in (15, last)]
    committed = read_arrow(root, topics=["my.topic-x_y"], isolation="read_committed")
    assert len(committed) == 10 + 5 + 40 * 3 + 4
    assert dump_file(os.path.join(root, "recovery-point-offset-checkpoint"))[0]["entries"] == [
        {"topic": "my.topic-x_y", "partition": 3, "offset": w.next_offset},
        {"topic": "other", "partition": 0, "offset": 3}]
    assert dump_file(os.path.join(root, ".kafka_cleanshutdown")) == [{"version": 0, "brokerEpoch": 5}]
    assert dump_file(os.path.join(root, "meta.properties"))[0]["cluster.id"] == "Gbic2Gj7Dm9oTfmSNSzM_A"


def test_crash_close_leaves_preallocated_indexes(tmp_path):
    w = PartitionWriter(str(tmp_path), "t", 0, segment_index_bytes=4096)
    for i in range(30):
        w.append(_batch(w, 20, 1000 + i))
    w.close(clean=False)
    names = sorted(os.listdir(w.path))
    assert names == ["00000000000000000000.index", "00000000000000000000.log",
                     "00000000000000000000.timeindex", "leader-epoch-checkpoint",
                     "partition.metadata"]
    head = dump_file(os.path.join(w.path, names[0]))[0]
    assert head["preallocated"] and head["file_size"] == 4096 and head["entries"] > 0
    assert dump_file(os.path.join(w.path, names[2]))[0]["file_size"] == 4092
    assert read_arrow(w.path).num_rows == 600


def test_appends_are_checked(tmp_path):
    w = PartitionWriter(str(tmp_path), "t", 0)
    data = _batch(w, 2, 0)
    with pytest.raises(EncodeError):
        w.append(data[:-1])
    w.append(data)
    with pytest.raises(EncodeError):
        w.append(data)  # offsets below the log end


def test_a_transaction_marker_without_its_coordinator_epoch_is_refused(tmp_path):
    from kproto.records.control import encode_control_key

    w = PartitionWriter(str(tmp_path), "t", 0)
    w.append(_batch(w, 2, 0, producer_id=9, producer_epoch=0, base_sequence=0,
                    transactional=True))
    b = RecordBatchBuilder(base_offset=w.next_offset + 1, producer_id=9, producer_epoch=0,
                           transactional=True, control=True)
    b.append(5, encode_control_key(0), None)  # ABORT with no value
    with pytest.raises(EncodeError, match="ABORT marker at offset 3 has no end-transaction value"):
        w.append(_batch(w, 1, 3) + b.build())
    assert w.next_offset == 2  # nothing of the refused append was taken
    w.append(_marker(w, False, 9, 0, 6))
    w.close()
    part = Partition.open(w.path)
    assert [(a.first_offset, a.last_offset) for a in part.aborted] == [(0, 2)]
    assert [e.coordinator_epoch for e in part.snapshot(3).entries] == [7]


def test_rolls_on_full_index_and_offset_distance(tmp_path):
    w = PartitionWriter(str(tmp_path), "t", 0, segment_index_bytes=64)  # 8 offset / 5 time entries
    for i in range(60):
        w.append(_batch(w, 20, 1000 + i))
    w.close()
    part = Partition.open(w.path)
    assert len(part.segments) > 2
    assert all(len(s.time_index) <= 5 and len(s.offset_index) <= 8 for s in part.segments)
    assert read_arrow(w.path).num_rows == 1200
    w2 = PartitionWriter(str(tmp_path / "far"), "t", 0)
    w2.append(_batch(w2, 2, 0))
    b = RecordBatchBuilder(base_offset=2**31 + 10)
    b.append(5, b"k", b"v")
    w2.append(b.build())
    w2.close()
    assert [s.base_offset for s in Partition.open(w2.path).segments] == [0, 2**31 + 10]
