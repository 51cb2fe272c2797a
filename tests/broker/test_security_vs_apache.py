"""TLS client-certificate principals and OAUTHBEARER (unsecured and JWKS) on kproto's broker
and on Apache Kafka 4.4.0, with the same settings, observed the same way: which principal
the ACLs see for each certificate, and every SaslHandshake/SaslAuthenticate answer (error
codes, messages, the JSON error document, the session lifetime) for a set of tokens.

One Apache node serves every test here (the pool shares it by settings): SSL listeners
requiring and requesting client certificates, and SASL_PLAINTEXT listeners with OAUTHBEARER
validated unsecured and with a local JWKS. The same node (:data:`APACHE`) serves the
delegation token and re-authentication comparisons: SCRAM users on its SASL_PLAINTEXT
listener, a token secret key, a short SCRAM-SHA-512 session."""
from __future__ import annotations

import asyncio
import atexit
import base64
import json
import shutil
import tempfile
import time
import uuid

import pytest

pytest.importorskip("cryptography")

from kproto.client.connection import Connection  # noqa: E402
from kproto.codecs import request  # noqa: E402
from kproto.testing import BrokerThread  # noqa: E402
from kproto.testing.tls import TestCA  # noqa: E402

# made once per session: the Apache node's settings name them, and the pool shares that node
_DIR = tempfile.mkdtemp(prefix="kproto-sec-vs-apache-")
atexit.register(shutil.rmtree, _DIR, True)
_CA = TestCA(_DIR)
_SERVER = _CA.issue("CN=broker", name="server")
_IDS = {who: _CA.issue(subject, name=who) for who, subject in (
    ("admin", "CN=Admin,OU=Ops,O=Acme"), ("alice", "CN=Alice,OU=Eng,O=Acme"),
    ("bob", "CN=Bob,OU=Eng,O=Acme"), ("stranger", "O=Nobody"))}
RULES = "RULE:^CN=(.*?),OU=(.*?),O=Acme$/$1/L"   # no DEFAULT: a subject it misses fails
SCOPE = "kafka"
AUDIENCE, ISSUER = "kproto-test", "https://idp.example"


