"""The KRaft replica (kproto.broker.cluster.raft) on an in-memory network: 3 voters and 1 observer on
one fake clock, every request and response encoded and decoded at the version sent (so the
wire format is exercised), with links the tests cut, heal and slow down."""
from __future__ import annotations

import base64
import json
import os
import random
from typing import Any, Callable, Optional

import pytest

import kproto
from kproto.broker.cluster.raft import (BEGIN_QUORUM_EPOCH, CANDIDATE, DESCRIBE_QUORUM, FETCH, FOLLOWER,
                                METADATA_TOPIC, METADATA_TOPIC_ID, RESIGNED, UNATTACHED,
                                VOTE, VOTED, KRaftReplica, NotLeaderError, RaftConfig,
                                encode_quorum_state, open_metadata_log)
from kproto.broker.timer import CallbackTask, FakeClock, SystemTimer
from kproto.codecs import message, metadata_record
from kproto.error_codes import ErrorCode
from kproto.records.control import decode_control
from kproto.storage.internal import decode_metadata_frame

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
WALL_BASE = 1_717_000_000_000


class Recorder:
    """A listener keeping what it was told."""

    def __init__(self) -> None:
        self.commits: list[tuple[int, bytes]] = []
        self.leaders: list[tuple[Optional[int], int]] = []

    def handle_commit(self, records: list[tuple[int, bytes]]) -> None:
        self.commits.extend(records)

    def handle_leader_change(self, leader_id: Optional[int], epoch: int) -> None:
        self.leaders.append((leader_id, epoch))


class Net:
    """Nodes, links and a message pump on one timer. A request sent over a cut link (or to
    or from a node that is down) fails at once, as a refused connection does (``blackhole``:
    it is lost and the sender hears None at its timeout); a response is lost."""

    def __init__(self, base: str, voters=(1, 2, 3), observers=(4,), seed: int = 7,
                 config: Optional[RaftConfig] = None, blackhole: bool = False) -> None:
        self.base = base
        self.blackhole = blackhole
        self.clock = FakeClock(0)
        self.timer = SystemTimer(clock=self.clock)
        self.rng = random.Random(seed)
        self.voters = list(voters)
        self.config = config or RaftConfig()
        self.nodes: dict[int, KRaftReplica] = {}
        self.listeners: dict[int, Recorder] = {}
        self.cut: set[tuple[int, int]] = set()   # directed (src, dst)
        self.down: set[int] = set()
        self.latency = (1, 5)
        self.sent: list[tuple[int, int, int, int]] = []   # (src, dst, api_key, version)
        for n in list(voters) + list(observers):
            self.start(n)

    def start(self, n: int) -> KRaftReplica:
        log = open_metadata_log(os.path.join(self.base, f"node{n}"))
        rec = self.listeners[n] = Recorder()
        self.nodes[n] = KRaftReplica(n, self.voters, log, cluster_id=CLUSTER_ID,
                                     transport=Transport(self, n), timer=self.timer,
                                     config=self.config, rng=random.Random(self.rng.random()),
                                     listener=rec, wall_ms=lambda: WALL_BASE + self.clock.now_ms())
        return self.nodes[n]

    def crash(self, n: int) -> None:
        """An abrupt stop: no resignation, the log closed as a crash leaves it."""
        node = self.nodes.pop(n)
        node.shutdown(graceful=False)
        node.log.close(clean=False)

    def partition(self, a: int, b: int) -> None:
        self.cut |= {(a, b), (b, a)}

    def isolate(self, a: int) -> None:
        for b in self.nodes:
            if b != a:
                self.partition(a, b)

    def heal(self) -> None:
        self.cut.clear()
        self.down.clear()

    def blocked(self, a: int, b: int) -> bool:
        return a in self.down or b in self.down or (a, b) in self.cut

    def later(self, delay: int, fn: Callable[[], None]) -> None:
        self.timer.add(CallbackTask(max(1, delay), fn))

    def run(self, ms: int, until: Optional[Callable[[], bool]] = None) -> int:
        """Advance the clock 1 ms at a time; returns the ms spent (stops early at ``until``)."""
        for i in range(ms):
            if until is not None and until():
                return i
            self.clock.advance(1)
            self.timer.advance_clock()
        return ms

    # ---- views
    def leaders(self) -> list[KRaftReplica]:
        return [r for r in self.nodes.values() if r.is_leader]

    def stable(self) -> bool:
        """One leader, every live node following it in its epoch, its epoch committed."""
        ls = self.leaders()
        if len(ls) != 1 or ls[0].high_watermark <= 0 or not ls[0]._hw_known:
            return False
        lead = ls[0]
        return all(r.leader_id == lead.node_id and r.epoch == lead.epoch
                   for r in self.nodes.values() if r.node_id not in self.down)

    def elect(self, ms: int = 10_000) -> KRaftReplica:
        self.run(ms, self.stable)
        assert self.stable(), {n: r.describe() for n, r in self.nodes.items()}
        return self.leaders()[0]

    def caught_up(self, nodes=None) -> Callable[[], bool]:
        def check() -> bool:
            lead = self.leaders()
            if len(lead) != 1:
                return False
            end = lead[0].log.log_end_offset
            return all(self.nodes[n].log.log_end_offset == end
                       and self.nodes[n].high_watermark == lead[0].high_watermark == end
                       for n in (nodes or self.nodes))
        return check


