"""A kproto cluster with SASL_SSL everywhere: 3 brokers whose client listeners and
inter-broker and controller links are TLS + SCRAM-SHA-512 (the credentials written at format
time, as ``kafka-storage format --add-scram``); records produced through it are
replicated, and still after a leader change."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("cryptography")


def test_sasl_ssl_cluster_replicates_through_a_leader_change(tmp_path):
    from kproto.broker import Cluster
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster as Client
    from kproto.client.consumer import Consumer
    from kproto.client.producer import Producer
    from kproto.client.protocol import SaslConfig
    from kproto.client.sasl import SaslAuthenticationError
    from kproto.testing.tls import TestCA

    ca = TestCA(tmp_path / "ca")
    node = ca.issue("CN=kproto-node")
    users = {"broker": "broker-secret", "alice": "alice-secret"}

    async def main():
        cluster = Cluster(3, 1, tmp_path / "data", ssl_context=ca.server_context(node),
                          inter_broker_ssl=ca.client_context(node),
                          sasl_enabled_mechanisms=("SCRAM-SHA-512",),
                          inter_broker_sasl=SaslConfig("SCRAM-SHA-512", "broker", "broker-secret"),
                          scram_users=users, broker_session_timeout_ms=4000,
                          broker_heartbeat_interval_ms=500, group_initial_rebalance_delay_ms=0)
        await cluster.start_all(60)
        try:
            for b in cluster.brokers.values():
                assert b.security_protocol == "SASL_SSL"
            # registered as such (SecurityProtocol 3), brokers and controllers
            image = cluster.controllers[cluster.active_controller()].controller.image
            assert {(e.name, e.security_protocol) for b in image.brokers.values() for e in b.listeners} \
                == {("SASL_SSL", 3)}
            await cluster.wait_for(lambda: image.controllers, 10, "controller registrations")
            assert {e.security_protocol for c in image.controllers.values() for e in c.listeners} == {3}
            alice = SaslConfig("SCRAM-SHA-512", "alice", "alice-secret")
            ctx = ca.client_context()
            async with Client(cluster.bootstrap, sasl=alice, ssl=ctx) as client:
                await Admin(client).create_topics({"t": 1}, replication_factor=3)
                producer = await Producer(client, acks=-1).start()
                for i in range(10):
                    await producer.send("t", b"a%d" % i, partition=0)
                await producer.flush()
                leader = cluster.leader("t", 0)
                await cluster.wait_for(lambda: len(cluster.isr("t", 0)) == 3, 30, "ISR of 3")
                await cluster.stop(leader)  # a controlled shutdown: leadership moves
                await cluster.wait_for(lambda: cluster.leader("t", 0) not in (None, leader), 30,
                                       "a new leader")
                for i in range(10, 20):
                    await producer.send("t", b"a%d" % i, partition=0)
                await producer.flush()
                await producer.close()
                await cluster.start(leader)
                # the restarted broker catches up from the new leader over SASL_SSL
                await cluster.wait_for(lambda: len(cluster.isr("t", 0)) == 3, 60, "ISR of 3 again")
                consumer = await Consumer(client, ["t"], group_id="g").start()
                got = []
                for _ in range(40):
                    got += [r.value for r in await consumer.getmany(timeout=1)]
                    if len(got) >= 20:
                        break
                await consumer.close()
                assert got == [b"a%d" % i for i in range(20)]
            # the node links authenticate: a wrong inter-broker password, or no TLS, opens none
            net = cluster.network
            assert await net._connection(97, 2, False) is not None  # 97: a fresh source
            net.secure(2, ca.client_context(node), SaslConfig("SCRAM-SHA-512", "broker", "wrong"))
            assert await net._connection(98, 2, True) is None
            net.secure(2, None, SaslConfig("SCRAM-SHA-512", "broker", "broker-secret"))
            assert await net._connection(99, 2, True) is None
            # and so do the links to the controller (SASL_SSL too)
            controller = cluster.controller_ids[0]
            assert await net._connection(96, controller, False) is not None
            net.secure(controller, ca.client_context(node), SaslConfig("SCRAM-SHA-512", "broker", "wrong"))
            assert await net._connection(95, controller, False) is None
            with pytest.raises(SaslAuthenticationError):
                async with Client(cluster.bootstrap, ssl=ctx,
                                  sasl=SaslConfig("SCRAM-SHA-512", "alice", "wrong")) as bad:
                    await bad.refresh_metadata([])
        finally:
            await cluster.close()
    asyncio.run(asyncio.wait_for(main(), 240))
