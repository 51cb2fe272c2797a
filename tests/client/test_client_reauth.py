"""The client renews a SASL session with a lifetime on the open connection (KIP-368), as
Kafka's clients do, against kproto's broker: a broker with ``connections_max_reauth_ms``
closes a connection whose session ended, so a connection that outlives several sessions and
keeps answering shows each renewal; requests made while one is under way wait for it."""
from __future__ import annotations

import asyncio
import time

from kproto.broker.core import Intercept
from kproto.client.connection import Connection
from kproto.client.protocol import SaslConfig
from kproto.codecs import request
from kproto.schemas.api_keys import ApiKey
from kproto.testing import BrokerThread

Metadata = request(3).cls
USERS = {"alice": "alice-secret"}


def _addr(b: BrokerThread) -> tuple[str, int]:
    host, port = b.bootstrap.rsplit(":", 1)
    return host, int(port)


async def _keep_busy(conn: Connection, seconds: float) -> int:
    """Pipelined Metadata requests, three at a time, for ``seconds``: how many were answered."""
    answered = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        futs = [conn.send(Metadata(topics=[], allow_auto_topic_creation=False), 12) for _ in range(3)]
        for f in futs:
            await conn.response(f, timeout=10)
            answered += 1
        await asyncio.sleep(0.05)
    return answered


def test_scram_sessions_are_renewed_on_the_connection(tmp_path):
    # 2 s sessions: a renewal begins at 85-95% of one, so it has 100 ms or more to reach a loaded
    # broker before the session ends (1 s left 50 ms, which a busy machine's event loop overran)
    with BrokerThread(tmp_path, sasl_enabled_mechanisms=("SCRAM-SHA-512",), sasl_users=USERS,
                      connections_max_reauth_ms=2000) as b:
        # the broker answers each SaslHandshake 300 ms late: requests made meanwhile must wait
        hook = b.control(ApiKey.SASL_HANDSHAKE, Intercept(delay_ms=300), times=None)

        async def run():
            conn = await Connection.open(*_addr(b), sasl=SaslConfig("SCRAM-SHA-512", "alice", USERS["alice"]))
            lifetime = conn.session_lifetime_ms
            answered = await _keep_busy(conn, 5.0)
            out = (lifetime, conn.reauthentications, answered, conn.closed)
            await conn.close()
            return out
        lifetime, renewals, answered, closed = asyncio.run(run())
        handshakes = hook.seen
    assert lifetime == 2000
    assert renewals >= 2 and handshakes == renewals + 1
    assert answered > 30 and not closed


def test_oauthbearer_renewal_asks_the_provider_for_a_new_token(tmp_path):
    import base64
    import json

    def b64(doc):
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    issued = []

    def provider() -> str:
        now = int(time.time())
        issued.append(now)
        # unsecured tokens that live 2 s: the session ends with each one
        return f"{b64({'alg': 'none'})}.{b64({'sub': 'alice', 'iat': now, 'exp': now + 2})}."

    with BrokerThread(tmp_path, sasl_enabled_mechanisms=("OAUTHBEARER",)) as b:
        async def run():
            conn = await Connection.open(*_addr(b), sasl=SaslConfig("OAUTHBEARER", token_provider=provider))
            answered = await _keep_busy(conn, 3.5)
            out = (conn.reauthentications, answered, conn.closed)
            await conn.close()
            return out
        renewals, answered, closed = asyncio.run(run())
    assert renewals >= 1 and len(issued) == renewals + 1
    assert answered > 30 and not closed


def test_a_failed_renewal_closes_the_connection(tmp_path):
    with BrokerThread(tmp_path, sasl_enabled_mechanisms=("SCRAM-SHA-512",), sasl_users=dict(USERS),
                      connections_max_reauth_ms=800) as b:
        async def run():
            config = SaslConfig("SCRAM-SHA-512", "alice", USERS["alice"])
            conn = await Connection.open(*_addr(b), sasl=config)
            config.password = "no longer right"  # the renewal will fail
            await asyncio.sleep(1.2)
            out = (conn.closed, conn.reauthentications)
            await conn.close()
            return out
        closed, renewals = asyncio.run(run())
    # the broker answers SASL_AUTHENTICATION_FAILED and closes the connection
    assert closed and renewals == 0


def test_a_token_provider_failing_at_renewal_closes_the_connection_and_fails_waiting_requests(tmp_path):
    import base64
    import json

    def b64(doc):
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    calls = []

    def provider() -> str:
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("the identity provider is down")
        now = int(time.time())
        return f"{b64({'alg': 'none'})}.{b64({'sub': 'alice', 'iat': now, 'exp': now + 2})}."

    with BrokerThread(tmp_path, sasl_enabled_mechanisms=("OAUTHBEARER",)) as b:
        # the renewal's SaslHandshake is answered 300 ms late: a request made meanwhile waits
        # for the renewal, which then fails in the provider
        b.control(ApiKey.SASL_HANDSHAKE, Intercept(delay_ms=300), times=None)

        async def run():
            conn = await Connection.open(*_addr(b), sasl=SaslConfig("OAUTHBEARER", token_provider=provider))
            for _ in range(500):
                if conn._reauth_task is not None:
                    break
                await asyncio.sleep(0.01)
            waited = conn._reauth_task is not None
            try:
                await conn.request(Metadata(topics=[], allow_auto_topic_creation=False), 12, timeout=5)
                failed = None
            except Exception as exc:  # noqa: BLE001
                failed = type(exc).__name__
            out = (waited, conn.closed, failed)
            await conn.close()
            return out
        waited, closed, failed = asyncio.run(run())
    assert waited and closed and failed == "ConnectionClosedError" and len(calls) == 2
