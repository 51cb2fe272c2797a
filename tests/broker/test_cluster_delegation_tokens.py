"""Delegation tokens on a kproto cluster: a broker forwards each change to the active
controller in an EnvelopeRequest with the client's principal (as Kafka's brokers do), the
controller writes the token to the metadata log, and every broker authenticates it once its
image has it; renewals and expiries replicate alike, and the controller sweeps expired
tokens."""
from __future__ import annotations

import asyncio

from kproto.broker.security.tokens import token_hmac

SECRET = "cluster-token-secret"
USERS = {"broker": "broker-secret", "alice": "alice-secret"}


def test_tokens_replicate_and_authenticate_on_every_broker(tmp_path):
    from kproto.broker import Cluster
    from kproto.client.connection import Connection
    from kproto.client.protocol import SaslConfig
    from kproto.client.sasl import SaslAuthenticationError
    from kproto.codecs import request
    from kproto.error_codes import ErrorCode

    Create, Renew, Expire, Describe = (request(k).cls for k in (38, 39, 40, 41))

    async def main():
        cluster = Cluster(3, 1, tmp_path / "data", sasl_enabled_mechanisms=("SCRAM-SHA-512",),
                          inter_broker_sasl=SaslConfig("SCRAM-SHA-512", "broker", USERS["broker"]),
                          scram_users=USERS, broker_session_timeout_ms=4000, broker_heartbeat_interval_ms=500,
                          delegation_token_secret_key=SECRET, delegation_token_expiry_check_interval_ms=300)
        await cluster.start_all(60)
        out = {}
        try:
            addr = {n: (b.config.host, b.config.port) for n, b in cluster.brokers.items()}
            alice = {n: await Connection.open(*a, sasl=SaslConfig("SCRAM-SHA-512", "alice", USERS["alice"]))
                     for n, a in addr.items()}
            token = await alice[1].request(Create(renewers=[], max_lifetime_ms=-1), 3)
            short = await alice[1].request(Create(renewers=[], max_lifetime_ms=1500), 3)
            out["created"] = (token.error_code, token.principal_name, token.token_requester_principal_name,
                              bytes(token.hmac) == token_hmac(token.token_id, SECRET))

            def everywhere(tid, present=True):
                return lambda: all((tid in b.core.image.tokens) == present for b in cluster.brokers.values())
            await cluster.wait_for(everywhere(token.token_id), 10, "the token on every broker")
            # authenticated by every broker, as alice
            out["principals"] = []
            for n in addr:
                conn = await Connection.open(*addr[n], sasl=SaslConfig.delegation_token(token.token_id, bytes(token.hmac)))
                refused = await conn.request(Create(renewers=[], max_lifetime_ms=-1), 3)
                out["principals"].append((refused.error_code, refused.principal_name))
                await conn.close()
            # renewed through broker 2, seen by broker 3
            renewed = await alice[2].request(Renew(hmac=bytes(token.hmac), renew_period_ms=60_000), 2)
            await cluster.wait_for(lambda: cluster.brokers[3].core.image.tokens[token.token_id].expiry_ms
                                   == renewed.expiry_timestamp_ms, 10, "the renewal on broker 3")
            described = await alice[3].request(Describe(owners=None), 3)
            out["described"] = {t.token_id: t.expiry_timestamp for t in described.tokens}.get(token.token_id) \
                == renewed.expiry_timestamp_ms
            # the short token is swept by the controller
            await cluster.wait_for(everywhere(short.token_id, False), 10, "the short token swept")
            try:
                await Connection.open(*addr[2], sasl=SaslConfig.delegation_token(short.token_id, bytes(short.hmac)))
                out["swept"] = "authenticated"
            except SaslAuthenticationError:
                out["swept"] = "refused"
            # expired through broker 3: gone from broker 1
            expired = await alice[3].request(Expire(hmac=bytes(token.hmac), expiry_time_period_ms=-1), 2)
            await cluster.wait_for(everywhere(token.token_id, False), 10, "the token removed")
            try:
                await Connection.open(*addr[1], sasl=SaslConfig.delegation_token(token.token_id, bytes(token.hmac)))
                out["expired"] = "authenticated"
            except SaslAuthenticationError:
                out["expired"] = (expired.error_code, "refused")
            for c in alice.values():
                await c.close()
        finally:
            await cluster.close()
        return out

    out = asyncio.run(main())
    assert out["created"] == (0, "alice", "alice", True)
    assert out["principals"] == [(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, "alice")] * 3
    assert out["described"] is True
    assert out["swept"] == "refused"
    assert out["expired"] == (0, "refused")
