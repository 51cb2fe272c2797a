"""Partition replication between brokers, sans-I/O: three ReplicaManagers over their own log
directories, a fake clock, an in-memory network that can cut links and lose answers, and a
stand-in controller that applies AlterPartition. The KIP-101 scenario runs both ways."""
from __future__ import annotations

import os
from dataclasses import replace

import pytest

import kproto
from kproto.broker.log import BrokerError, LogConfig, LogManager
from kproto.broker.cluster.replica import PartitionAssignment, ReplicaConfig, ReplicaManager
from kproto.broker.timer import FakeClock, SystemTimer
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K

from broker_support import batch

CONTROLLER = 9000
LAG_MS = 10_000


class Network:
    """Requests wait in a queue until the test delivers them; a follower's fetch that finds
    nothing new waits (the leader's long poll) until the clock moves."""

    def __init__(self, clock: FakeClock, timer: SystemTimer) -> None:
        self.clock, self.timer = clock, timer
        self.brokers: dict[int, "Broker"] = {}
        self.controller: "Controller | None" = None
        self.queue: list = []
        self.parked: list = []
        self.cut: set[frozenset] = set()
        self.lose_next_answer_to: set[int] = set()

    def sender(self, src: int):
        net = self

        class _T:
            def send(self, dst, api_key, version, body, on_response, timeout_ms):
                # the codecs on both sides: what would cross a real connection
                data = kproto.request(api_key).encode(body, version)
                net.queue.append((src, dst, api_key, version, kproto.request(api_key).decode(data, version),
                                  on_response))
        return _T()

    def linked(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut and a in self.up() and b in self.up()

    def up(self) -> set[int]:
        return {n for n, b in self.brokers.items() if b.alive} | {CONTROLLER}

    def _answer(self, src, dst, api_key, version, body, on_response):
        if not self.linked(src, dst):
            on_response(None)
            return
        if dst == CONTROLLER:
            resp = self.controller.handle(api_key, body)
        else:
            resp = self.brokers[dst].replicas.handle_replica_fetch(body, version, body.replica_state.replica_id)
        resp = kproto.response(api_key).decode(kproto.response(api_key).encode(resp, version), version)
        if src in self.lose_next_answer_to:
            self.lose_next_answer_to.discard(src)
            return  # the requester crashed before it read the answer
        if self.brokers.get(src) is not None and not self.brokers[src].alive:
            return
        on_response(resp)

    def deliver(self, rounds: int = 50) -> None:
        """Deliver until only waiting fetches are left."""
        for _ in range(rounds):
            # an append wakes the long polls it gives something to (the leader's purgatory)
            woken = [x for x in self.parked if not self._idle(x[1], x[4])]
            self.parked = [x for x in self.parked if x not in woken]
            self.queue += woken
            if not self.queue:
                return
            batch_, self.queue = self.queue, []
            for src, dst, api_key, version, body, cb in batch_:
                if api_key == K.FETCH and dst in self.brokers and self._idle(dst, body):
                    self.parked.append((src, dst, api_key, version, body, cb))
                else:
                    self._answer(src, dst, api_key, version, body, cb)

    def _idle(self, dst, body) -> bool:
        rm = self.brokers[dst].replicas
        for t in body.topics:
            for p in t.partitions:
                part = next((x for x in rm.partitions.values() if x.topic_id == t.topic_id
                             and x.partition == p.partition), None)
                if part is None or not part.is_leader:
                    return False
                # something to send, a high watermark to tell, or a divergence to report
                if p.fetch_offset != part.log.log_end_offset or part.log.high_watermark < p.fetch_offset:
                    return False
                if rm.diverging_epoch(part, p.fetch_offset, p.last_fetched_epoch) is not None:
                    return False
                if part.followers.get(body.replica_state.replica_id) is not None and \
                        part.follower_end(body.replica_state.replica_id) != p.fetch_offset:
                    return False
        return True

    def tick(self, ms: int = 500) -> None:
        self.clock.advance(ms)
        self.timer.advance_clock()
        parked, self.parked = self.parked, []
        for item in parked:
            self._answer(*item)
        self.deliver()

    def settle(self, ticks: int = 6) -> None:
        self.deliver()
        for _ in range(ticks):
            self.tick(100)


class Broker:
    def __init__(self, node_id: int, root, net: Network, config: ReplicaConfig) -> None:
        self.node_id, self.root, self.net, self.config = node_id, root, net, config
        self.alive = True
        self.start()

    def start(self, truncation: str | None = None) -> None:
        self.logs = LogManager(str(self.root / f"b{self.node_id}"), node_id=self.node_id,
                               defaults=LogConfig(segment_bytes=1 << 20))
        cfg = self.config if truncation is None else replace(self.config, truncation=truncation)
        self.replicas = ReplicaManager(self.node_id, self.net.timer, self.net.sender(self.node_id), config=cfg,
                                       controller=lambda: CONTROLLER, broker_epoch=lambda: 10 + self.node_id,
                                       broker_epoch_of=lambda b: 10 + b)
        self.alive = True

    def log(self, topic="t", partition=0):
        return self.logs.get(topic, partition)

    def apply(self, a: PartitionAssignment, high_watermark=None):
        if self.node_id not in a.replicas:
            return
        lg = self.logs.get(a.topic, a.partition)
        if lg is None:
            lg = self.logs.create_topic(a.topic, 1, topic_id=a.topic_id).partitions[0]
        self.replicas.apply(a, lg, high_watermark)

    def crash(self) -> int:
        """Stop abruptly; returns the high watermark it had (what it would have checkpointed)."""
        hw = self.log().high_watermark
        self.alive = False
        self.replicas.shutdown()
        self.logs.close(clean=False)
        return hw

    def produce(self, values, acks=-1, min_insync=1):
        part = self.replicas.leader_for("t", 0)
        self.replicas.check_produce(part, acks, min_insync)
        info = part.log.append_as_leader(batch(values), 1_700_000_000_000)
        self.replicas.appended(part)
        return info.last_offset


class Controller:
    """Applies AlterPartition as the KRaft controller does (partition epoch checked and
    bumped) and publishes the new state to every live broker."""

    def __init__(self, net: Network, assignment: PartitionAssignment) -> None:
        self.net, self.state = net, assignment
        self.requests = []

    def publish(self, **changes) -> None:
        self.state = replace(self.state, partition_epoch=self.state.partition_epoch + 1, **changes)
        for b in self.net.brokers.values():
            if b.alive:
                b.apply(self.state)

    def handle(self, api_key, body):
        assert api_key == K.ALTER_PARTITION
        self.requests.append(body)
        cls = kproto.response(K.ALTER_PARTITION).cls
        t = body.topics[0]
        p = t.partitions[0]
        new_isr = [b.broker_id for b in p.new_isr_with_epochs]
        code = 0
        if p.partition_epoch != self.state.partition_epoch:
            code = E.INVALID_UPDATE_VERSION
        elif p.leader_epoch != self.state.leader_epoch:
            code = E.FENCED_LEADER_EPOCH
        elif any(b.broker_epoch != 10 + b.broker_id for b in p.new_isr_with_epochs):
            code = E.INELIGIBLE_REPLICA
        if not code:
            self.state = replace(self.state, isr=new_isr, partition_epoch=self.state.partition_epoch + 1)
        s = self.state
        return cls(error_code=0, topics=[cls.TopicData(topic_id=t.topic_id, partitions=[cls.PartitionData(
            partition_index=0, error_code=code, leader_id=s.leader, leader_epoch=s.leader_epoch, isr=s.isr,
            partition_epoch=s.partition_epoch)])])


@pytest.fixture
def cluster(tmp_path):
    clock = FakeClock(1_000)
    net = Network(clock, SystemTimer(clock=clock))
    config = ReplicaConfig(replica_lag_time_max_ms=LAG_MS, replica_fetch_backoff_ms=200)
    for n in (1, 2, 3):
        net.brokers[n] = Broker(n, tmp_path, net, config)
    a = PartitionAssignment("t", 0, kproto.Uuid(os.urandom(16)), [1, 2, 3], [1, 2, 3], 1, 0, 0)
    net.controller = Controller(net, a)
    for b in net.brokers.values():
        b.apply(a)
    yield net
    for b in net.brokers.values():
        if b.alive:
            b.replicas.shutdown()
            b.logs.close()


def values_of(log):
    return [r.value for b in log.batches() for r in b.records()]


def test_followers_copy_the_leader_and_the_high_watermark_waits_for_the_isr(cluster):
    leader = cluster.brokers[1]
    for i in range(5):
        leader.produce([b"m%d" % i])
    assert leader.log().log_end_offset == 5 and leader.log().high_watermark == 0   # nobody has them yet
    cluster.settle()
    for n in (1, 2, 3):
        lg = cluster.brokers[n].log()
        assert values_of(lg) == [b"m%d" % i for i in range(5)]
        assert (lg.log_end_offset, lg.high_watermark) == (5, 5)
        assert lg.read(0, 1 << 20) == leader.log().read(0, 1 << 20)          # byte for byte
        assert [(e.epoch, e.start_offset) for e in lg.plog.epochs] == [(0, 0)]
    # a follower refuses to be a leader; a stale epoch is fenced
    with pytest.raises(BrokerError) as exc:
        cluster.brokers[2].replicas.leader_for("t", 0)
    assert exc.value.code == E.NOT_LEADER_OR_FOLLOWER
    assert cluster.brokers[1].replicas.offsets_for_leader_epoch("t", 0, -1, 0) == (0, 0, 5)
    assert cluster.brokers[1].replicas.offsets_for_leader_epoch("t", 0, 3, 0)[0] == E.UNKNOWN_LEADER_EPOCH


def test_a_lagging_follower_leaves_the_isr_and_rejoins_when_caught_up(cluster):
    leader = cluster.brokers[1]
    leader.produce([b"a"])
    cluster.settle()
    cluster.cut.add(frozenset((1, 3)))
    leader.produce([b"b"])
    cluster.settle()
    # 3 cannot fetch: until replica.lag.time.max.ms passes it holds the high watermark back
    assert leader.log().high_watermark == 1
    for _ in range(LAG_MS * 3 // 2 // 500 + 2):   # checked every lag/2: found within 1.5 x lag
        cluster.tick(500)
    assert cluster.controller.state.isr == [1, 2]
    assert leader.replicas.partitions[("t", 0)].isr == [1, 2]
    assert leader.log().high_watermark == 2                      # committed without 3
    with pytest.raises(BrokerError) as exc:
        leader.produce([b"c"], min_insync=3)
    assert exc.value.code == E.NOT_ENOUGH_REPLICAS
    assert leader.log().log_end_offset == 2                      # refused before the append
    cluster.cut.clear()
    cluster.settle(ticks=12)
    assert cluster.controller.state.isr == [1, 2, 3]
    assert values_of(cluster.brokers[3].log()) == [b"a", b"b"]
    assert leader.replicas.isr_changes_sent == 2


def test_a_stall_of_the_leaders_loop_shrinks_no_isr(cluster):
    """The leader's loop held up past replica.lag.time.max.ms (a loaded machine): the
    followers' fetches sent meanwhile are read before their lag is judged, so the ISR stays;
    a follower still silent afterwards leaves it."""
    leader = cluster.brokers[1]
    leader.produce([b"a"])
    cluster.settle()
    cluster.clock.advance(LAG_MS + 2000)   # one stall: the ISR check fires late
    cluster.timer.advance_clock()
    cluster.tick(100)                      # the queued fetches are read right after
    cluster.settle()
    assert cluster.controller.state.isr == [1, 2, 3] and leader.replicas.isr_changes_sent == 0
    cluster.cut.add(frozenset((1, 3)))
    for _ in range(LAG_MS * 3 // 2 // 500 + 2):
        cluster.tick(500)
    assert cluster.controller.state.isr == [1, 2]


def test_a_replica_added_under_the_same_leader_joins_the_isr(cluster):
    """A reassignment adds a replica without a new leader epoch (Kafka bumps it only when
    replicas leave): the leader must track the new follower, or it never enters the ISR and
    the reassignment never completes."""
    leader = cluster.brokers[1]
    cluster.controller.publish(replicas=[1, 2], isr=[1, 2])
    leader.produce([b"a", b"b"])
    cluster.settle()
    assert cluster.controller.state.isr == [1, 2]
    cluster.controller.publish(replicas=[1, 2, 3])            # adding 3, same leader and epoch
    cluster.settle(ticks=12)
    assert values_of(cluster.brokers[3].log()) == [b"a", b"b"]
    assert cluster.controller.state.isr == [1, 2, 3]
    assert leader.replicas.partitions[("t", 0)].isr == [1, 2, 3]


def test_a_returning_leader_truncates_its_uncommitted_tail_where_the_epochs_diverge(cluster):
    b1, b2, b3 = (cluster.brokers[n] for n in (1, 2, 3))
    for v in (b"m0", b"m1", b"m2"):
        b1.produce([v])
    cluster.settle()
    # 1 is cut off from both, takes two more records nobody else gets (never committed)
    cluster.cut |= {frozenset((1, 2)), frozenset((1, 3))}
    b1.produce([b"lost3"])
    b1.produce([b"lost4"])
    cluster.settle()
    assert b1.log().high_watermark == 3
    # the controller elects 2 in epoch 1; it takes a record
    cluster.controller.publish(leader=2, leader_epoch=1, isr=[2, 3])
    b2.produce([b"n3"])
    cluster.settle()
    # 1 comes back, learns it is a follower: its fetch at 5 with last epoch 0 gets
    # DivergingEpoch(0, 3) and it truncates to 3 before copying the new leader's log
    cluster.cut.clear()
    b1.apply(cluster.controller.state)
    cluster.settle(ticks=10)
    fetcher = b1.replicas.fetchers[2]
    assert (("t", 0, 3) in fetcher.truncations)
    for b in (b1, b2, b3):
        assert values_of(b.log()) == [b"m0", b"m1", b"m2", b"n3"]
        assert [(e.epoch, e.start_offset) for e in b.log().plog.epochs] == [(0, 0), (1, 3)]
    assert cluster.controller.state.isr == [1, 2, 3]


@pytest.mark.parametrize("truncation", ["high_watermark", "leader_epoch"])
def test_kip101_a_restarted_follower_and_a_leader_crash(tmp_path, truncation):
    """KIP-101's first scenario: A leads, B follows (min.insync 1). B has fetched m1 but
    crashes before the answer that would raise its high watermark to 2 arrives; A had
    counted B's fetch and acknowledged m1. B restarts; A dies; B becomes leader. With the
    old rule B truncated to its high watermark (1) on restart and m1, acknowledged, is gone;
    with leader epochs B keeps it."""
    clock = FakeClock(1_000)
    net = Network(clock, SystemTimer(clock=clock))
    config = ReplicaConfig(replica_lag_time_max_ms=LAG_MS, truncation=truncation)
    a, b = Broker(1, tmp_path, net, config), Broker(2, tmp_path, net, config)
    net.brokers = {1: a, 2: b}
    state = PartitionAssignment("t", 0, kproto.Uuid(os.urandom(16)), [1, 2], [1, 2], 1, 0, 0)
    net.controller = Controller(net, state)
    a.apply(state)
    b.apply(state)
    a.produce([b"m0"])
    net.settle()
    assert (a.log().high_watermark, b.log().high_watermark) == (1, 1)
    a.produce([b"m1"])
    net.deliver(rounds=1)              # B fetches m1 (its log ends at 2, its high watermark is 1)
    assert b.log().log_end_offset == 2 and b.log().high_watermark == 1
    net.lose_next_answer_to.add(2)     # B's next fetch (at 2) reaches A, the answer never B
    net.deliver(rounds=1)
    assert a.log().high_watermark == 2  # A counted B's fetch: m1 is committed, acks=all answered
    b_hw = b.crash()
    assert b_hw == 1
    b.start(truncation)
    b.apply(net.controller.state, high_watermark=b_hw)   # replication-offset-checkpoint said 1
    a.crash()
    net.controller.publish(leader=2, leader_epoch=1, isr=[2])
    b.produce([b"after"])
    committed = values_of(b.log())
    if truncation == "high_watermark":
        assert committed == [b"m0", b"after"]     # m1 was acknowledged and is lost
    else:
        assert committed == [b"m0", b"m1", b"after"]
    b.replicas.shutdown()
    b.logs.close()
