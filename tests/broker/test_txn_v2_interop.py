"""Transactions under transaction version 2 (KIP-890) with the same outcomes on kproto's broker,
kproto's cluster and Apache Kafka 4.4.0: the Java 4.4 client (``java/KprotoTxn.java``) and
kproto's producer commit and abort transactions with a group's offsets in them; read_committed
consumers see exactly the committed records, the group exactly the committed offsets, and each
transaction's end bumped the producer epoch (the clients chose transaction version 2 from the
broker's finalized ``transaction.version``)."""
from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pytest

import java_interop as jv
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.consumer import Consumer
from kproto.client.producer import Producer

TARGETS = {"kproto": "kafka_broker", "cluster": "kafka_cluster", "apache": "apache_kafka"}
TRANSACTIONS = 5  # commit, abort, commit, abort, commit
PARTITIONS = 2


@pytest.fixture(scope="module")
def java_cp(tmp_path_factory):
    return jv.classpath(str(tmp_path_factory.mktemp("java")), "4.4.0")


def replicas(target: str) -> int:
    return 3 if target == "cluster" else 1


def expected(prefix: str = "") -> tuple[list[str], list[str]]:
    """The committed values and all values the transactions wrote, sorted."""
    every = [f"{'c' if t % 2 == 0 else 'a'}{t}-{i}" for t in range(TRANSACTIONS) for i in range(2 * PARTITIONS)]
    return sorted(prefix + v for v in every if v.startswith("c")), sorted(prefix + v for v in every)


@pytest.mark.parametrize("target", list(TARGETS))
def test_java_client_transactions(target, request, java_cp):
    broker = request.getfixturevalue(TARGETS[target])
    run = uuid.uuid4().hex[:8]
    topic, txn, group = f"jtx-{run}", f"jtx-{run}", f"jtxg-{run}"
    proc = subprocess.run(jv.command(java_cp, "KprotoTxn", broker.bootstrap, topic, str(PARTITIONS),
                                     str(replicas(target)), txn, group, str(TRANSACTIONS), "90"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-6000:]
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    by = {(e["event"], e.get("when") or e.get("isolation")): e for e in events}
    assert by[("client", None)]["version"] == "4.4.0"
    init, end = by[("state", "init")], by[("state", "end")]
    assert (init["state"], end["state"]) == ("Empty", "CompleteCommit")
    # transaction version 2: every end bumped the epoch (version 1 keeps it)
    assert (end["producer_id"], end["epoch"]) == (init["producer_id"], init["epoch"] + TRANSACTIONS)
    committed, every = expected()
    assert by[("read", "read_committed")]["values"] == committed
    assert by[("read", "read_uncommitted")]["values"] == every
    assert by[("offset", None)]["offset"] == TRANSACTIONS  # the last committed transaction's
    ms = by[("done", None)]["ms"]
    print(f"Java 4.4 client on {target}: {TRANSACTIONS} transactions in {ms} ms "
          f"({TRANSACTIONS * 1000 / max(ms, 1):.0f}/s)")


async def kproto_transactions(bootstrap: str, rf: int) -> dict:
    run = uuid.uuid4().hex[:8]
    topic, group = f"ktx-{run}", f"ktxg-{run}"
    async with await Cluster(bootstrap).start() as cluster:
        await Admin(cluster).create_topics({topic: PARTITIONS}, replication_factor=rf)
        await cluster.wait_for_leaders([topic])
        p = await Producer(cluster, transactional_id=f"ktx-{run}").start()
        tm = p.transactions
        assert tm is not None
        first = (p.producer_id, p.producer_epoch)
        t0 = time.monotonic()
        for t in range(TRANSACTIONS):
            commit = t % 2 == 0
            p.begin_transaction()
            for i in range(2 * PARTITIONS):
                await p.send(topic, f"{'c' if commit else 'a'}{t}-{i}".encode(), partition=i % PARTITIONS)
            await p.send_offsets_to_transaction({(topic, 0): t + 1}, group)
            await p.flush()
            await (p.commit_transaction() if commit else p.abort_transaction())
        elapsed = time.monotonic() - t0
        out = {"tv2": tm.tv2, "first": first, "last": (p.producer_id, p.producer_epoch), "elapsed": elapsed}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = await Consumer(cluster, [topic], isolation_level=isolation, fetch_max_wait_ms=50).start()
            want = len(expected()[0 if isolation == "read_committed" else 1])
            got: list[str] = []
            deadline = time.monotonic() + 20
            while len(got) < want and time.monotonic() < deadline:
                got += [r.value.decode() for r in await consumer.getmany(0.2)]
            got += [r.value.decode() for r in await consumer.getmany(0.3)]  # nothing more
            await consumer.close()
            out[isolation] = sorted(got)
        reader = await Consumer(cluster, [topic], group_id=group).start()
        out["offset"] = (await reader.committed([(topic, 0)]))[(topic, 0)]
        await reader.close()
        return out


@pytest.mark.parametrize("target", list(TARGETS))
def test_kproto_producer_transactions(target, request):
    broker = request.getfixturevalue(TARGETS[target])
    out = asyncio.run(asyncio.wait_for(kproto_transactions(broker.bootstrap, replicas(target)), 90))
    assert out["tv2"]  # the broker finalizes transaction.version 2
    assert out["last"] == (out["first"][0], out["first"][1] + TRANSACTIONS)
    committed, every = expected()
    assert out["read_committed"] == committed
    assert out["read_uncommitted"] == every
    assert out["offset"] == TRANSACTIONS
    print(f"kproto's producer on {target}: {TRANSACTIONS} transactions in {out['elapsed'] * 1000:.0f} ms "
          f"({TRANSACTIONS / out['elapsed']:.0f}/s)")


@pytest.mark.kafka_cluster(transaction_version=1)
def test_kproto_producer_transactions_on_a_cluster_finalizing_version_1(kafka_cluster):
    # transaction version 1 on a cluster: the leaders still verify each write with the
    # coordinator on another broker, and the producer keeps its epoch
    out = asyncio.run(asyncio.wait_for(kproto_transactions(kafka_cluster.bootstrap, 3), 90))
    assert not out["tv2"] and out["last"] == out["first"]
    committed, every = expected()
    assert (out["read_committed"], out["read_uncommitted"], out["offset"]) == (committed, every, TRANSACTIONS)
