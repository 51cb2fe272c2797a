"""kproto's client renews its SASL sessions on the open connection (KIP-368) against Apache
Kafka 4.4.0 as against kproto's broker: SCRAM-SHA-512 sessions of
``connections.max.reauth.ms`` and OAUTHBEARER sessions bounded by the token's ``exp`` (a new
token from the provider each time), with pipelined requests going on all along. Without the
renewal, each broker closes the connection at the first request after the session ended.

Apache is the session's shared security node (test_security_vs_apache's settings)."""
from __future__ import annotations

import asyncio
import time

import pytest

from kproto.client.connection import Connection
from kproto.client.protocol import SaslConfig
from kproto.codecs import request
from kproto.testing import BrokerThread
from test_security_vs_apache import APACHE, REAUTH_MS, SCOPE, SCRAM_USERS, _jwt  # noqa: E402

pytestmark = pytest.mark.apache_kafka(**APACHE)

Metadata = request(3).cls


def _addr(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def _provider(issued: list):
    def token() -> str:
        now = time.time()
        issued.append(now)
        return _jwt({"sub": "alice", "scope": SCOPE, "exp": now + 3, "iat": now - 1})
    return token


async def _observe(addr: tuple[str, int], config: SaslConfig, seconds: float) -> tuple:
    conn = await Connection.open(*addr, sasl=config)
    lifetime = conn.session_lifetime_ms
    answered = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        futs = [conn.send(Metadata(topics=[], allow_auto_topic_creation=False), 12) for _ in range(3)]
        for f in futs:
            await conn.response(f, timeout=10)
            answered += 1
        await asyncio.sleep(0.05)
    out = (lifetime, conn.reauthentications, answered > 20, conn.closed)
    await conn.close()
    return out


def test_client_renews_sessions_on_apache_and_kproto(apache_kafka, tmp_path):
    scram = SaslConfig("SCRAM-SHA-512", "alice", SCRAM_USERS["alice"])
    apache_issued: list = []
    kproto_issued: list = []
    with BrokerThread(tmp_path / "scram", sasl_enabled_mechanisms=("SCRAM-SHA-512",), sasl_users=SCRAM_USERS,
                      connections_max_reauth_ms=REAUTH_MS) as b_scram, \
            BrokerThread(tmp_path / "oauth", sasl_enabled_mechanisms=("OAUTHBEARER",),
                         oauthbearer_required_scope=(SCOPE,)) as b_oauth:
        async def run():
            return await asyncio.gather(
                _observe(_addr(apache_kafka.sasl_bootstrap), scram, 7.5),
                _observe(_addr(b_scram.bootstrap), scram, 7.5),
                _observe(_addr(apache_kafka.listener_bootstrap("OAUTH")),
                         SaslConfig("OAUTHBEARER", token_provider=_provider(apache_issued)), 7.5),
                _observe(_addr(b_oauth.bootstrap), SaslConfig("OAUTHBEARER", token_provider=_provider(kproto_issued)),
                         7.5))
        apache_scram, kproto_scram, apache_oauth, kproto_oauth = asyncio.run(run())
    for lifetime, renewals, busy, closed in (apache_scram, kproto_scram):
        assert lifetime == REAUTH_MS and renewals >= 2 and busy and not closed
    for (lifetime, renewals, busy, closed), issued in ((apache_oauth, apache_issued), (kproto_oauth, kproto_issued)):
        assert 0 < lifetime <= 3000 and renewals >= 2 and busy and not closed
        assert len(issued) == renewals + 1  # a new token for each session
