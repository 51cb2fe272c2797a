"""KRaft metadata snapshots, sans cluster: the ``.checkpoint`` file format, and the Raft
replica writing snapshots, truncating its log below them and serving FetchSnapshot to a
replica behind the log start, on test_raft's in-memory network (one fake clock)."""
from __future__ import annotations

import os
import random
import shutil
from typing import Any, Optional

import pytest

from kproto.broker.cluster.raft import (FETCH_SNAPSHOT, METADATA_TOPIC, KRaftReplica, RaftConfig,
                                       open_metadata_log)
from kproto.broker.cluster.snapshots import (SnapshotId, decode_snapshot, encode_snapshot,
                                             snapshot_file_name)
from kproto.codecs import request as request_codec
from kproto.error_codes import ErrorCode
from kproto.errors import DecodeError
from kproto.records.control import decode_control
from kproto.records.reader import BatchReader

from test_raft import CLUSTER_ID, WALL_BASE, Net, Transport


# ---------------------------------------------------------------------------- the file format
def test_snapshot_file_is_header_records_footer() -> None:
    values = [b"\x01\x02\x00" + bytes([i]) * 40 for i in range(5)]
    data = encode_snapshot(values, epoch=7, now_ms=1000, last_contained_timestamp=900)
    batches = list(BatchReader(data, verify_crc=True))
    assert [(b.base_offset, b.last_offset, b.is_control) for b in batches] == [
        (0, 0, True), (1, 5, False), (6, 6, True)]
    assert {b.partition_leader_epoch for b in batches} == {7}
    head = decode_control(*(lambda r: (r.key, r.value))(next(iter(batches[0].records()))))
    foot = decode_control(*(lambda r: (r.key, r.value))(next(iter(batches[2].records()))))
    assert (head.type, head.message.last_contained_log_timestamp, foot.type) == (
        "SNAPSHOT_HEADER", 900, "SNAPSHOT_FOOTER")
    assert decode_snapshot(data) == (900, values)
    assert snapshot_file_name(SnapshotId(59, 1)) == "00000000000000000059-0000000001.checkpoint"


def test_a_damaged_snapshot_is_a_decode_error() -> None:
    data = encode_snapshot([b"\x01\x02\x00x"], epoch=1, now_ms=1, last_contained_timestamp=1)
    with pytest.raises(DecodeError, match="partial batch"):
        decode_snapshot(data[:-5])
    header_only = list(BatchReader(data))[0]
    with pytest.raises(DecodeError, match="SnapshotFooter"):
        decode_snapshot(bytes(data[:header_only.size_in_bytes]))
    with pytest.raises(DecodeError, match="SnapshotHeader"):
        decode_snapshot(bytes(data[header_only.size_in_bytes:]))


# ---------------------------------------------------------------------------- Raft, simulated
class KV:
    """A state machine of every committed value, in order, with snapshots."""

    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.loaded: list[int] = []

    def handle_commit(self, records: list[tuple[int, bytes]]) -> None:
        self.values += [v for _, v in records]

    def handle_leader_change(self, leader_id: Optional[int], epoch: int) -> None:
        pass

    def snapshot_records(self) -> list[bytes]:
        return list(self.values)

    def handle_load_snapshot(self, end_offset: int, values: list[bytes]) -> None:
        self.loaded.append(end_offset)
        self.values = list(values)


class SnapNet(Net):
    """test_raft's network, every node's listener a :class:`KV`, metadata logs in segments
    of the config's size."""

    def start(self, n: int) -> KRaftReplica:
        log = open_metadata_log(os.path.join(self.base, f"node{n}"), self.config)
        kv = self.__dict__.setdefault("kvs", {})[n] = KV()
        self.nodes[n] = KRaftReplica(n, self.voters, log, cluster_id=CLUSTER_ID,
                                     transport=Transport(self, n), timer=self.timer,
                                     config=self.config, rng=random.Random(self.rng.random()),
                                     listener=kv, wall_ms=lambda: WALL_BASE + self.clock.now_ms())
        return self.nodes[n]


