"""Consumer groups of real clients against the in-process broker on 127.0.0.1: confluent-kafka
(librdkafka) members joining and leaving, commits, resuming after a broker restart."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from kproto.broker import Broker
from kproto.storage import read_internal

from broker_support import produce_jobs, wait_for

GROUP_CFG = dict(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4)


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class Member(threading.Thread):
    """A confluent-kafka consumer polling in its own thread, committing each record."""

    def __init__(self, ck, bootstrap, topic, name, **conf):
        super().__init__(daemon=True)
        self.consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "workers",
                                     "client.id": name, "auto.offset.reset": "earliest",
                                     "enable.auto.commit": False, "session.timeout.ms": 6000,
                                     "heartbeat.interval.ms": 200, **conf})
        self.assignment: list[int] = []
        self.assignments: list[list[int]] = []
        self.values: list[bytes] = []
        self.errors: list = []
        self.stop = threading.Event()
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, parts):
        self.assignment = sorted(p.partition for p in parts)
        self.assignments.append(self.assignment)

    def _revoked(self, consumer, parts):
        self.assignment = []

    def run(self):
        while not self.stop.is_set():
            m = self.consumer.poll(0.05)
            if m is None:
                continue
            if m.error():
                self.errors.append(m.error())
                continue
            self.values.append(m.value())
            self.consumer.commit(m, asynchronous=False)
        self.consumer.close()  # leaves the group (LeaveGroup)

    def finish(self):
        self.stop.set()
        self.join(10)


def test_confluent_kafka_group_rebalances_on_join_and_leave_commits_and_resumes_after_restart(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    ck_admin = pytest.importorskip("confluent_kafka.admin")
    data = tmp_path / "data"

    async def first_run():
        async with Broker(data, **GROUP_CFG) as broker:
            admin = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap})

            def work():
                admin.create_topics([ck_admin.NewTopic("jobs", 6, 1)])["jobs"].result(10)
                produce_jobs(broker.bootstrap, 0, 300)
                a = Member(ck, broker.bootstrap, "jobs", "a")
                a.start()
                wait_for(lambda: a.assignment == list(range(6)), what="a owns all six")
                b = Member(ck, broker.bootstrap, "jobs", "b")
                b.start()
                wait_for(lambda: len(a.assignment) == 3 and len(b.assignment) == 3, what="a and b share")
                c = Member(ck, broker.bootstrap, "jobs", "c")
                c.start()
                wait_for(lambda: [len(m.assignment) for m in (a, b, c)] == [2, 2, 2], what="three share")
                assert sorted(a.assignment + b.assignment + c.assignment) == list(range(6))
                produce_jobs(broker.bootstrap, 300, 300)
                wait_for(lambda: len(set(a.values + b.values + c.values)) == 600, what="all consumed")
                c.finish()                              # c leaves: a and b take its partitions
                wait_for(lambda: sorted(a.assignment + b.assignment) == list(range(6)), what="c's share moves")
                described = admin.describe_consumer_groups(["workers"])["workers"].result(10)
                listed = admin.list_consumer_groups().result(10)
                a.finish()
                b.finish()
                return a, b, c, described, listed

            return await asyncio.get_running_loop().run_in_executor(None, work)

    a, b, c, described, listed = run(first_run())
    assert not (a.errors or b.errors or c.errors)
    assert {v for m in (a, b, c) for v in m.values} == {b"job-%d" % i for i in range(600)}
    assert len(described.members) == 2 and str(described.state).endswith("STABLE")
    assert [g.group_id for g in listed.valid] == ["workers"]
    commits = read_internal(str(data))["OffsetCommit"].to_pylist()
    last = {}
    for r in commits:
        last[(r["key"]["topic"], r["key"]["partition"])] = r["value"]["offset"]
    assert last == {("jobs", p): 100 for p in range(6)}

    async def second_run():
        async with Broker(data, **GROUP_CFG) as broker:
            def work():
                produce_jobs(broker.bootstrap, 600, 60)
                d = Member(ck, broker.bootstrap, "jobs", "d")
                d.start()
                wait_for(lambda: len(d.values) >= 60, what="the new records")
                time.sleep(0.3)                          # nothing older follows
                d.finish()
                return d
            return await asyncio.get_running_loop().run_in_executor(None, work)

    d = run(second_run())
    assert sorted(d.values) == sorted(b"job-%d" % i for i in range(600, 660))


def test_confluent_kafka_transactions_read_committed_consumers_never_see_aborted_records(tmp_path):
    ck = pytest.importorskip("confluent_kafka")

    async def main():
        async with Broker(tmp_path / "data", num_partitions=3, **GROUP_CFG) as broker:
            def work():
                p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "etl"})
                p.init_transactions(10)
                sent = {}
                for n, commit in enumerate([True, False, True, False, True]):
                    p.begin_transaction()
                    for i in range(30):
                        p.produce("ledger", value=b"t%d-%d" % (n, i), partition=i % 3)
                    p.flush(10)                     # the records reach the log before the end
                    (p.commit_transaction if commit else p.abort_transaction)(10)
                    sent[n] = commit

                def consume(isolation, group):
                    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                     "auto.offset.reset": "earliest", "isolation.level": isolation,
                                     "enable.auto.commit": False})
                    c.subscribe(["ledger"])
                    got = []
                    deadline = time.monotonic() + 10
                    want = 150 if isolation == "read_uncommitted" else 90
                    while len(got) < want and time.monotonic() < deadline:
                        m = c.poll(0.1)
                        if m is not None and not m.error():
                            got.append(m.value())
                    end = time.monotonic() + 0.3
                    while time.monotonic() < end:       # and nothing more comes
                        m = c.poll(0.05)
                        if m is not None and not m.error():
                            got.append(m.value())
                    c.close()
                    return got

                # a transaction left open is what read_committed consumers wait behind
                p.begin_transaction()
                p.produce("ledger", value=b"open", partition=0)
                p.flush(10)
                committed = consume("read_committed", "rc")
                everything = consume("read_uncommitted", "ru")
                p.abort_transaction(10)
                return committed, everything

            return await asyncio.get_running_loop().run_in_executor(None, work)

    committed, everything = run(main())
    assert sorted(committed) == sorted(b"t%d-%d" % (n, i) for n in (0, 2, 4) for i in range(30))
    assert len(everything) == 151 and b"open" in everything