class Transport:
    def __init__(self, net: Net, src: int) -> None:
        self.net, self.src = net, src

    def send(self, dst: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Any], None], timeout_ms: int) -> None:
        net, src = self.net, self.src
        net.sent.append((src, dst, api_key, version))
        data = kproto.request(api_key).encode(body, version)
        done = [False]

        def finish(resp: Any) -> None:
            if not done[0]:
                done[0] = True
                timeout.cancel()
                on_response(resp)
        timeout = CallbackTask(timeout_ms, lambda: finish(None))
        net.timer.add(timeout)

        def deliver() -> None:
            node = net.nodes.get(dst)
            if node is None or net.blocked(src, dst):
                if not net.blackhole:
                    finish(None)
                return

            def respond(resp: Any) -> None:
                rdata = kproto.response(api_key).encode(resp, version)

                def back() -> None:
                    if not net.blocked(dst, src) and src in net.nodes:
                        finish(kproto.response(api_key).decode(rdata, version))
                    elif not net.blackhole:
                        finish(None)   # the connection broke under the request
                net.later(net.rng.randint(*net.latency), back)
            node.handle(api_key, version, kproto.request(api_key).decode(data, version), respond)
        net.later(net.rng.randint(*net.latency), deliver)


def values(node: KRaftReplica) -> list[bytes]:
    """Every data record value in the node's log, in offset order."""
    return [bytes(r.value) for b in node.log.batches() if not b.is_control for r in b.records()]


def control_records(node: KRaftReplica) -> list[tuple[int, int, Any]]:
    """(offset, batch leader epoch, decoded control record) of the node's log."""
    return [(r.offset, b.partition_leader_epoch, decode_control(r.key, r.value))
            for b in node.log.batches() if b.is_control for r in b.records()]


@pytest.fixture
def net(tmp_path) -> Net:
    return Net(str(tmp_path))


# ---------------------------------------------------------------------------- election
def test_first_election_writes_leader_change(net: Net) -> None:
    spent = net.run(10_000, net.stable)
    lead = net.elect()
    # the first election timeout is 1000-2000 ms; an election takes a few round trips
    assert spent < 2 * net.config.election_timeout_ms + 100
    assert lead.epoch >= 1 and lead.node_id in net.voters
    for n, r in net.nodes.items():
        if n != lead.node_id:
            assert r.state == FOLLOWER and r.leader_id == lead.node_id
    (offset, epoch, ctl), = control_records(lead)
    assert (offset, epoch, ctl.type) == (0, lead.epoch, "LEADER_CHANGE")
    assert ctl.fields["leader_id"] == lead.node_id and ctl.fields["voters"] == [1, 2, 3]
    assert lead.node_id in ctl.fields["granted_voters"] and len(ctl.fields["granted_voters"]) >= 2
    net.run(2_000, net.caught_up())
    for n, r in net.nodes.items():
        assert control_records(r) == control_records(lead)   # the observer too
        assert r.high_watermark == 1
        assert net.listeners[n].leaders[-1] == (lead.node_id, lead.epoch)
        assert net.listeners[n].commits == []   # control records are not passed on
    # the leader's own batches carry its epoch: the epoch cache says so
    assert lead.log.end_offset_for_epoch(lead.epoch) == (lead.epoch, 1)
    # what was sent are the versions Kafka 3.9 controllers send
    kinds = {(k, v) for _, _, k, v in net.sent}
    assert {(VOTE, 1), (BEGIN_QUORUM_EPOCH, 1), (FETCH, 17)} <= kinds


