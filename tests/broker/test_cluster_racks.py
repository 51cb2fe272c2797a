"""broker.rack in a cluster (issue 17): brokers register their racks, clients see them, and the
controller's striped placement puts a partition's replicas on different racks."""
from __future__ import annotations

import pytest

from kproto.testing import CLUSTER_TEST_DEFAULTS, TEST_DEFAULTS, ClusterThread

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402


def test_replicas_spread_over_racks(tmp_path) -> None:
    racks = ["east", "east", "west", "west"]
    with ClusterThread(tmp_path / "c", brokers=4, racks=racks, **TEST_DEFAULTS, **CLUSTER_TEST_DEFAULTS) as cluster:
        cluster.create_topic("spread", 8, 2)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        nodes = admin.describe_cluster().result(10).nodes
        assert {n.id: n.rack for n in nodes} == {1: "east", 2: "east", 3: "west", 4: "west"}
        replicas = cluster.inspect(lambda c: [c.image().partition("spread", p).replicas for p in range(8)])
        for r in replicas:
            assert {racks[b - 1] for b in r} == {"east", "west"}, replicas
        # first replicas (leaders) alternate between the racks
        assert {racks[r[0] - 1] for r in replicas} == {"east", "west"}
