"""KIP-848 consumer groups of real clients against the in-process broker on 127.0.0.1:
confluent-kafka (librdkafka 2.x) consumers with ``group.protocol=consumer`` sharing a topic,
a member leaving, commits surviving a broker restart."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kproto.broker import Broker
from kproto.storage import read_internal

from broker_support import produce_jobs, wait_for

CFG = dict(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4,
           group_consumer_heartbeat_interval_ms=100)


def run(coro, timeout=90):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Member(threading.Thread):
    """A confluent-kafka consumer of the new protocol polling in its own thread, committing
    each record before the next poll."""

    def __init__(self, ck, bootstrap, name, **conf):
        super().__init__(daemon=True)
        self.ck = ck
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "workers",
                                     "group.protocol": "consumer", "client.id": name,
                                     "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
        self.values: list[bytes] = []
        self.errors: list = []
        self.stop = threading.Event()
        self.consumer.subscribe(["jobs"])

    @property
    def assignment(self) -> list[int]:
        return sorted(p.partition for p in self._assignment)

    def run(self):
        self._assignment: list = []
        while not self.stop.is_set():
            m = self.consumer.poll(0.05)
            self._assignment = self.consumer.assignment()
            if m is None:
                continue
            if m.error():
                self.errors.append(m.error())
                continue
            self.values.append(m.value())
            self.commit(m)
        self.consumer.close()  # leaves the group (member epoch -1)

    def commit(self, m):
        """A commit sent before the answer to the heartbeat acknowledging a revocation carries
        the epoch that heartbeat bumps: STALE_MEMBER_EPOCH, as Kafka's coordinator answers
        (before KIP-1251's assignment epochs), and librdkafka gives it to the application.
        Partitions are only revoked inside poll(), so this member still owns the record's
        partition, and the retry carries the new epoch (the heartbeat's answer came first on
        the coordinator's connection)."""
        for attempt in range(10):
            try:
                self.consumer.commit(m, asynchronous=False)
                return
            except self.ck.KafkaException as exc:
                if exc.args[0].code() != self.ck.KafkaError.STALE_MEMBER_EPOCH or attempt == 9:
                    self.errors.append(exc.args[0])
                    return
                time.sleep(0.05)

    def finish(self):
        self.stop.set()
        self.join(15)


def test_confluent_kafka_consumer_protocol_group_shares_hands_over_and_resumes_after_restart(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    ck_admin = pytest.importorskip("confluent_kafka.admin")
    if ck.libversion()[1] < 0x020a0000:
        pytest.skip("librdkafka < 2.10 has no generally available group.protocol=consumer")
    data = tmp_path / "data"

    async def first_run():
        async with Broker(data, **CFG) as broker:
            admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap})

            def work():
                admin.create_topics([ck_admin.NewTopic("jobs", 6, 1)])["jobs"].result(10)
                produce_jobs(broker.bootstrap, 0, 300)
                # Offsets committed before anyone joins (into the empty group, which the first
                # heartbeat converts): no member needs auto.offset.reset's ListOffsets. In
                # librdkafka 2.16 a ListOffsets still in flight when the member's assignment
                # changes (the first member's six partitions revoked down to two as the others
                # join) answers "outdated" and re-arms the offset query regardless
                # (rd_kafka_toppar_handle_Offset): 500 ms later the partition, owned or not, is
                # fetched again from the earliest offset, and its records are delivered again
                # (an owned one at once, a revoked one when it comes back to that member).
                done = admin.alter_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(
                    "workers", [ck.TopicPartition("jobs", p, 0) for p in range(6)])])["workers"].result(10)
                assert [(tp.partition, tp.offset, tp.error) for tp in done.topic_partitions] == \
                    [(p, 0, None) for p in range(6)]
                members = [Member(ck, broker.bootstrap, name) for name in "abc"]
                for m in members:
                    m.start()
                wait_for(lambda: sorted(p for m in members for p in m.assignment) == list(range(6))
                         and all(len(m.assignment) == 2 for m in members), what="three share six")
                produce_jobs(broker.bootstrap, 300, 300)
                wait_for(lambda: sum(len(m.values) for m in members) >= 600, what="all consumed")
                a, b, c = members
                c.finish()                      # c leaves: a and b take its partitions
                wait_for(lambda: sorted(a.assignment + b.assignment) == list(range(6)), what="c's share moves")
                produce_jobs(broker.bootstrap, 600, 60)
                wait_for(lambda: sum(len(m.values) for m in members) >= 660, what="the rest consumed")
                core = broker.core
                group = core.groups.consumer.groups["workers"]
                state = (group.state, len(group.members), group.group_epoch)
                listed = admin.list_consumer_groups().result(10)
                a.finish()
                b.finish()
                return members, state, listed

            return await asyncio.get_running_loop().run_in_executor(None, work)

    members, state, listed = run(first_run())
    assert not any(m.errors for m in members)
    consumed = [v for m in members for v in m.values]
    assert sorted(consumed) == sorted(b"job-%d" % i for i in range(660))   # each exactly once
    assert state[:2] == ("Stable", 2) and state[2] >= 4
    assert [(g.group_id, str(g.type)) for g in listed.valid] == [("workers", "ConsumerGroupType.CONSUMER")]
    tables = read_internal(str(data))
    last = {}
    for r in tables["OffsetCommit"].to_pylist():
        last[(r["key"]["topic"], r["key"]["partition"])] = r["value"]["offset"]
    assert last == {("jobs", p): 110 for p in range(6)}
    assert {r["key"]["group_id"] for r in tables["ConsumerGroupMetadata"].to_pylist()} == {"workers"}

    async def second_run():
        async with Broker(data, **CFG) as broker:
            def work():
                produce_jobs(broker.bootstrap, 660, 60)
                m = Member(ck, broker.bootstrap, "d")
                m.start()
                wait_for(lambda: len(m.values) >= 60, what="d consumes the new records")
                time.sleep(0.3)                 # nothing older may follow
                m.finish()
                return m
            return await asyncio.get_running_loop().run_in_executor(None, work)

    d = run(second_run())
    assert not d.errors
    assert sorted(d.values) == sorted(b"job-%d" % i for i in range(660, 720))
