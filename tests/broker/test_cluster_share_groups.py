"""Share groups (KIP-932) on kproto's cluster (3 brokers, ``kafka_cluster``), placed as Apache
Kafka places them: the group on the leader of its ``__consumer_offsets`` partition, each
share-partition's in-flight records on the leader of its data partition, its durable state on
the leader of its ``__share_group_state`` partition. Records are delivered once and acknowledged;
a data-partition leader killed -9 mid-stream loses nothing (what it handed out unacknowledged
comes again, what was acknowledged does not); a killed share coordinator's states survive on
the next leader of its partition."""
from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from kproto.broker.cluster.share import RemoteSharePersister
from kproto.broker.coordinators.offsets_topic import OFFSETS_TOPIC, partition_for
from kproto.broker.coordinators.share_state import SHARE_STATE_TOPIC, share_key
from kproto.broker.share_partition import ACKNOWLEDGED
from kproto.broker.timer import FakeClock, SystemTimer
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.connection import Connection
from kproto.client.producer import Producer
from kproto.client.share_consumer import ShareConsumer
from kproto.client.share_session import AcknowledgeType
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey
from kproto.testing import ClusterThread

pytestmark = pytest.mark.kafka_cluster(group_share_assignment_interval_ms=0)

#: short locks and sessions, every record from the start of the log
GROUP_CONFIG = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "2000",
                "share.heartbeat.interval.ms": "500", "share.session.timeout.ms": "6000"}


def run(coro: Any, timeout: float = 120) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def produce(cluster: Cluster, topic: str, values: range, partitions: int) -> None:
    producer = await Producer(cluster).start()
    for i in values:
        await producer.send(topic, str(i).encode(), partition=i % partitions)
    await producer.close()


def topic_id(kafka_cluster: ClusterThread, topic: str) -> Any:
    return kafka_cluster.inspect(lambda c: c.image().topics[topic].topic_id)


def share_coordinator(kafka_cluster: ClusterThread, key: str) -> Optional[int]:
    n = kafka_cluster.inspect(lambda c: len(c.image().topics[SHARE_STATE_TOPIC].partitions))
    return kafka_cluster.leader(SHARE_STATE_TOPIC, partition_for(key, n))


def holders(kafka_cluster: ClusterThread, what: Any) -> list[int]:
    """The brokers where ``what(core)`` is true."""
    return kafka_cluster.inspect(lambda c: [n for n, b in sorted(c.brokers.items())
                                            if b.core is not None and not b.core.detached and what(b.core)])


async def consume(consumer: ShareConsumer, want: set[int], seen: list[tuple[int, int, int]],
                  deadline_s: float = 60) -> None:
    """Poll, accepting everything, until every value of ``want`` was accepted; ``seen`` gets
    (value, partition, delivery count) of each delivery."""
    deadline = time.monotonic() + deadline_s
    while not want <= {v for v, _, _ in seen} and time.monotonic() < deadline:
        for r in await consumer.poll(0.3):
            consumer.acknowledge(r, AcknowledgeType.ACCEPT)
            seen.append((int(r.value or b"-1"), r.partition, r.delivery_count))
        await consumer.commit_sync()


