"""Delegation tokens (KIP-48) on kproto's broker and on Apache Kafka 4.4.0 with the same
settings, observed the same way: every answer of CreateDelegationToken,
RenewDelegationToken, ExpireDelegationToken and DescribeDelegationToken field by field (token
ids, HMACs and timestamps made comparable: ids by the order they were made, the HMAC checked
against HmacSHA512 of the id with the secret, times relative to the request), ACLs
(CREATE_TOKENS, DESCRIBE_TOKENS), and kproto's client authenticating with each token over
SCRAM (the principal, the session lifetime, refused tokens).

Apache is the session's shared security node (test_security_vs_apache's settings)."""
from __future__ import annotations

import asyncio
import time

import pytest

from kproto.broker.security.tokens import token_hmac
from kproto.client.connection import Connection
from kproto.client.protocol import SaslConfig
from kproto.client.sasl import SaslAuthenticationError
from kproto.codecs import request
from kproto.testing import BrokerThread
from test_security_vs_apache import APACHE, REAUTH_MS, SCRAM_USERS, TOKEN_SECRET  # noqa: E402

pytestmark = pytest.mark.apache_kafka(**APACHE)

Create, Renew, Expire, Describe = (request(k).cls for k in (38, 39, 40, 41))
CreateAcls = request(30).cls
SaslHandshake, SaslAuthenticate = request(17).cls, request(36).cls
USER, CREATE_TOKENS, DESCRIBE_TOKENS, LITERAL, ALLOW = 7, 13, 14, 3, 3