def _jwks():
    """An RSA and an EC key, the JWKS file of their public halves, and a signer."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rn, en = rsa_key.public_key().public_numbers(), ec_key.public_key().public_numbers()

    def i2b(n, size=None):
        return _b64(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))
    doc = {"keys": [
        {"kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig", "n": i2b(rn.n), "e": i2b(rn.e)},
        {"kty": "EC", "kid": "e1", "crv": "P-256", "x": i2b(en.x, 32), "y": i2b(en.y, 32)}]}
    path = _CA.dir / "jwks.json"
    path.write_text(json.dumps(doc))

    def sign(claims, kid="r1", alg="RS256"):
        head = f"{_b64({'alg': alg, 'kid': kid, 'typ': 'JWT'})}.{_b64(claims)}"
        if alg == "RS256":
            sig = rsa_key.sign(head.encode(), padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = utils.decode_dss_signature(ec_key.sign(head.encode(), ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{head}.{_b64(sig)}"
    return str(path), sign


def _b64(doc) -> str:
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


_JWKS_FILE, _SIGN = _jwks()


def _pem(path: str) -> str:
    # a PEM value in server.properties: newlines as \n escapes (java.util.Properties reads them)
    with open(path) as f:
        return f.read().strip().replace("\n", "\\n")


#: the SCRAM users of the node's SASL_PLAINTEXT listener (delegation tokens, re-authentication)
SCRAM_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
               "carol": "carol-secret"}
TOKEN_SECRET = "kproto-token-secret"
#: connections.max.reauth.ms of SCRAM-SHA-512 on the SASL_PLAINTEXT listener (SCRAM-SHA-256's
#: sessions last)
REAUTH_MS = 3000

APACHE = dict(
    listeners={"MTLS": "SSL", "TLSOPT": "SSL", "OAUTH": "SASL_PLAINTEXT", "JWKS": "SASL_PLAINTEXT"},
    scram_users=SCRAM_USERS,
    # Kafka 4 reads a JWKS only from the URLs this property allows
    system_properties={"org.apache.kafka.sasl.oauthbearer.allowed.urls": f"file://{_JWKS_FILE}"},
    config={
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS;User:admin",
        "ssl.principal.mapping.rules": RULES,
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.keystore.type": "PEM",
        "listener.name.mtls.ssl.keystore.certificate.chain": _pem(_SERVER.cert),
        "listener.name.mtls.ssl.keystore.key": _pem(_SERVER.key),
        "listener.name.mtls.ssl.truststore.type": "PEM",
        "listener.name.mtls.ssl.truststore.certificates": _pem(_CA.cert),
        **{f"listener.name.tlsopt.{k}": v for k, v in {
            "ssl.client.auth": "requested", "ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": _pem(_SERVER.cert), "ssl.keystore.key": _pem(_SERVER.key),
            "ssl.truststore.type": "PEM", "ssl.truststore.certificates": _pem(_CA.cert)}.items()},
        "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.oauth.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="broker" unsecuredValidatorRequiredScope="{SCOPE}";',
        "listener.name.jwks.sasl.enabled.mechanisms": "OAUTHBEARER",
        "listener.name.jwks.oauthbearer.sasl.jaas.config":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";',
        "listener.name.jwks.oauthbearer.sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{_JWKS_FILE}",
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "delegation.token.secret.key": TOKEN_SECRET,
        "listener.name.sasl_plaintext.scram-sha-512.connections.max.reauth.ms": REAUTH_MS,
    })
pytestmark = pytest.mark.apache_kafka(**APACHE)

Metadata, CreateTopics, CreateAcls = request(3).cls, request(19).cls, request(30).cls
SaslHandshake, SaslAuthenticate = request(17).cls, request(36).cls


def _port(bootstrap: str) -> int:
    return int(bootstrap.split(",")[0].rsplit(":", 1)[1])


# ------------------------------------------------------------------ TLS principals

async def _tls_observations(port: int) -> list:
    topic = f"orders-{uuid.uuid4().hex[:8]}"

    async def connect(who):
        ctx = _CA.client_context(_IDS[who] if who else None)
        return await Connection.open("127.0.0.1", port, ssl=ctx, connect_timeout=10)

    admin = await connect("admin")
    created = await admin.request(CreateTopics(topics=[CreateTopics.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1)], timeout_ms=30000), 7)
    acl = CreateAcls.AclCreation(resource_type=2, resource_name=topic, resource_pattern_type=3,
                                 principal="User:alice", host="*", operation=8, permission_type=3)
    acls = await admin.request(CreateAcls(creations=[acl]), 3)
    await admin.close()
    out: list = [("create", created.topics[0].error_code), ("acl", acls.results[0].error_code)]
    await asyncio.sleep(1.0)  # the ACL reaches the authorizer through the metadata log
    for who in ("admin", "alice", "bob", "stranger", None):
        try:
            conn = await connect(who)
            md = await conn.request(Metadata(topics=[Metadata.MetadataRequestTopic(name=topic)],
                                             allow_auto_topic_creation=False), 12, timeout=10)
            out.append((who, md.topics[0].error_code))
            await conn.close()
        except Exception:  # noqa: BLE001 - refused in the TLS handshake or closed
            out.append((who, "refused"))
    return out


@pytest.mark.parametrize("listener, client_auth, expected", [
    ("MTLS", "required", [("admin", 0), ("alice", 0), ("bob", 29), ("stranger", "refused"),
                          (None, "refused")]),
    # without a certificate: User:ANONYMOUS, a super user here
    ("TLSOPT", "requested", [("admin", 0), ("alice", 0), ("bob", 29), ("stranger", "refused"),
                             (None, 0)])])
def test_certificate_principals_as_apache(apache_kafka, tmp_path, listener, client_auth, expected):
    apache = asyncio.run(_tls_observations(_port(apache_kafka.listener_bootstrap(listener))))
    broker = BrokerThread(tmp_path / "k", ssl_context=_CA.server_context(_SERVER),
                          ssl_client_auth=client_auth, ssl_principal_mapping_rules=RULES,
                          authorizer=True, super_users=("User:ANONYMOUS", "User:admin")).start()
    try:
        ours = asyncio.run(_tls_observations(_port(broker.bootstrap)))
    finally:
        broker.stop()
    assert apache[2:] == expected, apache
    assert ours == apache


# ------------------------------------------------------------------ OAUTHBEARER

def _jwt(claims, header=None) -> str:
    return f"{_b64(header if header is not None else {'alg': 'none'})}.{_b64(claims)}."


def _message(token: str, authzid: str = "", ext: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{ext}\x01".encode()


def _cases(now: float) -> dict[str, tuple[str, list]]:
    good = {"sub": "alice", "scope": SCOPE, "exp": now + 600, "iat": now - 5}
    return {
        "valid": ("OAUTHBEARER", [_message(_jwt(good))]),
        "valid with an extension": ("OAUTHBEARER", [_message(_jwt(good), ext="traceId=abc\x01")]),
        "scope as a list": ("OAUTHBEARER", [_message(_jwt({**good, "scope": ["x", SCOPE]}))]),
        "expired": ("OAUTHBEARER", [_message(_jwt({**good, "exp": now - 60})), b"\x01"]),
        "scope missing": ("OAUTHBEARER", [_message(_jwt({**good, "scope": "other"})), b"\x01"]),
        "no sub": ("OAUTHBEARER", [_message(_jwt({k: v for k, v in good.items() if k != "sub"})), b"\x01"]),
        "no exp": ("OAUTHBEARER", [_message(_jwt({k: v for k, v in good.items() if k != "exp"})), b"\x01"]),
        "issued later": ("OAUTHBEARER", [_message(_jwt({**good, "iat": now + 120})), b"\x01"]),
        "signed alg": ("OAUTHBEARER", [_message(_jwt(good, {"alg": "HS256"})), b"\x01"]),
        "a signature": ("OAUTHBEARER", [_message(_jwt(good) + "c2ln"), b"\x01"]),
        "no alg": ("OAUTHBEARER", [_message(_jwt(good, {"typ": "JWT"})), b"\x01"]),
        "empty sub": ("OAUTHBEARER", [_message(_jwt({**good, "sub": ""})), b"\x01"]),
        "exp a string": ("OAUTHBEARER", [_message(_jwt({**good, "exp": "soon"})), b"\x01"]),
        "exp before iat": ("OAUTHBEARER", [_message(_jwt({**good, "iat": now + 700, "exp": now + 600})), b"\x01"]),
        "two dots": ("OAUTHBEARER", [_message(f"{_b64({'alg': 'none'})}..x"), b"\x01"]),
        "not json": ("OAUTHBEARER", [_message(f"{_b64({'alg': 'none'})}.{_b64(b'x')}."), b"\x01"]),
        "error then another token": ("OAUTHBEARER", [_message(_jwt({**good, "exp": now - 60})),
                                                      _message(_jwt(good))]),
        "authzid not the principal": ("OAUTHBEARER", [_message(_jwt(good), authzid="bob")]),
        "authzid the principal": ("OAUTHBEARER", [_message(_jwt(good), authzid="alice")]),
        "not bearer": ("OAUTHBEARER", [b"n,,\x01auth=Basic abc\x01\x01"]),
        "no auth": ("OAUTHBEARER", [b"n,,\x01traceId=1\x01\x01"]),
        "garbage": ("OAUTHBEARER", [b"hello"]),
        "PLAIN refused": ("PLAIN", []),
        # KIP-368 re-authentication: a SaslHandshake on an authenticated connection
        "reauthenticate": ("OAUTHBEARER", [_message(_jwt(good)), "handshake",
                                           _message(_jwt({**good, "exp": now + 900}))]),
        "reauthenticate as another": ("OAUTHBEARER", [_message(_jwt(good)), "handshake",
                                                      _message(_jwt({**good, "sub": "bob"}))]),
        "reauthenticate refused token": ("OAUTHBEARER", [_message(_jwt(good)), "handshake",
                                                         _message(_jwt({**good, "exp": now - 9})), b"\x01"]),
    }


async def _short_session(port: int) -> list:
    """A token expiring 5 s after it is made: a request within the session is served,
    one after it closes the connection (KIP-368)."""
    now = time.time()
    token = _jwt({"sub": "alice", "scope": SCOPE, "exp": now + 5, "iat": now - 5})
    conn = await Connection.open("127.0.0.1", port, connect_timeout=10)
    seen: list = []
    try:
        await conn.request(SaslHandshake(mechanism="OAUTHBEARER"), 1, timeout=10)
        r = await conn.request(SaslAuthenticate(auth_bytes=_message(token)), 2, timeout=10)
        seen.append((r.error_code, bytes(r.auth_bytes), 0 < r.session_lifetime_ms <= 5000))
        seen.append(len((await conn.request(Metadata(topics=[]), 12, timeout=10)).brokers))
        await asyncio.sleep(6.0)
        await conn.request(Metadata(topics=[]), 12, timeout=10)
        seen.append("served")
    except Exception as exc:  # noqa: BLE001 - the broker closed the connection
        seen.append(("closed", type(exc).__name__ != "RequestTimeoutError"))
    finally:
        await conn.close()
    return seen


async def _oauth_observations(port: int, cases=None) -> tuple[dict, dict]:
    out, lifetimes = {}, {}
    for label, (mechanism, steps) in (cases or _cases)(time.time()).items():
        seen: list = []
        conn = await Connection.open("127.0.0.1", port, connect_timeout=10)
        try:
            hs = await conn.request(SaslHandshake(mechanism=mechanism), 1, timeout=10)
            seen.append(("handshake", hs.error_code, list(hs.mechanisms)))
            if hs.error_code == 0:
                for step in steps:
                    if step == "handshake":
                        hs = await conn.request(SaslHandshake(mechanism=mechanism), 1, timeout=10)
                        seen.append(("handshake", hs.error_code, list(hs.mechanisms)))
                        continue
                    r = await conn.request(SaslAuthenticate(auth_bytes=step), 2, timeout=10)
                    seen.append((r.error_code, r.error_message, bytes(r.auth_bytes)))
                    if r.session_lifetime_ms:
                        lifetimes[label] = r.session_lifetime_ms
                # authenticated: a request is served; failed: the connection is closed
                md = await conn.request(Metadata(topics=[]), 12, timeout=10)
                seen.append(("metadata", len(md.brokers)))
        except Exception as exc:  # noqa: BLE001 - the broker closed the connection
            seen.append(("closed", type(exc).__name__ != "RequestTimeoutError"))
        finally:
            await conn.close()
        out[label] = seen
    return out, lifetimes


def test_oauthbearer_unsecured_as_apache(apache_kafka, tmp_path):
    apache, apache_life = asyncio.run(_oauth_observations(_port(apache_kafka.listener_bootstrap("OAUTH"))))
    broker = BrokerThread(tmp_path / "k", sasl_enabled_mechanisms=("OAUTHBEARER",),
                          oauthbearer_required_scope=(SCOPE,)).start()

    async def both_short_sessions():  # side by side: each waits out its session
        return await asyncio.gather(_short_session(_port(apache_kafka.listener_bootstrap("OAUTH"))),
                                    _short_session(_port(broker.bootstrap)))
    try:
        ours, our_life = asyncio.run(_oauth_observations(_port(broker.bootstrap)))
        short, our_short = asyncio.run(both_short_sessions())
    finally:
        broker.stop()
    assert apache["valid"][-1][0] == "metadata" and apache["expired"][-1][0] == "closed", apache
    assert short == [(0, b"", True), 1, ("closed", True)], short
    for label in apache:
        assert ours[label] == apache[label], (label, ours[label], apache[label])
    assert our_short == short
    # KIP-368: the session lasts until the token's exp (600 s from when it was made)
    assert set(our_life) == set(apache_life)
    for label, ms in apache_life.items():
        expected = 900_000 if label == "reauthenticate" else 600_000  # the last token's exp
        # 30 s of slack (the tokens' lifetimes differ by 300 s): on a busy machine Apache Kafka
        # took 10.8 s from making a token to reading it into a session
        assert expected - 30_000 <= ms <= expected and abs(our_life[label] - ms) < 30_000, \
            (label, ms, our_life[label])


# ------------------------------------------------------------------ OAUTHBEARER with a JWKS

def _jwks_cases(now: float) -> dict[str, tuple[str, list]]:
    good = {"sub": "svc", "aud": AUDIENCE, "iss": ISSUER, "exp": now + 600, "iat": now - 5,
            "scope": "a b"}
    refused = [b"\x01"]
    return {
        "RS256": ("OAUTHBEARER", [_message(_SIGN(good))]),
        "ES256": ("OAUTHBEARER", [_message(_SIGN(good, "e1", "ES256"))]),
        "audience a list": ("OAUTHBEARER", [_message(_SIGN({**good, "aud": ["x", AUDIENCE]}))]),
        "other audience": ("OAUTHBEARER", [_message(_SIGN({**good, "aud": "x"})), *refused]),
        "no audience": ("OAUTHBEARER", [_message(_SIGN({k: v for k, v in good.items() if k != "aud"})), *refused]),
        "other issuer": ("OAUTHBEARER", [_message(_SIGN({**good, "iss": "https://evil"})), *refused]),
        "expired": ("OAUTHBEARER", [_message(_SIGN({**good, "exp": now - 120})), *refused]),
        # within the clock skew, but expiring before it was issued
        "expires before issued": ("OAUTHBEARER", [_message(_SIGN({**good, "exp": now - 10, "iat": now - 5})), b"\x01"]),
        "expired 10 s ago": ("OAUTHBEARER", [_message(_SIGN({**good, "exp": now - 10, "iat": now - 60})), b"\x01"]),
        "no iat": ("OAUTHBEARER", [_message(_SIGN({k: v for k, v in good.items() if k != "iat"})), *refused]),
        "not yet valid": ("OAUTHBEARER", [_message(_SIGN({**good, "nbf": now + 300})), *refused]),
        "unknown kid": ("OAUTHBEARER", [_message(_SIGN(good, "zz")), *refused]),
        "wrong key for kid": ("OAUTHBEARER", [_message(_SIGN(good, "r1", "ES256")), *refused]),
        "tampered": ("OAUTHBEARER", [_message(_SIGN(good)[:-8] + "AAAAAAAA"), *refused]),
        "unsigned": ("OAUTHBEARER", [_message(_jwt(good)), *refused]),
        "no sub": ("OAUTHBEARER", [_message(_SIGN({k: v for k, v in good.items() if k != "sub"})), *refused]),
    }


def test_oauthbearer_jwks_as_apache(apache_kafka, tmp_path):
    apache, apache_life = asyncio.run(_oauth_observations(
        _port(apache_kafka.listener_bootstrap("JWKS")), _jwks_cases))
    broker = BrokerThread(tmp_path / "k", sasl_enabled_mechanisms=("OAUTHBEARER",),
                          oauthbearer_jwks_file=_JWKS_FILE, oauthbearer_expected_audience=(AUDIENCE,),
                          oauthbearer_expected_issuer=ISSUER).start()
    try:
        ours, our_life = asyncio.run(_oauth_observations(_port(broker.bootstrap), _jwks_cases))
    finally:
        broker.stop()
    assert apache["RS256"][-1][0] == "metadata" and apache["expired"][-1][0] == "closed", apache
    for label in apache:
        assert ours[label] == apache[label], (label, ours[label], apache[label])
    assert set(our_life) == set(apache_life)
    for label, ms in apache_life.items():
        assert abs(our_life[label] - ms) < 10_000, (label, ms, our_life[label])