def test_share_group_over_spread_leaders_delivers_each_record_once(kafka_cluster: ClusterThread) -> None:
    topic, group = new_name("share-spread"), new_name("share-g")
    kafka_cluster.create_topic(topic, 6, 3)
    leaders = {p: kafka_cluster.leader(topic, p) for p in range(6)}
    assert set(leaders.values()) == {1, 2, 3}

    async def main() -> tuple[list, list, dict]:
        async with Cluster(kafka_cluster.bootstrap) as cluster:
            await Admin(cluster).alter_configs({("group", group): GROUP_CONFIG})
            await produce(cluster, topic, range(60), 6)
            a = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            b = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            seen: list = []
            await asyncio.gather(consume(a, set(range(60)), seen), consume(b, set(range(60)), seen))
            await asyncio.sleep(2.5)  # past the lock duration: anything held would come back
            extra = await a.poll(0.5) + await b.poll(0.5)
            lags = await Admin(cluster).list_share_group_offsets(group)
            placed = placement()
            await a.close()
            await b.close()
            return seen, extra, lags, placed

    def placement() -> tuple[dict, dict]:
        """Where things live, (found, expected): the group on its coordinator, each
        share-partition on its data leader, each state on its share coordinator."""
        tid = topic_id(kafka_cluster, topic)
        n_offsets = kafka_cluster.inspect(lambda c: len(c.image().topics[OFFSETS_TOPIC].partitions))
        found = {"group": holders(kafka_cluster, lambda core: group in core.share_groups.groups)}
        expected = {"group": [kafka_cluster.leader(OFFSETS_TOPIC, partition_for(group, n_offsets))]}
        for p in range(6):
            key = (group, tid, p)
            found[f"in flight {p}"] = holders(kafka_cluster, lambda core: key in core.shares.partitions)
            expected[f"in flight {p}"] = [leaders[p]]
            found[f"state {p}"] = holders(kafka_cluster, lambda core: key in core.share_state.states)
            expected[f"state {p}"] = [share_coordinator(kafka_cluster, share_key(*key))]
        return found, expected

    seen, extra, lags, (found, expected) = run(main())
    assert sorted(v for v, _, _ in seen) == list(range(60)), seen
    assert all(count == 1 and v % 6 == p for v, p, count in seen)
    assert extra == []
    assert {p: lag for (_, p), (_, lag) in lags.items()} == {p: 0 for p in range(6)}
    assert found == expected


def test_a_data_leader_killed_mid_stream_loses_nothing_and_redelivers_only_what_was_not_acknowledged(
        kafka_cluster: ClusterThread) -> None:
    topic, group = new_name("share-kill"), new_name("share-g")
    kafka_cluster.create_topic(topic, 6, 3)
    victim = kafka_cluster.leader(topic, 0)
    led = {p for p in range(6) if kafka_cluster.leader(topic, p) == victim}
    values = set(range(120))

    async def main() -> tuple[set, set, list, list]:
        async with Cluster(kafka_cluster.bootstrap) as cluster:
            await Admin(cluster).alter_configs({("group", group): GROUP_CONFIG})
            await produce(cluster, topic, range(120), 6)
            a = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit",
                                    max_poll_records=20).start()
            accepted: set[int] = set()
            held: set[int] = set()
            deadline = time.monotonic() + 30
            while not held and time.monotonic() < deadline:
                records = await a.poll(0.3)
                # once records of the victim's partitions were accepted, the next ones it hands
                # out are held, unacknowledged, when it is killed
                hold = accepted & {v for v in values if v % 6 in led} and \
                    [r for r in records if r.partition in led]
                for r in records:
                    if hold and r.partition in led:
                        held.add(int(r.value or b"-1"))
                    else:
                        a.acknowledge(r, AcknowledgeType.ACCEPT)
                        accepted.add(int(r.value or b"-1"))
                results = await a.commit_sync()
                assert all(res.error is None for res in results.values()), results
            assert held, "nothing of the victim's partitions was delivered"
            kafka_cluster.stop(victim, abrupt=True)
            await a.close()
            b = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            seen: list = []
            await consume(b, values - accepted, seen, deadline_s=60)
            await asyncio.sleep(2.5)  # past the lock duration: anything held would come back
            extra = await b.poll(0.5)
            await b.close()
            return accepted, held, seen, extra

    accepted, held, seen, extra = run(main())
    after = {v for v, _, _ in seen}
    assert accepted | after == values                        # nothing lost
    assert not accepted & after, sorted(accepted & after)    # acknowledged: never again
    assert held <= after                                     # handed out, not acknowledged: again
    assert len(seen) == len(after) and extra == []           # each once after the kill