def _addr(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


class _Observer:
    """Turns answers into comparable values: token ids become t1, t2, ... in the order the
    scenario made them; times become offsets from the request in whole seconds (a described
    token's from its issue)."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        self.made: set[str] = set()  # the tokens this scenario created
        self.out: list = []

    def label(self, token_id: str) -> str:
        if not token_id:
            return ""
        return self.ids.setdefault(token_id, f"t{len(self.ids) + 1}")

    def note(self, what: str, resp, sent_ms: int) -> None:
        d = resp.to_dict()
        d.pop("throttle_time_ms", None)

        def rel(v):
            # whole seconds after the request was sent: the broker's clock read up to 1 s later
            return v if v <= 0 else (v - sent_ms) // 1000
        if "token_id" in d:  # CreateDelegationToken
            tid = resp.token_id
            if tid:
                self.made.add(tid)
            d["hmac"] = "ok" if tid and bytes(resp.hmac) == token_hmac(tid, TOKEN_SECRET) else len(resp.hmac)
            d["token_id"] = self.label(tid)
            for k in ("issue_timestamp_ms", "expiry_timestamp_ms", "max_timestamp_ms"):
                d[k] = rel(d[k])
        elif "tokens" in d:  # DescribeDelegationToken: as a set (Apache's order follows random ids)
            toks = []
            for t, raw in zip(d["tokens"], resp.tokens):
                if raw.token_id not in self.made:
                    continue  # another test's token on the shared Apache node (the Java tools')
                t["hmac"] = "ok" if bytes(raw.hmac) == token_hmac(raw.token_id, TOKEN_SECRET) else "bad"
                t["token_id"] = self.label(raw.token_id)
                t["issue_timestamp"] = 0
                t["max_timestamp"] -= raw.issue_timestamp  # relative to the token's issue
                # a renewed token's expiry depends on when it was renewed: in tens of seconds
                t["expiry_timestamp"] = round((raw.expiry_timestamp - raw.issue_timestamp) / 10_000) * 10
                toks.append(t)
            d["tokens"] = sorted(toks, key=lambda t: t["token_id"])
        else:  # Renew / Expire
            d["expiry_timestamp_ms"] = rel(d["expiry_timestamp_ms"])
        self.out.append((what, d))


async def _scenario(plain: tuple[str, int], sasl: tuple[str, int], settle: float,
                    reauth_ms: dict[str, int]) -> list:
    """The same requests against either broker; ``settle``: how long a change takes to reach
    the broker's token cache and authorizer (Apache's metadata publishing); ``reauth_ms``:
    connections.max.reauth.ms by SCRAM mechanism."""
    obs = _Observer()

    def user(name: str, mech: str = "SCRAM-SHA-256"):
        return Connection.open(*sasl, sasl=SaslConfig(mech, name, SCRAM_USERS[name]))

    async def ask(conn, what: str, body, version: int):
        sent = int(time.time() * 1000)
        resp = await conn.request(body, version)
        obs.note(what, resp, sent)
        return resp

    def owner(name: str):
        return Describe.DescribeDelegationTokenOwner(principal_type="User", principal_name=name)

    async def until(conn, owners, seen) -> None:
        """Wait until ``seen(token ids conn's Describe of owners lists)`` holds: Apache Kafka
        publishes a token or ACL change to its broker a while after answering (a second or
        more on a loaded machine); kproto's broker at once. At most 30 s, then on as it is."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            resp = await conn.request(Describe(owners=owners), 3)
            if seen({t.token_id for t in resp.tokens}):
                return
            await asyncio.sleep(0.1)

    anon = await Connection.open(*plain)
    for v in (1, 2, 3):
        await ask(anon, f"plaintext create v{v}", Create(renewers=[], max_lifetime_ms=-1), v)
    await ask(anon, "plaintext describe", Describe(owners=None), 3)
    await ask(anon, "plaintext renew", Renew(hmac=b"x" * 64, renew_period_ms=1000), 2)
    await anon.close()

    alice, bob, carol, admin = await user("alice"), await user("bob"), await user("carol"), await user("admin")
    carol_renews = [Create.CreatableRenewers(principal_type="User", principal_name="carol")]
    made = {}
    for v in (1, 2, 3):
        made[v] = await ask(alice, f"create v{v}", Create(renewers=carol_renews, max_lifetime_ms=-1), v)
    made["short"] = await ask(alice, "create max 60 s", Create(renewers=[], max_lifetime_ms=60000), 3)
    await ask(alice, "create for bob", Create(owner_principal_type="User", owner_principal_name="bob",
                                              renewers=[], max_lifetime_ms=-1), 3)
    herself = await ask(alice, "create for herself", Create(owner_principal_type="User", owner_principal_name="alice",
                                                            renewers=[], max_lifetime_ms=-1), 3)
    await ask(alice, "create group renewer", Create(renewers=[Create.CreatableRenewers(
        principal_type="Group", principal_name="g")], max_lifetime_ms=-1), 3)
    await asyncio.sleep(settle)
    # the broker applies the changes in order: the last token visible, every one before it is
    await until(alice, None, lambda ids: herself.token_id in ids)
    await ask(alice, "describe all", Describe(owners=None), 3)
    await ask(alice, "describe none", Describe(owners=[]), 3)
    await ask(alice, "describe v1 alice's", Describe(owners=[owner("alice")]), 1)
    await ask(bob, "bob describes", Describe(owners=None), 3)
    await ask(carol, "carol describes (renewer)", Describe(owners=[owner("carol")]), 3)
    h3 = bytes(made[3].hmac)
    await ask(bob, "bob renews alice's", Renew(hmac=h3, renew_period_ms=5000), 2)
    await ask(bob, "bob expires alice's", Expire(hmac=h3, expiry_time_period_ms=5000), 2)
    await ask(alice, "renew unknown", Renew(hmac=b"x" * 64, renew_period_ms=5000), 2)
    await ask(alice, "expire unknown", Expire(hmac=b"x" * 64, expiry_time_period_ms=5000), 1)
    await ask(carol, "carol renews (renewer)", Renew(hmac=h3, renew_period_ms=7000), 1)
    await ask(alice, "renew default", Renew(hmac=h3, renew_period_ms=-1), 2)
    past = await alice.request(Renew(hmac=bytes(made["short"].hmac), renew_period_ms=3_600_000), 2)
    obs.out.append(("renew past max", past.error_code, past.expiry_timestamp_ms == made["short"].max_timestamp_ms))
    await ask(alice, "expire in 100 s", Expire(hmac=h3, expiry_time_period_ms=100_000), 2)

    # ACLs: bob may create alice's tokens and describe them
    for op in (CREATE_TOKENS, DESCRIBE_TOKENS):
        acl = CreateAcls.AclCreation(resource_type=USER, resource_name="User:alice", resource_pattern_type=LITERAL,
                                     principal="User:bob", host="*", operation=op, permission_type=ALLOW)
        resp = await admin.request(CreateAcls(creations=[acl]), 3)
        obs.out.append(("acl", resp.results[0].error_code))
    await asyncio.sleep(settle)
    await until(bob, [owner("alice")], bool)  # DESCRIBE_TOKENS in force, and CREATE_TOKENS before it
    by_bob = await ask(bob, "bob creates alice's", Create(owner_principal_type="User", owner_principal_name="alice",
                                                          renewers=[], max_lifetime_ms=-1), 3)
    await asyncio.sleep(settle)
    await until(bob, [owner("alice")], lambda ids: by_bob.error_code != 0 or by_bob.token_id in ids)
    await ask(bob, "bob describes alice's", Describe(owners=[owner("alice")]), 3)

    # authentication with a token: the owner's principal, the token's lifetime
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        cfg = SaslConfig.delegation_token(made["short"].token_id, bytes(made["short"].hmac), mech)
        conn = await Connection.open(*sasl)
        await conn.request(SaslHandshake(mechanism=mech), 1)
        client, token, last = cfg.client(), None, None
        token = client.initial()
        while token is not None:
            last = await conn.request(SaslAuthenticate(auth_bytes=token), 2)
            token = client.step(bytes(last.auth_bytes))
        # the session ends with the token, or sooner after connections.max.reauth.ms
        expected = min(made["short"].expiry_timestamp_ms - int(time.time() * 1000),
                       reauth_ms.get(mech, 1 << 62))
        obs.out.append((f"token session {mech}", abs(last.session_lifetime_ms - expected) < 1500))
        await ask(conn, f"token connection creates ({mech})", Create(renewers=[], max_lifetime_ms=-1), 3)
        await ask(conn, f"token connection describes ({mech})", Describe(owners=None), 3)
        await ask(conn, f"token connection renews ({mech})", Renew(hmac=h3, renew_period_ms=1000), 2)
        await conn.close()
    for what, cfg in (("wrong hmac", SaslConfig("SCRAM-SHA-512", made[1].token_id, "wrong", token_auth=True)),
                      ("unknown token", SaslConfig("SCRAM-SHA-512", "nosuchtoken", "x", token_auth=True)),
                      ("token id without tokenauth", SaslConfig("SCRAM-SHA-512", made[1].token_id,
                                                                 SaslConfig.delegation_token(
                                                                     made[1].token_id, bytes(made[1].hmac)).password))):
        try:
            await (await Connection.open(*sasl, sasl=cfg)).close()
            obs.out.append((what, "authenticated"))
        except SaslAuthenticationError as exc:
            obs.out.append((what, str(exc)))
    await ask(alice, "expire now", Expire(hmac=bytes(made[2].hmac), expiry_time_period_ms=-1), 2)
    await ask(alice, "expire again", Expire(hmac=bytes(made[2].hmac), expiry_time_period_ms=-1), 2)
    await asyncio.sleep(settle)
    await until(alice, None, lambda ids: made[2].token_id not in ids)
    try:
        await (await Connection.open(*sasl, sasl=SaslConfig.delegation_token(
            made[2].token_id, bytes(made[2].hmac)))).close()
        obs.out.append(("expired token", "authenticated"))
    except SaslAuthenticationError as exc:
        obs.out.append(("expired token", str(exc)))
    await ask(alice, "describe at the end", Describe(owners=[owner("alice")]), 3)
    for c in (alice, bob, carol, admin):
        await c.close()
    return obs.out


def test_delegation_tokens_as_apache(apache_kafka, tmp_path):
    apache = asyncio.run(_scenario(_addr(apache_kafka.bootstrap), _addr(apache_kafka.sasl_bootstrap), 1.0,
                                   {"SCRAM-SHA-512": REAUTH_MS}))
    config = dict(delegation_token_secret_key=TOKEN_SECRET, authorizer=True,
                  super_users=("User:ANONYMOUS", "User:admin"))
    plain = BrokerThread(tmp_path / "plain", **config).start()
    sasl = BrokerThread(tmp_path / "sasl", sasl_enabled_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                        sasl_users=SCRAM_USERS, connections_max_reauth_ms=0, **config).start()
    try:
        # kproto's connections.max.reauth.ms is the listener's, not per mechanism: here none
        ours = asyncio.run(_scenario(_addr(plain.bootstrap), _addr(sasl.bootstrap), 0.0, {}))
    finally:
        plain.stop()
        sasl.stop()
    assert len(ours) == len(apache)
    for a, k in zip(apache, ours):
        assert k == a, f"\napache: {a}\nkproto: {k}"


async def _over_tls(port: int) -> list:
    """Token requests over SSL with and without a client certificate: who may ask."""
    from test_security_vs_apache import _CA, _IDS

    out = []
    for who in ("alice", None):
        conn = await Connection.open("127.0.0.1", port, ssl=_CA.client_context(_IDS[who] if who else None))
        created = await conn.request(Create(renewers=[], max_lifetime_ms=60_000), 3)
        described = await conn.request(Describe(owners=[]), 3)
        out.append((who, created.error_code, created.principal_name, described.error_code))
        await conn.close()
    return out


def test_token_requests_over_tls_as_apache(apache_kafka, tmp_path):
    from test_security_vs_apache import _CA, _SERVER, RULES

    # TLSOPT asks for a certificate without requiring one: anonymous SSL clients get in
    apache = asyncio.run(_over_tls(_addr(apache_kafka.listener_bootstrap("TLSOPT"))[1]))
    broker = BrokerThread(tmp_path / "k", ssl_context=_CA.server_context(_SERVER), ssl_client_auth="requested",
                          ssl_principal_mapping_rules=RULES, authorizer=True,
                          super_users=("User:ANONYMOUS", "User:admin"),
                          delegation_token_secret_key=TOKEN_SECRET).start()
    try:
        ours = asyncio.run(_over_tls(_addr(broker.bootstrap)[1]))
    finally:
        broker.stop()
    # a certificate's principal may ask for tokens; an anonymous SSL client may not
    assert apache == [("alice", 0, "alice", 0), (None, 64, "ANONYMOUS", 64)], apache
    assert ours == apache