def test_quorum_state_file_as_kafka_writes_it(net: Net) -> None:
    lead = net.elect()
    follower = next(r for r in net.nodes.values() if r.state == FOLLOWER and r.is_voter)
    with open(os.path.join(follower.log.path, "quorum-state"), "rb") as f:
        text = f.read()
    assert text == (b'{"clusterId":"","leaderId":%d,"leaderEpoch":%d,"votedId":-1,"appliedOffset":0,'
                    b'"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}'
                    % (lead.node_id, lead.epoch))
    assert encode_quorum_state(3, None, 2, [3, 1, 2]) == (
        b'{"clusterId":"","leaderId":-1,"leaderEpoch":3,"votedId":2,"appliedOffset":0,'
        b'"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    # the file is QuorumStateData v0 in Kafka's JSON form
    doc = json.loads(text)
    assert doc.pop("data_version") == 0
    assert message("QuorumStateData").from_json(doc, 0).leader_epoch == lead.epoch


# ---------------------------------------------------------------------------- replication
def test_appends_commit_only_with_a_majority(net: Net) -> None:
    lead = net.elect()
    net.run(1_000, net.caught_up())
    others = [v for v in net.voters if v != lead.node_id]
    hw = lead.high_watermark
    for v in others:
        net.partition(lead.node_id, v)
    last = lead.append([b"a", b"b"])
    assert last == lead.log.log_end_offset - 1
    net.run(1_000)
    assert lead.is_leader and lead.high_watermark == hw       # no majority: not committed
    assert all(net.listeners[n].commits == [] for n in net.nodes)
    net.cut -= {(lead.node_id, others[0]), (others[0], lead.node_id)}
    net.run(1_000, lambda: lead.high_watermark > last)
    assert lead.high_watermark == last + 1                    # leader + one follower
    assert net.listeners[lead.node_id].commits == [(last - 1, b"a"), (last, b"b")]
    net.heal()
    lead.append([b"c"])
    net.run(3_000, net.caught_up())
    assert net.caught_up()()
    for n, r in net.nodes.items():    # observer included
        assert [v for _, v in net.listeners[n].commits] == [b"a", b"b", b"c"]
        assert values(r) == [b"a", b"b", b"c"]


def test_append_needs_leadership(net: Net) -> None:
    lead = net.elect()
    follower = next(r for r in net.nodes.values() if not r.is_leader)
    with pytest.raises(NotLeaderError):
        follower.append([b"x"])
    with pytest.raises(NotLeaderError):
        net.nodes[4].append([b"x"])
    assert lead.append([b"x"]) >= 1


def test_leader_loss_new_leader_and_diverging_truncation(net: Net) -> None:
    old = net.elect()
    old.append([b"c1", b"c2"])
    net.run(2_000, net.caught_up())
    assert net.caught_up()()
    old_epoch = old.epoch
    net.isolate(old.node_id)
    # written while cut off: never committed, and to be truncated away
    old.append([b"lost1"])
    old.append([b"lost2", b"lost3"])
    spent = net.run(20_000, lambda: any(r.is_leader and r.epoch > old_epoch
                                        for r in net.nodes.values()))
    new = next(r for r in net.nodes.values() if r.is_leader and r.epoch > old_epoch)
    # fetch timeout, then an election (and maybe one split vote with its backoff)
    assert spent < net.config.fetch_timeout_ms + 3 * net.config.election_timeout_ms \
        + net.config.election_backoff_max_ms
    assert new.node_id != old.node_id
    net.run(500)
    new.append([b"n1"])
    net.run(500)
    assert old.high_watermark < old.log.log_end_offset        # the old tail is uncommitted
    net.heal()
    net.run(10_000, lambda: net.caught_up()() and old.state == FOLLOWER)
    assert old.state == FOLLOWER and old.leader_id == new.node_id and old.epoch == new.epoch
    assert any("truncated" in m for m in old.log.recovery)   # the diverging-epoch path
    expected = [b"c1", b"c2", b"n1"]
    for n, r in net.nodes.items():
        assert values(r) == expected, n
        assert [v for _, v in net.listeners[n].commits] == expected, n
        # same records at the same offsets, control records included
        assert [(o, e, c.fields) for o, e, c in control_records(r)] == \
            [(o, e, c.fields) for o, e, c in control_records(new)]
    epochs = [e for _, e, _ in control_records(new)]
    assert epochs == sorted(epochs) and epochs[0] == old_epoch


def test_check_quorum_resigns_a_minority_leader(net: Net) -> None:
    lead = net.elect()
    net.run(500, net.caught_up())
    hw = lead.high_watermark
    for v in net.voters:
        if v != lead.node_id:
            net.partition(lead.node_id, v)
    lead.append([b"never"])
    t = net.run(10_000, lambda: not lead.is_leader)
    assert lead.state in (RESIGNED, CANDIDATE, UNATTACHED)
    # resigned by its own check (1.5 x fetch timeout), with no new leader able to reach it
    assert t <= int(net.config.fetch_timeout_ms * 1.5) + 10
    assert lead.high_watermark == hw
    assert net.listeners[lead.node_id].leaders[-1] == (None, lead.epoch)
    assert b"never" not in [v for _, v in net.listeners[lead.node_id].commits]


def test_graceful_resign_hands_over_to_the_most_caught_up(net: Net) -> None:
    lead = net.elect()
    net.run(1_000, net.caught_up())
    f1, f2 = sorted(v for v in net.voters if v != lead.node_id)
    net.partition(lead.node_id, f1)   # f1 misses the next record: f2 is the better successor
    lead.append([b"x"])
    # until the leader knows (from f2's next fetch) that f2 has it
    net.run(1_000, lambda: lead._replicas[f2].end_offset == lead.log.log_end_offset)
    net.heal()
    epoch = lead.epoch
    lead.resign()
    assert lead.state == RESIGNED and not lead.is_leader
    assert net.listeners[lead.node_id].leaders[-1] == (None, epoch)
    # EndQuorumEpoch lets the first preferred successor stand at once, not after its timeout
    t = net.run(5_000, lambda: any(r.is_leader and r.epoch > epoch for r in net.nodes.values()))
    new = net.leaders()[0]
    assert new.node_id == f2 and new.epoch == epoch + 1
    assert t < 100
    assert (54, 1) in {(k, v) for _, _, k, v in net.sent}


def test_a_refused_candidate_does_not_reset_the_election_timer(net: Net) -> None:
    """A voter moved to a new epoch by a Vote it refuses keeps the election time it had left
    (Kafka's QuorumState.transitionToUnattached): a candidate with a stale log that bumps the
    epoch again and again cannot hold the up-to-date voters back."""
    lead = net.elect()
    lead.append([b"a"])
    net.run(1_000, net.caught_up())
    net.down = set(net.nodes)
    f = next(r for r in net.nodes.values() if r.is_voter and not r.is_leader)
    cls = kproto.request(VOTE).cls

    def stale_vote(epoch: int) -> None:
        f.handle(VOTE, 1, cls(cluster_id=CLUSTER_ID, voter_id=f.node_id, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                replica_epoch=epoch, replica_id=9, last_offset_epoch=0, last_offset=0)])]),
            lambda resp: None)

    e = f.epoch
    stale_vote(e + 1)
    assert f.state == UNATTACHED
    deadline = f._election_deadline
    k = 1
    while net.clock.now_ms() < deadline - 1:   # stale candidates up to the last moment
        net.run(min(150, deadline - 1 - net.clock.now_ms()))
        k += 1
        stale_vote(e + k)
        assert (f.state, f.epoch) == (UNATTACHED, e + k)
    net.run(2)
    assert (f.state, f.epoch) == (CANDIDATE, e + k + 1)