def test_a_share_coordinator_killed_its_states_survive_on_the_next_leader(kafka_cluster: ClusterThread) -> None:
    topic = new_name("share-coord")
    kafka_cluster.create_topic(topic, 1, 3)
    tid = topic_id(kafka_cluster, topic)
    for key_type, key in ((0, "any-group"), (2, f"any-group:{tid}:0")):  # both internal topics made
        find_coordinator(kafka_cluster, key_type, key)
    # a group whose share coordinator (for partition 0) is neither the data leader nor the group coordinator
    n_offsets = kafka_cluster.inspect(lambda c: len(c.image().topics[OFFSETS_TOPIC].partitions))
    data_leader = kafka_cluster.leader(topic, 0)
    for i in range(500):
        group = f"share-g-{i}"
        coordinator = share_coordinator(kafka_cluster, share_key(group, tid, 0))
        if coordinator not in (data_leader, kafka_cluster.leader(OFFSETS_TOPIC, partition_for(group, n_offsets))):
            break
    key = (group, tid, 0)
    n_state = kafka_cluster.inspect(lambda c: len(c.image().topics[SHARE_STATE_TOPIC].partitions))
    state_partition = partition_for(share_key(*key), n_state)

    def done_offsets(node: int) -> set[int]:
        """The offsets the share coordinator ``node`` has as done (acknowledged, or below the start)."""
        def read(c: Any) -> set[int]:
            s = c.brokers[node].core.share_state.states.get(key)
            if s is None:
                return set()
            return set(range(s.start_offset)) | {o for a, z, st, _ in s.batches if st == ACKNOWLEDGED
                                                 for o in range(a, z + 1)}
        return kafka_cluster.inspect(read)

    async def main() -> tuple[list, list, set, int]:
        async with Cluster(kafka_cluster.bootstrap) as cluster:
            await Admin(cluster).alter_configs({("group", group): GROUP_CONFIG})
            await produce(cluster, topic, range(30), 1)
            a = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit",
                                    max_poll_records=10).start()
            before: list = []
            while not before:
                before = await a.poll(0.3)
            for r in before:
                a.acknowledge(r, AcknowledgeType.ACCEPT)
            assert all(res.error is None for res in (await a.commit_sync()).values())
            kafka_cluster.stop(coordinator, abrupt=True)
            kafka_cluster.wait_for(lambda c: c.leader(SHARE_STATE_TOPIC, state_partition) not in (None, -1, coordinator),
                                   what="a new share coordinator")
            successor = kafka_cluster.leader(SHARE_STATE_TOPIC, state_partition)
            replayed = done_offsets(successor)
            after: list = []
            await consume(a, set(range(30)) - {int(r.value or b"-1") for r in before}, after)
            lags = await Admin(cluster).list_share_group_offsets(group)
            await a.close()
            return before, after, replayed, lags[(topic, 0)][1]

    before, after, replayed, lag = run(main())
    assert {r.offset for r in before} <= replayed              # the acknowledgements survived the kill
    delivered = [int(r.value or b"-1") for r in before] + [v for v, _, _ in after]
    assert sorted(delivered) == list(range(30))               # each record once
    assert lag == 0


def test_offsets_altered_while_the_group_is_empty_are_where_its_next_member_starts(
        kafka_cluster: ClusterThread) -> None:
    """AlterShareGroupOffsets goes to the group coordinator and the share coordinator; the data
    partition's leader, where the group's last session ended, reads the new state at the next
    fetch (its share-partition went with that session)."""
    topic, group = new_name("share-alter"), new_name("share-g")
    kafka_cluster.create_topic(topic, 1, 3)

    async def main() -> tuple[list, int, list]:
        async with Cluster(kafka_cluster.bootstrap) as cluster:
            await Admin(cluster).alter_configs({("group", group): GROUP_CONFIG})
            await produce(cluster, topic, range(20), 1)
            a = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            first: list = []
            await consume(a, set(range(20)), first)
            await a.close()
            cls = request_codec(ApiKey.ALTER_SHARE_GROUP_OFFSETS).cls
            resp = await cluster.coordinator_request(group, cls(group_id=group, topics=[
                cls.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
                    cls.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=5)])]), version=0)
            b = await ShareConsumer(cluster, [topic], group_id=group, acknowledgement_mode="explicit").start()
            again: list = []
            await consume(b, set(range(5, 20)), again, deadline_s=30)
            await b.close()
            return first, resp.error_code or resp.responses[0].partitions[0].error_code, again

    first, code, again = run(main())
    assert sorted(v for v, _, _ in first) == list(range(20)) and code == 0
    assert sorted(v for v, _, _ in again) == list(range(5, 20))


