"""``kproto cluster`` (issue 17): one 'listening on' line per broker, clients served, SIGTERM
stops every node cleanly, and the run's ``__cluster_metadata`` read back with
``kproto.storage.read_internal`` names what happened."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kproto.storage import internal

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def test_kproto_cluster_serves_until_sigterm(tmp_path) -> None:
    data = tmp_path / "cluster"
    proc = subprocess.Popen([sys.executable, "-m", "kproto", "cluster", "--brokers", "2", "--data", str(data),
                             "--session-timeout-ms", "3000", "--heartbeat-interval-ms", "500"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline().strip() for _ in range(2)]
        assert all(line.startswith("listening on 127.0.0.1:") for line in lines), lines
        bootstrap = ",".join(line.split()[-1] for line in lines)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert sorted(b.id for b in admin.describe_cluster().result(10).nodes) == [1, 2]
        admin.create_topics([NewTopic("cli", 2, 2)])["cli"].result(15)
        p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(20):
            p.produce("cli", b"v%d" % i, partition=i % 2)
        assert p.flush(20) == 0
        c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "cli", "auto.offset.reset": "earliest"})
        c.subscribe(["cli"])
        got, deadline = [], time.monotonic() + 20
        while len(got) < 20 and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(20, 0.5) if m.error() is None]
        c.close()
        assert sorted(got) == sorted(b"v%d" % i for i in range(20))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    # every broker holds both replicas, closed cleanly; the controller's log tells the story
    for b in ("broker-1", "broker-2"):
        assert {"cli-0", "cli-1", "__cluster_metadata-0"} <= set(os.listdir(data / b))
        assert os.path.exists(data / b / ".kafka_cleanshutdown")
    tables = internal.read_internal(str(data / "controller-3001" / "__cluster_metadata-0"))
    def records(name: str) -> list[dict]:
        return [row["record"] for row in tables[name].to_pylist()]

    assert sorted(r["broker_id"] for r in records("RegisterBrokerRecord")) == [1, 2]
    (cli_id,) = [t["topic_id"] for t in records("TopicRecord") if t["name"] == "cli"]
    parts = [p for p in records("PartitionRecord") if p["topic_id"] == cli_id]
    assert sorted(p["partition_id"] for p in parts) == [0, 1]
    assert all(sorted(p["replicas"]) == [1, 2] and sorted(p["isr"]) == [1, 2] for p in parts)
    # SIGTERM stopped each broker as Kafka's does: a controlled shutdown, then fenced
    changes = sorted(tables["BrokerRegistrationChangeRecord"].to_pylist(), key=lambda row: row["offset"])
    for b in (1, 2):
        mine = [row["record"] for row in changes if row["record"]["broker_id"] == b]
        assert len(mine) >= 2 and mine[-2]["in_controlled_shutdown"] == 1 and mine[-1]["fenced"] == 1, mine
