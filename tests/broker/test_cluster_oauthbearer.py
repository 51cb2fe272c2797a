"""A kproto cluster whose only SASL mechanism is OAUTHBEARER, on the brokers' and the
controllers' listeners alike: the nodes authenticate to each other with short-lived unsecured
tokens from a provider (renewed on their links before each expires, KIP-368), clients with
theirs; a token without the required scope is refused by the controllers too."""
from __future__ import annotations

import asyncio
import base64
import json
import time


def _b64(doc) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()


def _provider(sub: str, issued: list, lifetime: float = 3.0, scope: str = "kafka"):
    def token() -> str:
        now = time.time()
        issued.append(now)
        return f"{_b64({'alg': 'none'})}.{_b64({'sub': sub, 'scope': scope, 'iat': now - 1, 'exp': now + lifetime})}."
    return token


def test_oauthbearer_cluster_nodes_authenticate_and_renew_their_sessions(tmp_path):
    from kproto.broker import Cluster
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster as Client
    from kproto.client.producer import Producer
    from kproto.client.protocol import SaslConfig
    from kproto.client.sasl import SaslAuthenticationError

    nodes: list = []
    alice: list = []

    async def main():
        cluster = Cluster(2, 1, tmp_path / "data", sasl_enabled_mechanisms=("OAUTHBEARER",),
                          oauthbearer_required_scope=("kafka",),
                          inter_broker_sasl=SaslConfig("OAUTHBEARER", token_provider=_provider("broker", nodes)),
                          broker_session_timeout_ms=4000, broker_heartbeat_interval_ms=500)
        await cluster.start_all(60)
        try:
            controller = cluster.controllers[cluster.active_controller()]
            image = controller.controller.image
            # both brokers registered with the controller over OAUTHBEARER and stay unfenced
            # across several of their 3 s sessions
            await cluster.wait_for(lambda: len(image.brokers) == 2, 20, "registrations")
            async with Client(cluster.bootstrap, sasl=SaslConfig(
                    "OAUTHBEARER", token_provider=_provider("alice", alice))) as client:
                await Admin(client).create_topics({"t": 1}, replication_factor=2)
                producer = await Producer(client, acks=-1).start()
                for i in range(5):
                    await producer.send("t", b"x%d" % i, partition=0)
                    await asyncio.sleep(1.5)
                await producer.flush()
                await cluster.wait_for(lambda: len(cluster.isr("t", 0)) == 2, 20, "ISR of 2")
            fenced = [b.id for b in image.brokers.values() if b.fenced]
            renewed = sum(c.reauthentications for c in cluster.network._connections.values())
            # a token without the listener's scope opens no session on the controller
            host, port = cluster.network.addresses[controller.node_id]
            from kproto.client.connection import Connection
            try:
                await Connection.open(host, port, sasl=SaslConfig(
                    "OAUTHBEARER", token_provider=_provider("broker", [], scope="other")))
                refused = False
            except SaslAuthenticationError:
                refused = True
            return fenced, refused, renewed
        finally:
            await cluster.close()

    fenced, refused, renewed = asyncio.run(main())
    assert fenced == [] and refused
    # the node links renewed their sessions on the open connections, and so did the client's
    assert renewed > 0 and len(alice) >= 3 and len(nodes) > renewed
