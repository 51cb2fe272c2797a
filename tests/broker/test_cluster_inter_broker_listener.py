"""A kproto cluster whose brokers talk to each other on a listener of their own (Kafka's
``inter.broker.listener.name`` / ``security.inter.broker.protocol``): clients on a
SASL_PLAINTEXT listener, the brokers on a PLAINTEXT one named INTERNAL. Both are registered;
the node links use the internal one; Metadata names each broker's endpoint on the listener it
was asked on; records are replicated between the brokers over it."""
from __future__ import annotations

import asyncio

import pytest

USERS = {"broker": "broker-secret", "alice": "alice-secret"}


def test_brokers_replicate_over_their_own_listener(tmp_path):
    from kproto.broker import Cluster
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster as Client
    from kproto.client.connection import Connection
    from kproto.client.producer import Producer
    from kproto.client.protocol import ConnectionClosedError, SaslConfig
    from kproto.codecs import request

    Metadata = request(3).cls
    alice = SaslConfig("SCRAM-SHA-512", "alice", USERS["alice"])

    async def main():
        cluster = Cluster(3, 1, tmp_path / "data", sasl_enabled_mechanisms=("SCRAM-SHA-512",),
                          inter_broker_sasl=SaslConfig("SCRAM-SHA-512", "broker", USERS["broker"]),
                          scram_users=USERS, inter_broker_protocol="PLAINTEXT",
                          broker_session_timeout_ms=4000, broker_heartbeat_interval_ms=500)
        await cluster.start_all(60)
        out = {}
        try:
            ports = {n: (b.config.port, b.config.inter_broker_port) for n, b in cluster.brokers.items()}
            out["links"] = all(cluster.network.addresses[n][1] == ports[n][1] != ports[n][0] for n in ports)
            image = cluster.controllers[cluster.active_controller()].controller.image
            out["registered"] = {n: sorted((e.name, e.security_protocol, e.port) for e in image.brokers[n].listeners)
                                 for n in ports} == {n: sorted([("INTERNAL", 0, i), ("SASL_PLAINTEXT", 2, c)])
                                                     for n, (c, i) in ports.items()}
            async with Client(cluster.bootstrap, sasl=alice) as client:
                await Admin(client).create_topics({"t": 1}, replication_factor=3)
                producer = await Producer(client, acks=-1).start()
                for i in range(10):
                    await producer.send("t", b"r%d" % i, partition=0)
                await producer.flush()
                await producer.close()
            # the followers caught up through the links to the internal listeners
            await cluster.wait_for(lambda: len(cluster.isr("t", 0)) == 3, 30, "ISR of 3")
            # each listener's Metadata names the brokers' endpoints on it
            host = cluster.brokers[1].config.host
            on_client = await Connection.open(host, ports[1][0], sasl=alice)
            md = await on_client.request(Metadata(topics=[], allow_auto_topic_creation=False), 12)
            out["client md"] = sorted((b.node_id, b.port) for b in md.brokers)
            await on_client.close()
            internal = await Connection.open(host, ports[1][1])  # PLAINTEXT: no authentication
            md = await internal.request(Metadata(topics=[], allow_auto_topic_creation=False), 12)
            out["internal md"] = sorted((b.node_id, b.port) for b in md.brokers)
            await internal.close()
            # the client listener still wants SASL
            bare = await Connection.open(host, ports[1][0])
            with pytest.raises(ConnectionClosedError):
                await bare.request(Metadata(topics=[], allow_auto_topic_creation=False), 12)
            await bare.close()
            out["ports"] = ports
        finally:
            await cluster.close()
        return out

    out = asyncio.run(main())
    ports = out["ports"]
    assert out["links"] and out["registered"]
    assert out["client md"] == sorted((n, c) for n, (c, _) in ports.items())
    assert out["internal md"] == sorted((n, i) for n, (_, i) in ports.items())
