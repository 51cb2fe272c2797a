"""kproto's client against real brokers: kproto's own (``kafka_broker``) and Apache Kafka 4.4.0's
single node (``apache_kafka``, shared by the session), through ``any_broker``.

What the tests of the peers (test_client_io_interop.py) do not reach: producers at acks 0, 1
and all, the KIP-848 consumer group protocol, static members, a seek by time, and the admin
client's methods; and the answers a broker gives while it is still creating its internal
topics, which a fresh Apache Kafka gives and kproto's broker gives on request (an Intercept).
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kproto.broker import Intercept
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.consumer import Consumer
from kproto.client.producer import Producer
from kproto.client.protocol import BrokerError
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey


def run(coro: Any, timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


def new_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def is_apache(request: pytest.FixtureRequest) -> bool:
    return bool(request.node.callspec.params["any_broker"] == "apache")


async def consume(consumer: Consumer, count: int, deadline_s: float = 20) -> list:
    got: list = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        got += await consumer.getmany(0.3)
    return got


# ---- a broker still creating its internal topics ------------------------------------------------

def test_idempotent_producer_retries_init_producer_id_while_the_coordinator_loads(kafka_broker):
    # a fresh Apache Kafka answers COORDINATOR_LOAD_IN_PROGRESS while it creates
    # __transaction_state; Kafka's producer retries it after its backoff
    hook = kafka_broker.control(ApiKey.INIT_PRODUCER_ID,
                                Intercept(error=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), times=3)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({"t": 1})
            producer = await Producer(cluster).start()
            meta = await (await producer.send("t", b"v"))
            await producer.close()
            return producer.producer_id, meta.offset

    pid, offset = run(main())
    assert hook.seen == 3 and pid >= 0 and offset == 0


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS])
def test_classic_consumer_rejoins_while_the_group_coordinator_loads(kafka_broker, code):
    # a fresh Apache Kafka answers JoinGroup with NOT_COORDINATOR while it creates
    # __consumer_offsets: Kafka's client looks the coordinator up again and joins again
    join = kafka_broker.control(ApiKey.JOIN_GROUP, Intercept(error=code), times=4)
    sync = kafka_broker.control(ApiKey.SYNC_GROUP, Intercept(error=code), times=1)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({"t": 2})
            producer = await Producer(cluster).start()
            for i in range(4):
                await producer.send("t", b"v%d" % i, partition=i % 2)
            await producer.close()
            consumer = await Consumer(cluster, ["t"], group_id="g", heartbeat_interval_ms=200).start()
            got = await consume(consumer, 4)
            assignment = sorted(consumer.assignment)
            await consumer.close()
            return got, assignment

    got, assignment = run(main())
    assert join.seen == 4 and sync.seen == 1
    assert assignment == [("t", 0), ("t", 1)] and len(got) == 4


def test_classic_consumer_gives_up_when_no_coordinator_answers(kafka_broker, monkeypatch):
    monkeypatch.setattr("kproto.client.consumer.COORDINATOR_WAIT_S", 0.5)  # 30 s otherwise
    kafka_broker.control(ApiKey.JOIN_GROUP, Intercept(error=ErrorCode.NOT_COORDINATOR), times=None)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({"t": 1})
            consumer = await Consumer(cluster, ["t"], group_id="g", rebalance_timeout_ms=1000).start()
            t0 = time.monotonic()
            with pytest.raises(Exception, match="NOT_COORDINATOR"):
                while time.monotonic() - t0 < 30:  # each call returns at its timeout while joining
                    assert await consumer.getmany(0.1) == []
            return time.monotonic() - t0

    took = run(main())
    assert 1.0 <= took < 10


def test_list_offsets_asks_again_while_the_leader_is_not_ready(kafka_broker):
    # Apache Kafka names a new partition's leader in Metadata a moment before the leader takes
    # requests (NOT_LEADER_OR_FOLLOWER); Kafka's clients refresh metadata and ask again
    hook = kafka_broker.control(ApiKey.LIST_OFFSETS,
                                Intercept(error=ErrorCode.NOT_LEADER_OR_FOLLOWER), times=2)

    async def main():
        async with Cluster(kafka_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({"t": 2})
            await cluster.wait_for_leaders(["t"])
            return await Admin(cluster).list_offsets([("t", 0), ("t", 1)], "latest")

    assert run(main()) == {("t", 0): 0, ("t", 1): 0} and hook.seen == 2


# ---- against both brokers ---------------------------------------------------------------------

def test_producers_at_acks_0_1_and_all(any_broker):
    topic = new_topic("acks")

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            await Admin(cluster).create_topics({topic: 3})
            await cluster.wait_for_leaders([topic])
            # Apache Kafka names a leader in Metadata a moment before the partition takes
            # writes (NOT_LEADER_OR_FOLLOWER until then), and nothing retries at acks=0
            deadline = time.monotonic() + 10
            while True:
                try:
                    await Admin(cluster).list_offsets([(topic, 0)])
                    break
                except BrokerError:
                    assert time.monotonic() < deadline, "partition 0 never took requests"
                    await asyncio.sleep(0.1)
            metas = {}
            for part, acks in enumerate((0, 1, -1)):
                producer = await Producer(cluster, acks=acks, idempotent=acks == -1, linger_ms=1).start()
                futs = [await producer.send(topic, b"%d-%d" % (acks, i), partition=part) for i in range(10)]
                await producer.close()
                metas[acks] = [f.result() for f in futs]
            consumer = await Consumer(cluster, [topic]).start()
            got = await consume(consumer, 30)
            await consumer.close()
            return metas, got

    metas, got = run(main())
    # acks=0: the broker sends no answer, so no offset is known (Kafka's RecordMetadata: -1)
    assert [m.offset for m in metas[0]] == [-1] * 10
    assert [m.offset for m in metas[1]] == list(range(10)) == [m.offset for m in metas[-1]]
    by_part = {p: [(r.offset, r.value) for r in got if r.partition == p] for p in range(3)}
    for part, acks in enumerate((0, 1, -1)):
        assert by_part[part] == [(i, b"%d-%d" % (acks, i)) for i in range(10)]


def test_kip848_members_share_hand_over_and_commit(any_broker, request):
    topic, group = new_topic("k848"), new_topic("k848-group")

    async def main():
        async with Cluster(any_broker.bootstrap) as c0, Cluster(any_broker.bootstrap) as c1, \
                Cluster(any_broker.bootstrap) as c2:
            admin = Admin(c0)
            await admin.create_topics({topic: 4})
            producer = await Producer(c0).start()
            for i in range(40):
                await producer.send(topic, b"r%d" % i, partition=i % 4)
            await producer.flush()
            kw = dict(group_id=group, group_protocol="consumer", enable_auto_commit=False)
            a = await Consumer(c1, [topic], **kw).start()
            assert sorted(await a.wait_for_assignment(20)) == [(topic, p) for p in range(4)]
            values = [r.value for r in await consume(a, 20)]
            await a.commit()
            b = await Consumer(c2, [topic], **kw).start()
            deadline = time.monotonic() + 30
            while not (len(a.assignment) == 2 and len(b.assignment) == 2) and time.monotonic() < deadline:
                for c in (a, b):
                    values += [r.value for r in await c.getmany(0.1)]
            shared = sorted(a.assignment), sorted(b.assignment)
            described = (await admin.describe_groups([group]))[group]
            values += [r.value for c in (a, b) for r in await consume(c, 0)]
            while len(values) < 40 and time.monotonic() < deadline:
                for c in (a, b):
                    values += [r.value for r in await c.getmany(0.1)]
            await a.commit()
            await b.commit()
            await b.close()
            while len(a.assignment) < 4 and time.monotonic() < deadline:
                await a.getmany(0.1)
            taken_back = sorted(a.assignment)
            await a.close()
            committed = await admin.list_group_offsets(group)
            await producer.close()
            return values, shared, described, taken_back, committed

    values, (sa, sb), described, taken_back, committed = run(main(), timeout=90)
    assert len(sa) == len(sb) == 2 and sorted(sa + sb) == [(topic, p) for p in range(4)]
    assert described.state == "Stable" and len(described.members) == 2
    assert all(m.member_epoch and m.member_epoch > 0 for m in described.members)
    assert taken_back == [(topic, p) for p in range(4)]
    # each record read, some twice at most (a partition moves before its reads are committed)
    assert set(values) == {b"r%d" % i for i in range(40)}
    assert committed == {(topic, p): 10 for p in range(4)}


def test_kip848_static_member_keeps_its_partitions_across_a_restart(any_broker):
    topic, group = new_topic("static"), new_topic("static-group")

    async def main():
        async with Cluster(any_broker.bootstrap) as c1, Cluster(any_broker.bootstrap) as c2:
            await Admin(c1).create_topics({topic: 4})
            kw = dict(group_id=group, group_protocol="consumer", enable_auto_commit=False)
            a = await Consumer(c1, [topic], group_instance_id="a", **kw).start()
            await a.wait_for_assignment(20)
            b = await Consumer(c2, [topic], group_instance_id="b", **kw).start()
            deadline = time.monotonic() + 30
            while not (len(a.assignment) == 2 and len(b.assignment) == 2) and time.monotonic() < deadline:
                await asyncio.gather(a.getmany(0.1), b.getmany(0.1))
            before = sorted(b.assignment)
            await b.close()  # static: leaves with epoch -2, the broker keeps b's partitions for it
            for _ in range(5):  # a heartbeats on: nothing moves while b is away
                await a.getmany(0.2)
            a_while_away = sorted(a.assignment)
            b2 = await Consumer(c2, [topic], group_instance_id="b", **kw).start()
            after = sorted(await b2.wait_for_assignment(20))
            await b2.close()
            await a.close()
            return before, a_while_away, after

    before, a_while_away, after = run(main(), timeout=90)
    assert len(before) == 2 and after == before
    assert len(a_while_away) == 2 and not set(a_while_away) & set(before)


def test_classic_static_member_keeps_its_partitions_across_a_restart(any_broker):
    """KIP-345 with the classic protocol: a static member's close sends no LeaveGroup, and its
    return under the same instance id gets its partitions back with no rebalance."""
    topic, group = new_topic("cstatic"), new_topic("cstatic-group")

    async def main():
        async with Cluster(any_broker.bootstrap) as c1, Cluster(any_broker.bootstrap) as c2:
            await Admin(c1).create_topics({topic: 4})
            kw = dict(group_id=group, enable_auto_commit=False, session_timeout_ms=10000,
                      rebalance_timeout_ms=5000, heartbeat_interval_ms=200)
            a = await Consumer(c1, [topic], group_instance_id="a", **kw).start()
            b = await Consumer(c2, [topic], group_instance_id="b", **kw).start()
            deadline = time.monotonic() + 30

            def settled() -> bool:
                return (len(a.assignment) == 2 and len(b.assignment) == 2 and a.generation == b.generation
                        and not a.rebalance_needed and not b.rebalance_needed)

            while not settled() and time.monotonic() < deadline:
                await asyncio.gather(a.getmany(0.1), b.getmany(0.1))
            assert settled(), "the two static members did not settle on two partitions each in 30 s"
            before, generation = sorted(b.assignment), a.generation
            await b.close()
            for _ in range(5):  # within the session timeout: nothing moves
                await a.getmany(0.2)
            a_while_away = sorted(a.assignment)
            members = len((await Admin(c1).describe_groups([group]))[group].members)
            b2 = await Consumer(c2, [topic], group_instance_id="b", **kw).start()
            deadline = time.monotonic() + 30  # its own time: the first settling may have used most
            while not b2.assignment and time.monotonic() < deadline:
                await asyncio.gather(a.getmany(0.1), b2.getmany(0.1))
            after = sorted(b2.assignment)
            for _ in range(3):
                await asyncio.gather(a.getmany(0.1), b2.getmany(0.1))
            result = before, generation, a_while_away, members, after, a.generation, sorted(a.assignment)
            await b2.close()
            await a.close()
            return result

    before, generation, a_while_away, members, after, generation_after, a_after = run(main(), timeout=150)
    assert len(before) == 2 and after == before
    assert members == 2                                 # b is still a member while away
    assert len(a_while_away) == 2 and not set(a_while_away) & set(before)
    assert generation_after == generation and a_after == a_while_away  # no rebalance


def test_getmany_returns_within_its_timeout_while_a_join_waits_for_another_member(any_broker):
    """Kafka's poll(timeout) during a rebalance: the coordinator holds a JoinGroup until every
    member rejoined (up to the rebalance timeout); getmany returns at its timeout with the
    round still under way, so one loop polling two consumers in turn gets both into it.
    A getmany that waited for the JoinGroup kept the other member out of every round: each
    round ended at the rebalance timeout without it, and the next began when it came back."""
    topic, group = new_topic("polljoin"), new_topic("polljoin-group")

    async def main():
        async with Cluster(any_broker.bootstrap) as c1, Cluster(any_broker.bootstrap) as c2:
            await Admin(c1).create_topics({topic: 4})
            kw = dict(group_id=group, enable_auto_commit=False, session_timeout_ms=10000,
                      rebalance_timeout_ms=20000, heartbeat_interval_ms=200)
            a = await Consumer(c1, [topic], **kw).start()
            deadline = time.monotonic() + 30
            while len(a.assignment) != 4 and time.monotonic() < deadline:
                await a.getmany(0.1)
            alone = len(a.assignment)
            b = await Consumer(c2, [topic], **kw).start()
            t0 = time.monotonic()
            first = await b.getmany(0.3)  # its JoinGroup waits for a, which is not polling
            waited = time.monotonic() - t0
            joining = b.rebalance_needed
            while not (len(a.assignment) == 2 and len(b.assignment) == 2 and a.generation == b.generation) \
                    and time.monotonic() < deadline:
                await asyncio.gather(a.getmany(0.1), b.getmany(0.1))
            settled = time.monotonic() - t0
            result = alone, first, waited, joining, sorted(a.assignment + b.assignment), settled
            await b.close()
            await a.close()
            return result

    alone, first, waited, joining, together, settled = run(main(), timeout=90)
    assert alone == 4
    assert first == [] and joining and waited < 2.0  # not the 20 s rebalance timeout
    assert together == [(topic, p) for p in range(4)]
    assert settled < 15  # well inside one rebalance timeout: both made the same round


def test_seek_by_time(any_broker):
    topic, base = new_topic("bytime"), 1_700_000_000_000

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            admin = Admin(cluster)
            await admin.create_topics({topic: 2})
            producer = await Producer(cluster).start()
            for i in range(10):
                await producer.send(topic, b"v%d" % i, partition=0, timestamp_ms=base + 1000 * i)
            await producer.flush()
            consumer = await Consumer(cluster, [topic]).start()
            tps = [(topic, 0), (topic, 1)]
            at = await consumer.list_offsets(tps, base + 4500)       # the first record at or after
            past = await admin.list_offsets(tps, base + 60_000)       # none: -1
            newest = await admin.list_offsets([(topic, 0)], "max_timestamp")
            consumer.seek(topic, 0, at[(topic, 0)])
            got = await consume(consumer, 5)
            await producer.close()
            await consumer.close()
            return at, past, newest, got

    at, past, newest, got = run(main())
    assert at == {(topic, 0): 5, (topic, 1): -1}
    assert past == {(topic, 0): -1, (topic, 1): -1}
    assert newest == {(topic, 0): 9}
    assert [(r.offset, r.value, r.timestamp) for r in got] == \
        [(i, b"v%d" % i, base + 1000 * i) for i in range(5, 10)]


def test_admin_methods(any_broker, request):
    topic, group = new_topic("admin"), new_topic("admin-group")

    async def main():
        async with Cluster(any_broker.bootstrap) as cluster:
            admin = Admin(cluster)
            out: dict = {"cluster": await admin.describe_cluster()}
            await admin.create_topics({topic: 2}, configs={topic: {"retention.ms": "3600000"}})
            with pytest.raises(BrokerError, match="TOPIC_ALREADY_EXISTS"):
                await admin.create_topics({topic: 2})
            await admin.create_topics({topic: 2}, exist_ok=True)
            await admin.create_partitions({topic: 3})
            deadline = time.monotonic() + 10  # Apache Kafka's brokers learn of them a moment later
            while len((await admin.describe_topics([topic]))[topic].partitions) < 3 \
                    and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await cluster.wait_for_leaders([topic])
            out["listed"] = topic in await admin.list_topics()
            out["partitions"] = sorted((await admin.describe_topics([topic]))[topic].partitions)
            await admin.alter_configs({("topic", topic): {"retention.bytes": "1048576"}})
            configs = (await admin.describe_configs([("topic", topic)]))[("topic", topic)]
            out["configs"] = {k: configs[k].value for k in ("retention.ms", "retention.bytes")}
            producer = await Producer(cluster).start()
            for i in range(6):
                await producer.send(topic, b"v%d" % i, b"k%d" % i, partition=0)
            await producer.close()
            out["low"] = await admin.delete_records({(topic, 0): 4})
            out["earliest"] = await admin.list_offsets([(topic, 0)], "earliest")
            out["latest"] = await admin.list_offsets([(topic, 0), (topic, 2)], "latest")
            consumer = await Consumer(cluster, [topic], group_id=group, enable_auto_commit=False).start()
            await consume(consumer, 2)
            await consumer.commit()
            out["groups"] = [(g.group_id, g.protocol_type) for g in await admin.list_groups() if g.group_id == group]
            d = (await admin.describe_groups([group]))[group]
            out["described"] = (d.state, d.protocol, [m.assignment for m in d.members])
            await consumer.close()
            out["offsets"] = await admin.list_group_offsets(group)
            await admin.alter_group_offsets(group, {(topic, 0): 5})
            out["altered"] = await admin.list_group_offsets(group)
            await admin.delete_groups([group])
            out["groups_after"] = [g.group_id for g in await admin.list_groups() if g.group_id == group]
            try:
                await admin.describe_acls()
                out["acls"] = "answered"
            except BrokerError as e:
                out["acls"] = e.code
            await admin.delete_topics([topic])
            await admin.delete_topics([topic], missing_ok=True)
            deadline = time.monotonic() + 10
            while topic in await admin.list_topics() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            out["deleted"] = topic not in await admin.list_topics()
            return out

    out = run(main())
    assert out["cluster"].cluster_id and [b.port for b in out["cluster"].brokers] == \
        [int(any_broker.bootstrap.rsplit(":", 1)[1])]
    assert out["listed"] and out["partitions"] == [0, 1, 2]
    assert out["configs"] == {"retention.ms": "3600000", "retention.bytes": "1048576"}
    assert out["low"] == {(topic, 0): 4} and out["earliest"] == {(topic, 0): 4}
    assert out["latest"] == {(topic, 0): 6, (topic, 2): 0}
    assert out["groups"] == [(group, "consumer")]
    assert out["described"] == ("Stable", "range", [sorted((topic, p) for p in range(3))])
    # the commit covers every assigned partition, the empty ones at 0 (as Kafka's consumer)
    assert out["offsets"] == {(topic, 0): 6, (topic, 1): 0, (topic, 2): 0}
    assert out["altered"] == {(topic, 0): 5, (topic, 1): 0, (topic, 2): 0}
    assert out["groups_after"] == []
    # no authorizer configured: Kafka answers SECURITY_DISABLED
    assert out["acls"] == ErrorCode.SECURITY_DISABLED
    assert out["deleted"]


# ---- a group of Java and kproto consumers on Apache Kafka -----------------------------------------

JAVA_MEMBER = Path(__file__).with_name("java") / "KprotoGroupMember.java"


@pytest.fixture(scope="session")
def java_member_cp(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The class path of KprotoGroupMember, compiled against the Java client kafka-clients 4.4.0
    (from the jars tools/setup.sh caches, as Apache Kafka's)."""
    from kproto.testing import apache
    if apache.unavailable() is not None or shutil.which("javac") is None:
        reason = apache.unavailable() or "no javac"
        if os.environ.get("CI"):
            pytest.fail(f"the Java client is needed under CI: {reason}", pytrace=False)
        pytest.skip(reason)
    jars = apache.client_jars("4.4.0")
    out = tmp_path_factory.mktemp("java-member")
    proc = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-cp", os.pathsep.join(jars),
                           "-d", str(out), str(JAVA_MEMBER)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return os.pathsep.join([str(out), *jars])