def test_a_share_fetch_of_a_group_without_state_is_refused_and_initializes_nothing(
        kafka_cluster: ClusterThread) -> None:
    """Only the group coordinator initializes a share-partition's state (before it assigns it):
    the leader asked for one that has none answers UNKNOWN_SERVER_ERROR for it, as the single
    broker does for a group it does not know, and no state is made."""
    topic, group = new_name("share-none"), new_name("share-g")
    kafka_cluster.create_topic(topic, 1, 3)
    tid = topic_id(kafka_cluster, topic)
    leader = kafka_cluster.leader(topic, 0)
    port = kafka_cluster.inspect(lambda c: c.brokers[leader].config.port)

    async def fetch() -> list[tuple[int, int]]:
        conn = await Connection.open("127.0.0.1", port, client_id="share-test")
        try:
            sf = request_codec(ApiKey.SHARE_FETCH).cls
            resp = await conn.request(sf(
                group_id=group, member_id="m-1", share_session_epoch=0, max_wait_ms=2000, min_bytes=1,
                max_bytes=1 << 20, max_records=10, batch_size=10, forgotten_topics_data=[],
                topics=[sf.FetchTopic(topic_id=tid, partitions=[sf.FetchPartition(partition_index=0)])]), 1)
            return [(p.partition_index, p.error_code) for t in resp.responses for p in t.partitions]
        finally:
            await conn.close()

    assert run(fetch(), 30) == [(0, ErrorCode.UNKNOWN_SERVER_ERROR)]
    assert holders(kafka_cluster, lambda core: (group, tid, 0) in core.share_state.states) == []


def test_a_partition_is_assigned_only_once_its_share_coordinator_initialized_its_state(
        kafka_cluster: ClusterThread) -> None:
    """The group coordinator initializes a newly subscribed partition's state on its share
    coordinator, another broker here, over a slowed link: the member gets the partition
    only once the state is there (not at the next heartbeat, as the assignment interval of 0
    would have it)."""
    topic = new_name("share-init")
    kafka_cluster.create_topic(topic, 1, 3)
    tid = topic_id(kafka_cluster, topic)
    find_coordinator(kafka_cluster, 2, f"any-group:{tid}:0")
    for i in range(500):
        group = f"share-init-g-{i}"
        coordinator = find_coordinator(kafka_cluster, 0, group)
        if share_coordinator(kafka_cluster, share_key(group, tid, 0)) != coordinator:
            break
    key = (group, tid, 0)
    state_node = share_coordinator(kafka_cluster, share_key(*key))
    port = kafka_cluster.inspect(lambda c: c.brokers[coordinator].config.port)
    # 300 ms each way: the state write's round trip plus its replication (this broker is a
    # follower of the state partition, over the same link) stays within the test cluster's 3 s
    # request timeout (at 1 s each way every attempt timed out on the coordinator's side and
    # the partition came after the persister gave up, 30 s later)
    kafka_cluster.slow(coordinator, state_node, 300)

    async def join() -> tuple[float, list[int]]:
        conn = await Connection.open("127.0.0.1", port, client_id="share-test")
        try:
            hb = request_codec(ApiKey.SHARE_GROUP_HEARTBEAT).cls
            r = await conn.request(hb(group_id=group, member_id="m-1", member_epoch=0,
                                      subscribed_topic_names=[topic]), 1)
            start = time.monotonic()
            while time.monotonic() - start < 20:
                r = await conn.request(hb(group_id=group, member_id="m-1", member_epoch=r.member_epoch), 1)
                if r.assignment is not None and r.assignment.topic_partitions:
                    # the state is on the share coordinator when the partition is handed out
                    return time.monotonic() - start, holders(kafka_cluster, lambda c: key in c.share_state.states)
                await asyncio.sleep(0.1)
            raise AssertionError("never assigned")
        finally:
            await conn.close()

    waited, initialized_on = run(join(), 40)
    kafka_cluster.heal()
    assert initialized_on == [state_node]
    assert waited >= 0.6, waited   # at least the slowed round trip