SIM_CONFIG = RaftConfig(max_bytes_between_snapshots=600, max_retention_bytes=0, segment_bytes=1024,
                        fetch_snapshot_max_bytes=256)


def _fill(net: SnapNet, lead: KRaftReplica, batches: int) -> None:
    for i in range(batches):
        lead.append([b"value-%04d-" % i + b"x" * 30])
        net.run(20)
    net.run(3_000, net.caught_up())


def test_snapshots_truncate_the_log_and_a_wiped_observer_fetches_one(tmp_path) -> None:
    net = SnapNet(str(tmp_path), config=SIM_CONFIG)
    lead = net.elect()
    _fill(net, lead, 80)
    want = net.kvs[lead.node_id].values
    assert len(want) == 80
    for n, node in net.nodes.items():
        assert node.snapshots.ids, n
        # retention 0: the log starts at the latest snapshot but one (Kafka keeps the
        # latest), segments wholly below it are gone
        assert node.log.log_start_offset == node.snapshots.earliest.end_offset > 0, n
        assert node.log.segments[0].base_offset > 0
        assert net.kvs[n].values == want
    # the observer is wiped: its Fetch at 0 is below the leader's log start
    net.crash(4)
    shutil.rmtree(os.path.join(str(tmp_path), "node4"))
    net.sent.clear()
    observer = net.start(4)
    net.run(5_000, net.caught_up())
    assert net.caught_up()()
    chunks = [s for s in net.sent if s[2] == FETCH_SNAPSHOT and s[0] == 4]
    size = lead.snapshots.size(observer.snapshots.earliest)
    assert len(chunks) >= -(-size // SIM_CONFIG.fetch_snapshot_max_bytes) >= 2
    assert net.kvs[4].loaded and net.kvs[4].values == want
    assert observer.log.log_start_offset == net.kvs[4].loaded[0]
    assert not [f for f in os.listdir(observer.log.path) if f.endswith(".part")]
    # a voter restarted loads its latest snapshot, then the tail
    voter = next(n for n in net.voters if n != lead.node_id)
    latest = net.nodes[voter].snapshots.latest
    net.crash(voter)
    net.start(voter)
    net.run(5_000, net.caught_up())
    assert net.kvs[voter].loaded[0] == latest.end_offset
    assert net.kvs[voter].values == want


def test_fetch_snapshot_answers(tmp_path) -> None:
    net = SnapNet(str(tmp_path), config=SIM_CONFIG)
    lead = net.elect()
    _fill(net, lead, 40)
    sid = lead.snapshots.latest
    cls = request_codec(FETCH_SNAPSHOT).cls

    def ask(node: KRaftReplica, end: int, epoch: int, position: int, leader_epoch: int,
            max_bytes: int = 100) -> Any:
        got: list = []
        node.handle(FETCH_SNAPSHOT, 0, cls(cluster_id=None, replica_id=4, max_bytes=max_bytes,
                                           topics=[cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[
                                               cls.PartitionSnapshot(partition=0,
                                                                     current_leader_epoch=leader_epoch,
                                                                     snapshot_id=cls.SnapshotId(end_offset=end, epoch=epoch),
                                                                     position=position)])]),
                    got.append)
        return got[0].topics[0].partitions[0]
    data = lead.snapshots.read(sid)
    p = ask(lead, sid.end_offset, sid.epoch, 10, lead.epoch)
    assert (p.error_code, p.size, p.position, bytes(p.unaligned_records)) == (0, len(data), 10, data[10:110])
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (lead.node_id, lead.epoch)
    assert ask(lead, sid.end_offset + 1, sid.epoch, 0, lead.epoch).error_code == ErrorCode.SNAPSHOT_NOT_FOUND
    assert ask(lead, sid.end_offset, sid.epoch, len(data), lead.epoch).error_code == ErrorCode.POSITION_OUT_OF_RANGE
    assert ask(lead, sid.end_offset, sid.epoch, 0, lead.epoch + 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = next(r for n, r in net.nodes.items() if n != lead.node_id)
    assert ask(follower, sid.end_offset, sid.epoch, 0, lead.epoch).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_snapshot_by_time_and_no_truncation_within_retention(tmp_path) -> None:
    """``max_snapshot_interval_ms`` alone makes a snapshot once new records came; with the
    default retention (100 MiB) the log keeps its start: Kafka deletes nothing it need not."""
    config = RaftConfig(max_bytes_between_snapshots=1 << 30, max_snapshot_interval_ms=2_000)
    net = SnapNet(str(tmp_path), config=config)
    lead = net.elect()
    _fill(net, lead, 3)
    assert all(not n.snapshots.ids for n in net.nodes.values())
    net.run(2_500)
    assert all(not n.snapshots.ids for n in net.nodes.values())   # no new records, no snapshot
    _fill(net, lead, 1)
    for n, node in net.nodes.items():
        assert node.snapshots.ids == [(node.high_watermark, lead.epoch)], n
        assert node.log.log_start_offset == 0
        assert decode_snapshot(node.snapshots.read(node.snapshots.latest))[1] == net.kvs[n].values


def test_a_snapshot_past_the_log_end_at_start_truncates_the_log(tmp_path) -> None:
    """A follower stopped between downloading a snapshot and truncating its log (Kafka's
    case in ``KafkaMetadataLog.apply``): at start the log begins at the snapshot."""
    net = SnapNet(str(tmp_path), config=SIM_CONFIG)
    lead = net.elect()
    _fill(net, lead, 60)
    sid = lead.snapshots.latest
    net.crash(4)
    shutil.rmtree(os.path.join(str(tmp_path), "node4"))
    os.makedirs(os.path.join(str(tmp_path), "node4", "__cluster_metadata-0"))
    shutil.copy(lead.snapshots.file(sid), os.path.join(str(tmp_path), "node4", "__cluster_metadata-0"))
    with open(os.path.join(str(tmp_path), "node4", "__cluster_metadata-0",
                           snapshot_file_name(sid)[:-len(".checkpoint")] + ".checkpoint.part"), "wb") as f:
        f.write(b"half a download")
    observer = net.start(4)
    assert observer.log.log_start_offset == observer.log.log_end_offset == sid.end_offset
    assert observer.snapshots.ids == [sid]
    assert not [f for f in os.listdir(observer.log.path) if f.endswith(".part")]
    net.sent.clear()
    net.run(3_000, net.caught_up())
    assert net.kvs[4].loaded == [sid.end_offset] and net.kvs[4].values == net.kvs[lead.node_id].values
    # it had the snapshot: no FetchSnapshot needed
    assert not [s for s in net.sent if s[2] == FETCH_SNAPSHOT]


def test_a_snapshot_damaged_on_the_way_is_fetched_again(tmp_path) -> None:
    net = SnapNet(str(tmp_path), config=SIM_CONFIG)
    lead = net.elect()
    _fill(net, lead, 60)
    read = lead.snapshots.read
    damaged: list[int] = []

    def flip_once(sid: SnapshotId, position: int = 0, max_bytes: int = -1) -> bytes:
        data = read(sid, position, max_bytes)
        if position == 0 and max_bytes != -1 and not damaged:   # a FetchSnapshot's first chunk
            damaged.append(position)
            data = data[:30] + bytes([data[30] ^ 0xFF]) + data[31:]
        return data
    lead.snapshots.read = flip_once  # type: ignore[method-assign]
    net.crash(4)
    shutil.rmtree(os.path.join(str(tmp_path), "node4"))
    net.start(4)
    net.run(5_000, net.caught_up())
    assert damaged and net.caught_up()()
    assert net.kvs[4].values == net.kvs[lead.node_id].values