class JavaMember:
    """KprotoGroupMember in a JVM of its own; its events read by a thread as they come."""

    def __init__(self, cp: str, bootstrap: str, topic: str, group: str, protocol: str, workdir: Path) -> None:
        self.stop_file = workdir / f"{group}.stop"
        self.events: list[dict] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
             "KprotoGroupMember", bootstrap, topic, group, protocol, str(self.stop_file), "90"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def assignment(self) -> list[int]:
        assigned = [e["partitions"] for e in list(self.events) if e["event"] == "assigned"]
        return assigned[-1] if assigned else []

    def member_id(self) -> str:
        return str([e["member_id"] for e in list(self.events) if e["event"] == "assigned"][-1])

    def read(self) -> set[tuple[int, int]]:
        return {(e["partition"], e["offset"]) for e in list(self.events) if e["event"] == "record"}

    def stop(self) -> tuple[int, str]:
        self.stop_file.touch()
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(10)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()[-4000:]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_and_kproto_consumers_agree_on_assignments(apache_kafka, java_member_cp, protocol, tmp_path):
    """A Java consumer (kafka-clients 4.4.0) and a kproto consumer in one group: with the classic
    protocol whichever is leader computes the range assignment the other accepts; with KIP-848
    the broker assigns. Their assignments must split the topic two and two, and each must read
    every record of its partitions."""
    topic, group = new_topic(f"mixed-{protocol}"), new_topic("mixed-group")
    per_partition = 10

    async def main():
        async with Cluster(apache_kafka.bootstrap) as cluster:
            await Admin(cluster).create_topics({topic: 4})
            producer = await Producer(cluster).start()
            for i in range(4 * per_partition):
                await producer.send(topic, b"v%d" % i, partition=i % 4)
            await producer.close()
            java = JavaMember(java_member_cp, apache_kafka.bootstrap, topic, group, protocol, tmp_path)
            try:
                ours = await Consumer(cluster, [topic], group_id=group, group_protocol=protocol,
                                      enable_auto_commit=False, heartbeat_interval_ms=200,
                                      session_timeout_ms=6000).start()
                read: set = set()
                every = {(p, o) for p in range(4) for o in range(per_partition)}

                def settled() -> bool:
                    mine, theirs = sorted(p for _, p in ours.assignment), java.assignment()
                    return (len(mine) == len(theirs) == 2 and sorted(mine + theirs) == [0, 1, 2, 3]
                            and {(p, o) for p, o in every if p in mine} <= read
                            and {(p, o) for p, o in every if p in theirs} <= java.read())

                deadline = time.monotonic() + 60
                while not settled() and time.monotonic() < deadline:
                    read |= {(r.partition, r.offset) for r in await ours.getmany(0.2)}
                    assert java.proc.poll() is None, java.proc.stderr.read() if java.proc.stderr else ""
                mine, theirs = sorted(p for _, p in ours.assignment), java.assignment()
                ok = settled()
                ids = ours.member_id, java.member_id()
                await ours.close()
            finally:
                code, stderr = java.stop()
            return mine, theirs, ok, ids, code, stderr

    mine, theirs, ok, (our_id, their_id), code, stderr = run(main(), timeout=120)
    assert code == 0, stderr
    assert len(mine) == len(theirs) == 2 and sorted(mine + theirs) == [0, 1, 2, 3], (mine, theirs)
    if protocol == "classic":  # the range assignor: the member first by id takes partitions 0 and 1
        assert (mine == [0, 1]) == (our_id < their_id), (our_id, mine, their_id, theirs)
    assert ok, "each member read every record of its partitions"