class ManualTransport:
    """Keeps what a replica sends; the test answers."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, int, Any, Callable[[Any], None]]] = []

    def send(self, dst: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Any], None], timeout_ms: int) -> None:
        self.sent.append((dst, api_key, version, body, on_response))


def test_leader_commits_nothing_before_its_own_epoch_record(tmp_path, clock: FakeClock) -> None:
    """Raft's rule (KIP-595's epoch start offset): entries of an older epoch on a majority are
    not committed by counting replicas; only the new leader's first record reaching a
    majority commits them with it."""
    log = open_metadata_log(str(tmp_path))
    log.leader_epoch = 1
    from kproto.records.builder import RecordBatchBuilder
    for i in range(3):   # what an epoch-1 leader left: three records, never known committed
        b = RecordBatchBuilder(base_offset=log.log_end_offset)
        b.append(0, None, b"old%d" % i)
        log.append_internal(b.build())
    timer = SystemTimer(clock=clock)
    tr, rec = ManualTransport(), Recorder()
    node = KRaftReplica(1, [1, 2, 3], log, cluster_id=CLUSTER_ID, transport=tr, timer=timer,
                        rng=random.Random(1), listener=rec)
    assert (node.state, node.epoch) == (UNATTACHED, 1)   # the log's epoch, no quorum-state
    for _ in range(2_001):
        clock.advance(1)
        timer.advance_clock()
    assert node.state == CANDIDATE and node.epoch == 2
    votes = [(d, body) for d, k, _, body, _ in tr.sent if k == VOTE]
    assert sorted(d for d, _ in votes) == [2, 3]
    p = votes[0][1].topics[0].partitions[0]
    assert (p.replica_epoch, p.replica_id, p.last_offset_epoch, p.last_offset) == (2, 1, 1, 3)
    cls = kproto.response(VOTE).cls
    on_vote = next(cb for d, k, _, _, cb in tr.sent if k == VOTE and d == 2)
    on_vote(cls(topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
        leader_id=-1, leader_epoch=2, vote_granted=True)])]))
    assert node.is_leader and node.log.log_end_offset == 4   # LeaderChange at offset 3
    # a follower with all the old records but not the new epoch's: nothing committed
    p = _fetch(node, 2, 3, 1, replica=2).responses[0].partitions[0]
    assert p.error_code == 0 and p.high_watermark == -1
    assert node.high_watermark == 0 and rec.commits == []
    p = _fetch(node, 2, 4, 2, replica=2).responses[0].partitions[0]
    assert p.high_watermark == 4 and node.high_watermark == 4
    assert rec.commits == [(0, b"old0"), (1, b"old1"), (2, b"old2")]
    assert rec.leaders[-1] == (1, 2)   # told it leads once it has applied everything before


# ---------------------------------------------------------------------------- restart
def test_restart_resumes_epoch_and_replays_commits(net: Net) -> None:
    lead = net.elect()
    lead.append([b"x", b"y"])
    net.run(2_000, net.caught_up())
    victim = next(n for n in net.voters if n != lead.node_id)
    end = net.nodes[victim].log.log_end_offset
    net.crash(victim)
    lead.append([b"z"])
    r = net.start(victim)
    # from disk: the epoch and leader of quorum-state, the log as it was
    assert (r.state, r.epoch, r.leader_id) == (FOLLOWER, lead.epoch, lead.node_id)
    assert r.log.log_end_offset == end
    net.run(2_000, net.caught_up())
    assert [v for _, v in net.listeners[victim].commits] == [b"x", b"y", b"z"]  # from the start


def test_restart_keeps_the_vote(tmp_path) -> None:
    net = Net(str(tmp_path), observers=())
    net.down = {1, 2, 3}   # no traffic: requests are handed in directly
    node = net.nodes[1]

    def vote(candidate: int, epoch: int, last_epoch: int = 0, last_offset: int = 0) -> Any:
        cls = kproto.request(VOTE).cls
        req = cls(cluster_id=CLUSTER_ID, voter_id=1, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                replica_epoch=epoch, replica_id=candidate, last_offset_epoch=last_epoch,
                last_offset=last_offset)])])
        out = []
        net.nodes[1].handle(VOTE, 1, req, out.append)
        return out[0].topics[0].partitions[0]

    assert vote(2, 5).vote_granted
    assert (node.state, node.epoch) == (VOTED, 5)
    with open(os.path.join(node.log.path, "quorum-state"), "rb") as f:
        assert json.loads(f.read())["votedId"] == 2
    net.crash(1)
    node = net.start(1)
    assert (node.state, node.epoch, node._voted) == (VOTED, 5, 2)
    assert not vote(3, 5).vote_granted           # one vote per epoch, across a restart
    assert vote(2, 5).vote_granted               # the same candidate again: yes
    p = vote(3, 4)
    assert (p.error_code, p.leader_epoch, p.vote_granted) == (ErrorCode.FENCED_LEADER_EPOCH, 5, False)
    assert vote(3, 6).vote_granted               # a new epoch, a new vote


def test_vote_refused_to_a_stale_log(net: Net) -> None:
    lead = net.elect()
    lead.append([b"a"])
    net.run(1_000, net.caught_up())
    f = next(r for r in net.nodes.values() if r.is_voter and not r.is_leader)
    net.down = set(net.nodes)   # hand the requests in ourselves
    cls = kproto.request(VOTE).cls

    def vote(candidate: int, epoch: int, last_epoch: int, last_offset: int,
             cluster_id: str = CLUSTER_ID) -> Any:
        req = cls(cluster_id=cluster_id, voter_id=f.node_id, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                replica_epoch=epoch, replica_id=candidate, last_offset_epoch=last_epoch,
                last_offset=last_offset)])])
        out = []
        f.handle(VOTE, 0, req, out.append)
        return out[0]

    end, e = f.log.log_end_offset, lead.epoch
    assert vote(9, e + 1, 0, 0, cluster_id="other").error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    p = vote(9, e + 1, e, end - 1).topics[0].partitions[0]      # one record short
    assert not p.vote_granted and f.epoch == e + 1 and f.state == UNATTACHED
    p = vote(8, e + 1, e - 1 if e > 1 else 0, end + 5).topics[0].partitions[0]  # older epoch
    assert not p.vote_granted
    assert vote(7, e + 1, e, end).topics[0].partitions[0].vote_granted
    assert not vote(6, e + 1, e + 1, end + 10).topics[0].partitions[0].vote_granted


# ---------------------------------------------------------------------------- requests
def test_describe_quorum(net: Net) -> None:
    lead = net.elect()
    lead.append([b"a", b"b"])
    net.run(2_000, net.caught_up())
    net.run(600)   # one more round of fetches so that every replica reported the end
    req = kproto.request(DESCRIBE_QUORUM).cls
    body = req(topics=[req.TopicData(topic_name=METADATA_TOPIC,
                                     partitions=[req.PartitionData(partition_index=0)])])
    for version in (0, 1, 2):
        out = []
        lead.handle(DESCRIBE_QUORUM, version, body, out.append)
        resp = kproto.response(DESCRIBE_QUORUM).decode(
            kproto.response(DESCRIBE_QUORUM).encode(out[0], version), version)
        p = resp.topics[0].partitions[0]
        end = lead.log.log_end_offset
        assert (p.error_code, p.leader_id, p.leader_epoch, p.high_watermark) == (
            0, lead.node_id, lead.epoch, end)
        assert [(v.replica_id, v.log_end_offset) for v in p.current_voters] == [
            (1, end), (2, end), (3, end)]
        assert [(o.replica_id, o.log_end_offset) for o in p.observers] == [(4, end)]
        if version >= 1:
            now = WALL_BASE + net.clock.now_ms()
            assert all(now - 1_000 <= v.last_fetch_timestamp <= now for v in p.current_voters)
            assert all(v.last_caught_up_timestamp > 0 for v in p.current_voters)
    out = []
    net.nodes[4].handle(DESCRIBE_QUORUM, 2, body, out.append)
    assert out[0].topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def _fetch(node: KRaftReplica, epoch: int, offset: int, last_epoch: int, *, version: int = 17,
           cluster_id: str = CLUSTER_ID, replica: int = 9, max_wait: int = 0) -> Any:
    cls = kproto.request(FETCH).cls
    who = {"replica_state": cls.ReplicaState(replica_id=replica)} if version >= 15 \
        else {"replica_id": replica}
    body = cls(cluster_id=cluster_id, **who, max_wait_ms=max_wait, topics=[cls.FetchTopic(
                   topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[cls.FetchPartition(
                       current_leader_epoch=epoch, fetch_offset=offset,
                       last_fetched_epoch=last_epoch)])])
    body = kproto.request(FETCH).decode(kproto.request(FETCH).encode(body, version), version)
    out = []
    node.handle(FETCH, version, body, out.append)
    return out[0] if out else None


def test_fetch_answers_as_kafka(net: Net) -> None:
    lead = net.elect()
    first_epoch = lead.epoch
    lead.append([b"a"])
    net.run(1_000, net.caught_up())
    # a second epoch, so that the epoch cache has something to answer diverging fetches with
    lead.resign()
    lead = net.elect()
    lead.append([b"b"])
    net.run(1_000, net.caught_up())
    e, end = lead.epoch, lead.log.log_end_offset
    start_e = lead.log.end_offset_for_epoch(first_epoch)[1]   # where the second epoch began
    net.down = set(net.nodes)
    assert _fetch(lead, e, 0, 0, cluster_id="x").error_code == ErrorCode.INCONSISTENT_CLUSTER_ID
    p = _fetch(lead, e - 1, 0, 0).responses[0].partitions[0]
    assert p.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (lead.node_id, e)
    assert _fetch(lead, e + 1, 0, 0).responses[0].partitions[0].error_code == \
        ErrorCode.UNKNOWN_LEADER_EPOCH
    follower = next(r for r in net.nodes.values() if r.is_voter and not r.is_leader)
    p = _fetch(follower, e, 0, 0).responses[0].partitions[0]
    assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert p.current_leader.leader_id == lead.node_id
    # a follower claiming more of the first epoch than the leader has: diverging
    p = _fetch(lead, e, start_e + 3, first_epoch).responses[0].partitions[0]
    assert (p.error_code, p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (
        0, first_epoch, start_e)
    assert p.records in (b"", None)
    # a matching position: records from there, the high watermark, the leader
    p = _fetch(lead, e, start_e, first_epoch).responses[0].partitions[0]
    assert p.error_code == 0 and p.diverging_epoch.epoch == -1 and p.high_watermark == end
    assert p.records and kproto.records.RecordBatch(p.records).base_offset == start_e
    # observers are tracked by the leader
    assert 9 in lead._replicas
    # v12 names the topic, not its id: refused as Kafka 4.4's controller does (checked live)
    resp = _fetch(lead, e, end, e, version=12)
    assert (resp.error_code, resp.responses) == (ErrorCode.INVALID_REQUEST, [])


def test_fetch_long_polls_until_data(net: Net) -> None:
    lead = net.elect()
    net.run(1_000, net.caught_up())
    e, end = lead.epoch, lead.log.log_end_offset
    net.down = set(net.nodes)
    cls = kproto.request(FETCH).cls
    body = kproto.request(FETCH).decode(kproto.request(FETCH).encode(cls(
        cluster_id=CLUSTER_ID, replica_state=cls.ReplicaState(replica_id=4), max_wait_ms=500,
        topics=[cls.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[cls.FetchPartition(
            current_leader_epoch=e, fetch_offset=end, last_fetched_epoch=e)])]), 17), 17)
    out = []
    lead.handle(FETCH, 17, body, out.append)
    assert out == []                     # parked: nothing to read yet
    net.run(100)
    assert out == []
    lead.append([b"late"])
    assert len(out) == 1                 # answered as soon as there is data
    assert kproto.records.RecordBatch(out[0].responses[0].partitions[0].records).base_offset == end
    out.clear()
    lead.handle(FETCH, 17, body, out.append)
    lead.handle(FETCH, 17, body, out.append)
    assert len(out) == 2                 # data at that offset now: no waiting


def test_begin_quorum_epoch_makes_a_follower(net: Net) -> None:
    lead = net.elect()
    f = next(r for r in net.nodes.values() if r.is_voter and not r.is_leader)
    net.down = set(net.nodes)
    cls = kproto.request(BEGIN_QUORUM_EPOCH).cls

    def begin(leader: int, epoch: int) -> Any:
        out = []
        f.handle(BEGIN_QUORUM_EPOCH, 0, cls(cluster_id=CLUSTER_ID, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                leader_id=leader, leader_epoch=epoch)])]), out.append)
        return out[0].topics[0].partitions[0]
    assert begin(lead.node_id, lead.epoch - 1).error_code == ErrorCode.FENCED_LEADER_EPOCH
    p = begin(lead.node_id, lead.epoch + 3)
    assert p.error_code == 0 and (f.state, f.epoch, f.leader_id) == (FOLLOWER, lead.epoch + 3,
                                                                      lead.node_id)
    assert net.listeners[f.node_id].leaders[-1] == (lead.node_id, lead.epoch + 3)


# ---------------------------------------------------------------------------- log dir
def test_log_dir_is_a_kafka_log_dir(net: Net) -> None:
    from kproto.storage import read_internal
    lead = net.elect()
    codec = metadata_record(2)   # TopicRecord
    topic_id = kproto.codecs.primitives.Uuid(bytes(range(16)))
    # KRaft frame: frame version 1, record type, record version (one-byte varints here)
    frame = bytes([1, 2, 0]) + codec.encode(codec.cls(name="orders", topic_id=topic_id), 0)
    lead.append([frame])
    net.run(2_000, net.caught_up())
    for n, r in net.nodes.items():
        (off, epoch, ctl), = control_records(r)
        assert (off, ctl.type, ctl.key_version, ctl.value_version) == (0, "LEADER_CHANGE", 0, 0)
        assert epoch == lead.epoch
        r.log.close()
        tables = read_internal(r.log.path)
        rows = tables["TopicRecord"].to_pylist()
        assert [row["record"]["name"] for row in rows] == ["orders"], n
        assert rows[0]["offset"] == 1
        with open(os.path.join(r.log.path, "partition.metadata")) as f:
            assert "AAAAAAAAAAAAAAAAAAAAAQ" in f.read()
    # and the command-line dump reads it as a Kafka partition folder: no errors, the
    # LeaderChange control record and the TopicRecord where they belong
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "kproto", "dump-log", "--format", "jsonl",
                          "--verify", lead.log.path],
                         capture_output=True, text=True, check=True).stdout
    lines = [json.loads(x) for x in out.splitlines()]
    assert not [x for x in lines if x.get("type") == "error"]
    recs = [x for x in lines if x.get("type") == "record"]
    assert recs[0]["offset"] == 0 and recs[0]["control"]["type"] == "LEADER_CHANGE"
    assert recs[0]["control"]["leader_id"] == lead.node_id
    assert recs[1]["offset"] == 1 and "control" not in recs[1] and recs[1]["key"] is None
    assert decode_metadata_frame(base64.b64decode(recs[1]["value"]))["data"]["name"] == "orders"


# ---------------------------------------------------------------------------- property
def _log_view(r: KRaftReplica) -> list[tuple[int, int, bytes]]:
    """(offset, batch leader epoch, value) of every record, control records included."""
    return [(rec.offset, b.partition_leader_epoch, bytes(rec.value or b""))
            for b in r.log.batches() for rec in b.records()]


def _check_safety(net: Net, leaders_seen: dict[int, int]) -> None:
    """Raft's safety: one leader per epoch (as seen now and as every LeaderChange record
    says), what any replica committed is a prefix of what the others committed and is still
    in its log, and logs agree below the smaller of two replicas' high watermarks."""
    views = {n: _log_view(r) for n, r in net.nodes.items()}
    for r in net.nodes.values():
        if r.is_leader:
            assert leaders_seen.setdefault(r.epoch, r.node_id) == r.node_id, "two leaders"
        for _, e, ctl in control_records(r):
            assert leaders_seen.setdefault(e, ctl.fields["leader_id"]) == ctl.fields["leader_id"]
    commits = {n: rec.commits for n, rec in net.listeners.items()}
    longest = max(commits.values(), key=len)
    for n, c in commits.items():
        assert c == longest[:len(c)], f"node {n} committed something else"
        in_log = {o: v for o, _, v in views[n]}
        assert all(in_log.get(o) == v for o, v in c), f"node {n} lost a committed record"
    for a in net.nodes:
        for b in net.nodes:
            hw = min(net.nodes[a].high_watermark, net.nodes[b].high_watermark)
            assert [x for x in views[a] if x[0] < hw] == [x for x in views[b] if x[0] < hw]