def find_coordinator(kafka_cluster: ClusterThread, key_type: int, key: str) -> int:
    """FindCoordinator (v4) until the key has a coordinator (its internal topic made on first use)."""
    async def ask() -> int:
        host, port = kafka_cluster.bootstrap.split(",")[0].rsplit(":", 1)
        conn = await Connection.open(host, int(port), client_id="share-test")
        try:
            cls = request_codec(ApiKey.FIND_COORDINATOR).cls
            for _ in range(100):
                resp = await conn.request(cls(key_type=key_type, coordinator_keys=[key]), 4)
                c = resp.coordinators[0]
                if c.error_code == 0:
                    return int(c.node_id)
                await asyncio.sleep(0.1)
            raise AssertionError(f"no coordinator for {key!r}")
        finally:
            await conn.close()
    return run(ask(), 30)


# ---- the persister of a cluster's broker, sans-I/O -------------------------------------------------

class _FakeCore:
    """What :class:`RemoteSharePersister` uses of a cluster's broker: the image (who leads
    ``__share_group_state``), a transport recording what is sent, a fake clock."""

    node_id = 1
    detached = False

    def __init__(self, leader: int) -> None:
        self.clock = FakeClock()
        self.timer = SystemTimer(clock=self.clock)
        self.partitions = {i: SimpleNamespace(leader=leader) for i in range(3)}
        self.image = SimpleNamespace(topics={SHARE_STATE_TOPIC: SimpleNamespace(partitions=self.partitions)})
        self.replicas = SimpleNamespace(config=SimpleNamespace(request_timeout_ms=3000))
        self.sent: list[tuple[int, int, Any, Any]] = []
        self.transport = SimpleNamespace(send=lambda node, api, ver, body, cb, timeout:
                                         self.sent.append((node, api, body, cb)))

    def wall_ms(self) -> int:
        return 0

    def answer(self, code: int = 0) -> None:
        node, api, body, cb = self.sent.pop(0)
        cls = response_codec(api).cls
        topic = next(getattr(cls, n) for n in ("InitializeStateResult", "WriteStateResult", "ReadStateResult")
                     if hasattr(cls, n))
        cb(cls(results=[topic(topic_id=body.topics[0].topic_id, partitions=[
            cls.PartitionResult(partition=body.topics[0].partitions[0].partition, error_code=code)])]))


def test_the_persister_writes_in_order_folds_waiting_writes_and_follows_a_moved_coordinator() -> None:
    core = _FakeCore(leader=2)
    persister = RemoteSharePersister(core)  # type: ignore[arg-type]
    key = ("g", Uuid(b"\x07" * 16), 0)
    persister.initialize(key, 0, 10)
    for start in (10, 11, 12):  # three writes while the initialize is on its way
        persister.write(key, 0, 1, start, 0, [(start, start, ACKNOWLEDGED, 1)])
    flushed: list[str] = []
    persister.when_flushed(lambda: flushed.append("all written"))
    # one request at a time per key: the initialize first, to the share coordinator (broker 2)
    assert [(n, api) for n, api, _, _ in core.sent] == [(2, ApiKey.INITIALIZE_SHARE_GROUP_STATE)]
    core.answer()
    # the three writes were folded into the newest (each carries the whole in-flight window)
    assert [(n, api, b.topics[0].partitions[0].start_offset) for n, api, b, _ in core.sent] == [
        (2, ApiKey.WRITE_SHARE_GROUP_STATE, 12)]
    assert flushed == []
    # the coordinator moved: NOT_COORDINATOR, asked again of the new leader after a pause
    for p in core.partitions.values():
        p.leader = 3
    core.answer(ErrorCode.NOT_COORDINATOR)
    assert core.sent == [] and flushed == []
    core.clock.advance(100)
    core.timer.advance_clock()
    assert [(n, api) for n, api, _, _ in core.sent] == [(3, ApiKey.WRITE_SHARE_GROUP_STATE)]
    core.answer()
    assert flushed == ["all written"] and core.sent == []
    assert persister.read(key) is not None and persister.read(key).start_offset == 12  # type: ignore[union-attr]
