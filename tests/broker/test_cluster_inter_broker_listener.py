"""A kproto cluster whose brokers talk to each other on a listener of their own (Kafka's
``inter.broker.listener.name`` / ``security.inter.broker.protocol``): clients on a
SASL_PLAINTEXT listener and the brokers on a PLAINTEXT one named INTERNAL, or SASL_SSL and SSL. Both are registered;
the node links use the internal one; Metadata names each broker's endpoint on the listener it
was asked on; records are replicated between the brokers over it."""
from __future__ import annotations

import asyncio

import pytest

USERS = {"broker": "broker-secret", "alice": "alice-secret"}


@pytest.mark.parametrize("client_protocol, internal_protocol", [
    ("SASL_PLAINTEXT", "PLAINTEXT"),
    # TLS everywhere; SCRAM for clients only
    ("SASL_SSL", "SSL")])
def test_brokers_replicate_over_their_own_listener(tmp_path, client_protocol, internal_protocol):
    from kproto.broker import Cluster
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster as Client
    from kproto.client.connection import Connection
    from kproto.client.producer import Producer
    from kproto.client.protocol import ConnectionClosedError, SaslConfig
    from kproto.codecs import request

    Metadata = request(3).cls
    alice = SaslConfig("SCRAM-SHA-512", "alice", USERS["alice"])
    tls: dict = {}
    client_ssl = None
    if "SSL" in client_protocol:
        pytest.importorskip("cryptography")
        from kproto.testing.tls import TestCA
        ca = TestCA(tmp_path / "ca")
        node = ca.issue("CN=kproto-node")
        tls = dict(ssl_context=ca.server_context(node), inter_broker_ssl=ca.client_context(node))
        client_ssl = ca.client_context()
    ids = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

    async def main():
        cluster = Cluster(3, 1, tmp_path / "data", sasl_enabled_mechanisms=("SCRAM-SHA-512",),
                          inter_broker_sasl=SaslConfig("SCRAM-SHA-512", "broker", USERS["broker"]),
                          scram_users=USERS, inter_broker_protocol=internal_protocol, **tls,
                          broker_session_timeout_ms=4000, broker_heartbeat_interval_ms=500)
        await cluster.start_all(60)
        out = {}
        try:
            ports = {n: (b.config.port, b.config.inter_broker_port) for n, b in cluster.brokers.items()}
            out["links"] = all(cluster.network.addresses[n][1] == ports[n][1] != ports[n][0] for n in ports)
            image = cluster.controllers[cluster.active_controller()].controller.image
            out["registered"] = {n: sorted((e.name, e.security_protocol, e.port) for e in image.brokers[n].listeners)
                                 for n in ports} == {n: sorted([("INTERNAL", ids[internal_protocol], i),
                                                                (client_protocol, ids[client_protocol], c)])
                                                     for n, (c, i) in ports.items()}
            async with Client(cluster.bootstrap, sasl=alice, ssl=client_ssl) as client:
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
            on_client = await Connection.open(host, ports[1][0], sasl=alice, ssl=client_ssl)
            md = await on_client.request(Metadata(topics=[], allow_auto_topic_creation=False), 12)
            out["client md"] = sorted((b.node_id, b.port) for b in md.brokers)
            await on_client.close()
            internal = await Connection.open(host, ports[1][1], ssl=client_ssl)  # no SASL there
            md = await internal.request(Metadata(topics=[], allow_auto_topic_creation=False), 12)
            out["internal md"] = sorted((b.node_id, b.port) for b in md.brokers)
            await internal.close()
            # the client listener still wants SASL
            bare = await Connection.open(host, ports[1][0], ssl=client_ssl)
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