def test_safety_under_random_faults(tmp_path) -> None:
    pytest.importorskip("hypothesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    node = st.sampled_from([1, 2, 3, 4])
    action = st.one_of(
        st.tuples(st.just("run"), st.integers(1, 2_000)),
        st.tuples(st.just("cut"), node, node),
        st.tuples(st.just("isolate"), node),
        st.tuples(st.just("heal")),
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("restart"), node),
        st.tuples(st.just("resign")),
    )
    counter = iter(range(1, 1 << 30))

    @settings(max_examples=30, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(seed=st.integers(0, 1000), blackhole=st.booleans(),
           actions=st.lists(action, min_size=3, max_size=10))
    def run(seed: int, blackhole: bool, actions: list) -> None:
        net = Net(str(tmp_path / f"case{next(counter)}"), seed=seed, blackhole=blackhole)
        leaders_seen: dict[int, int] = {}
        appended: list[bytes] = []
        net.run(2_500)
        for act in actions:
            if act[0] == "run":
                for _ in range(0, act[1], 100):
                    net.run(100)
                    _check_safety(net, leaders_seen)
            elif act[0] == "cut" and act[1] != act[2]:
                net.partition(act[1], act[2])
            elif act[0] == "isolate":
                net.isolate(act[1])
            elif act[0] == "heal":
                net.heal()
            elif act[0] == "restart":   # abrupt: back from its log and quorum-state
                net.crash(act[1])
                net.start(act[1])
            elif act[0] == "resign":
                for r in net.nodes.values():
                    r.resign()
            elif act[0] == "append":
                for r in net.nodes.values():
                    if r.is_leader:
                        vals = [b"v%d" % len(appended) + b"-%d" % i for i in range(act[1])]
                        appended.extend(vals)
                        r.append(vals)
            _check_safety(net, leaders_seen)
        # healed, the cluster settles: one leader, every replica with the same log. A leader
        # that was cut off may still lose what it takes first (its followers' fetches were
        # lost and they stand): append again until a record of ours is committed everywhere.
        net.heal()
        markers: list[bytes] = []
        for attempt in range(5):
            lead = net.elect(30_000)
            markers.append(b"final-%d" % attempt)
            lead.append([markers[-1]])
            def done() -> bool:
                return net.caught_up()() and all(
                    markers[-1] in [v for _, v in rec.commits] for rec in net.listeners.values())
            net.run(6_000, done)
            if done():
                break
        else:
            raise AssertionError("no record committed after healing")
        _check_safety(net, leaders_seen)
        views = [_log_view(r) for r in net.nodes.values()]
        assert all(v == views[0] for v in views)
        final = [v for _, v in net.listeners[lead.node_id].commits]
        assert all(v in appended or v in markers for v in final)
        assert len(set(final)) == len(final)   # each record once
        for rec in net.listeners.values():
            assert [v for _, v in rec.commits] == final
    run()


def test_requests_for_another_partition_or_voter(net: Net) -> None:
    lead = net.elect()
    net.down = set(net.nodes)
    f = next(r for r in net.nodes.values() if r.is_voter and not r.is_leader)
    cls = kproto.request(VOTE).cls
    out: list = []
    wrong = cls(cluster_id=CLUSTER_ID, voter_id=f.node_id, topics=[cls.TopicData(
        topic_name="other", partitions=[cls.PartitionData(replica_epoch=9, replica_id=9)])])
    f.handle(VOTE, 1, wrong, out.append)
    assert out[-1].error_code == ErrorCode.INVALID_REQUEST and f.epoch == lead.epoch
    # v1 names the voter: a vote meant for another replica is refused
    meant = cls(cluster_id=CLUSTER_ID, voter_id=f.node_id + 10, topics=[cls.TopicData(
        topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
            replica_epoch=lead.epoch + 1, replica_id=9, last_offset_epoch=99, last_offset=99)])])
    f.handle(VOTE, 1, meant, out.append)
    p = out[-1].topics[0].partitions[0]
    assert p.error_code == ErrorCode.INVALID_VOTER_KEY and not p.vote_granted
    assert f.epoch == lead.epoch
    d = kproto.request(DESCRIBE_QUORUM).cls
    lead.handle(DESCRIBE_QUORUM, 2, d(topics=[d.TopicData(topic_name="x", partitions=[
        d.PartitionData(partition_index=3)])]), out.append)
    p = out[-1].topics[0].partitions[0]
    assert (p.partition_index, p.error_code) == (3, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    # the other fields at their defaults and Kafka's text, as Apache Kafka 4.4.0 answers
    assert (p.leader_id, p.leader_epoch, p.high_watermark, p.error_message) == (
        0, 0, 0, "This server does not host this topic-partition.")


KAFKA_METADATA_LOG = "/work/shared/fixtures/logdirs/broker1-clean/__cluster_metadata-0"


def test_single_voter_leads_at_once_byte_exact_with_kafka(tmp_path, clock: FakeClock) -> None:
    """One controller (the common setup): leader of epoch 1 on start, every append committed
    as written; its first batch is byte for byte the one a real Kafka controller wrote."""
    timer = SystemTimer(clock=clock)
    rec = Recorder()
    kafka_ts = 1717000895623   # the fixture's first batch was written then
    node = KRaftReplica(1, [1], open_metadata_log(str(tmp_path)), cluster_id=CLUSTER_ID,
                        transport=ManualTransport(), timer=timer, rng=random.Random(0),
                        listener=rec, wall_ms=lambda: kafka_ts)
    assert node.is_leader and (node.epoch, node.leader_id, node.high_watermark) == (1, 1, 1)
    assert rec.leaders == [(None, 0), (None, 1), (1, 1)]
    assert node.append([b"one", b"two"]) == 2 and node.high_watermark == 3
    assert rec.commits == [(1, b"one"), (2, b"two")]
    first = next(iter(node.log.batches()))
    if os.path.isdir(KAFKA_METADATA_LOG):
        with open(os.path.join(KAFKA_METADATA_LOG, "00000000000000000000.log"), "rb") as f:
            kafka = f.read(first.size_in_bytes)
        assert bytes(first.buffer[:first.size_in_bytes]) == kafka
    node.shutdown()
    with open(os.path.join(node.log.path, "quorum-state"), "rb") as f:
        assert json.loads(f.read())["leaderId"] == 1
    # restarted, the single voter stands again at once: leader of epoch 2
    rec2 = Recorder()
    node.log.close()
    again = KRaftReplica(1, [1], open_metadata_log(str(tmp_path)), cluster_id=CLUSTER_ID,
                         transport=ManualTransport(), timer=timer, rng=random.Random(0),
                         listener=rec2)
    assert again.is_leader and again.epoch == 2 and again.high_watermark == 4
    assert rec2.commits == [(1, b"one"), (2, b"two")]   # replayed from the start
    assert [c.fields["leader_id"] for _, _, c in control_records(again)] == [1, 1]


def test_pre_votes_of_kafka_4_change_nothing(net: Net) -> None:
    lead = net.elect()
    net.run(1_000, net.caught_up())
    f = next(r for r in net.nodes.values() if r.is_voter and not r.is_leader)
    net.down = set(net.nodes)
    cls = kproto.request(VOTE).cls
    e, end = f.epoch, f.log.log_end_offset

    def pre_vote(epoch: int) -> Any:
        body = cls(cluster_id=CLUSTER_ID, voter_id=f.node_id, topics=[cls.TopicData(
            topic_name=METADATA_TOPIC, partitions=[cls.PartitionData(
                replica_epoch=epoch, replica_id=9, last_offset_epoch=e, last_offset=end,
                pre_vote=True)])])
        body = kproto.request(VOTE).decode(kproto.request(VOTE).encode(body, 2), 2)
        out: list = []
        f.handle(VOTE, 2, body, out.append)
        return out[0].topics[0].partitions[0]
    assert not pre_vote(e + 1).vote_granted     # it still hears from its leader
    assert (f.state, f.epoch, f.leader_id) == (FOLLOWER, e, lead.node_id)
    net.run(net.config.fetch_timeout_ms * 2, lambda: f.state == CANDIDATE)
    assert (f.state, f.epoch, f._voted) == (CANDIDATE, e + 1, f.node_id)
    assert pre_vote(e + 2).vote_granted         # up to date, no leader: yes
    assert (f.state, f.epoch, f._voted) == (CANDIDATE, e + 1, f.node_id)  # and nothing changed
    with open(os.path.join(f.log.path, "quorum-state"), "rb") as fh:
        assert json.loads(fh.read())["leaderEpoch"] == e + 1
