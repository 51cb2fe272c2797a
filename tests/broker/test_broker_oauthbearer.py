"""OAUTHBEARER on kproto's broker: the client's initial response parsed as Kafka's
OAuthBearerClientInitialResponse, tokens checked by the unsecured validator (alg none) or with
a local JWKS (RS256, ES256), refusals answered with Kafka's JSON error document then failure,
the session lifetime (KIP-368) from the token's exp; kproto's client with a token provider."""
from __future__ import annotations

import asyncio
import base64
import json
import time

import pytest

from kproto.broker.configs import BrokerConfig
from kproto.broker.security.auth import OAuthBearerServer, SaslFailed, SaslUnanswered, Security
from kproto.broker.security.oauth import (JwksValidator, TokenRefused, TokenUnanswered, UnsecuredValidator,
                                          parse_initial_response)
from kproto.client.sasl import OAuthBearerClient

NOW = 1_800_000_000.0


def b64(doc) -> str:
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unsecured(claims, header=None) -> str:
    return f"{b64(header or {'alg': 'none'})}.{b64(claims)}."


def initial(token, authzid="", **ext) -> bytes:
    return OAuthBearerClient(token, ext, authzid).initial()


def test_initial_response_parsed():
    tok = unsecured({"sub": "alice", "exp": NOW + 60})
    assert parse_initial_response(initial(tok, traceId="123")) == ("", tok, {"traceId": "123"})
    assert parse_initial_response(initial(tok, authzid="alice"))[0] == "alice"


def test_malformed_initial_response_is_the_generic_failure():
    server = OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW)
    for bad in (b"n,,\x01auth=Bearer\x01\x01", b"y,,\x01\x01",
                b"n,,\x01foo=bar\x01\x01"):
        with pytest.raises(SaslFailed, match="invalid credentials with SASL mechanism OAUTHBEARER"):
            OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW).step(bad)
    # another scheme: Kafka's parser throws an unexpected exception, the connection is closed
    # without an answer
    with pytest.raises(SaslUnanswered):
        OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW).step(b"n,,\x01auth=Basic abc\x01\x01")
    assert server.step(initial(unsecured({"sub": "a", "exp": NOW + 1}))) == b""


def test_unsecured_validator_claims():
    v = UnsecuredValidator(required_scope=("read", "write"))
    now_ms = int(NOW * 1000)
    good = v.validate(unsecured({"sub": "alice", "exp": NOW + 60, "iat": NOW, "scope": "read write x"}), now_ms)
    assert (good.principal, good.lifetime_ms, good.scope) == ("alice", now_ms + 60_000, {"read", "write", "x"})
    cases = {
        "expired": unsecured({"sub": "a", "exp": NOW, "scope": "read write"}),
        "no exp": unsecured({"sub": "a", "scope": "read write"}),
        "no sub": unsecured({"exp": NOW + 60, "scope": "read write"}),
        "empty sub": unsecured({"sub": " ", "exp": NOW + 60, "scope": "read write"}),
        "sub not a string": unsecured({"sub": 7, "exp": NOW + 60, "scope": "read write"}),
        "issued in the future": unsecured({"sub": "a", "exp": NOW + 60, "iat": NOW + 5, "scope": "read write"}),
        "signed": unsecured({"sub": "a", "exp": NOW + 60, "scope": "read write"}, {"alg": "HS256"}),
        "signature present": unsecured({"sub": "a", "exp": NOW + 60, "scope": "read write"}) + "c2ln",
        "two parts": f"{b64({'alg': 'none'})}.{b64({'sub': 'a'})}",
        "not json": f"{b64({'alg': 'none'})}.{b64(b'nope')}.",
    }
    for what, tok in cases.items():
        with pytest.raises(TokenRefused) as e:
            v.validate(tok, now_ms)
        assert e.value.status == "invalid_token", what
    with pytest.raises(TokenUnanswered):  # Kafka: a NullPointerException, no answer
        v.validate(unsecured({"sub": "a", "exp": NOW + 60}, {"typ": "JWT"}), now_ms)
    with pytest.raises(TokenRefused) as e:
        v.validate(unsecured({"sub": "a", "exp": NOW + 60, "scope": ["read"]}), now_ms)
    assert (e.value.status, e.value.scope) == ("insufficient_scope", "[read, write]")
    # another principal claim, and clock skew
    v2 = UnsecuredValidator(principal_claim="client_id", clock_skew_ms=5000)
    assert v2.validate(unsecured({"client_id": "svc", "exp": NOW - 2}), now_ms).principal == "svc"


def test_refused_token_error_document_then_failure():
    server = OAuthBearerServer(UnsecuredValidator(required_scope=("admin",)), clock=lambda: NOW)
    out = server.step(initial(unsecured({"sub": "a", "exp": NOW + 60})))
    assert out == b'{"status":"insufficient_scope", "scope":"[admin]"}'
    with pytest.raises(SaslFailed) as e:
        server.step(b"\x01")
    assert e.value.message == '{"status":"insufficient_scope", "scope":"[admin]"}'
    server = OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW)
    assert server.step(initial(unsecured({"sub": "a"}))) == b'{"status":"invalid_token"}'


def test_authzid_must_be_the_principal():
    server = OAuthBearerServer(UnsecuredValidator(), clock=lambda: NOW)
    with pytest.raises(SaslFailed, match=r"authorization id \(bob\) that is different from the "
                                         r"token's principal name \(alice\)"):
        server.step(initial(unsecured({"sub": "alice", "exp": NOW + 60}), authzid="bob"))


# ------------------------------------------------------------------ JWKS

def _jwks_and_signers():
    pytest.importorskip("cryptography")
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    rn, en = rsa_key.public_key().public_numbers(), ec_key.public_key().public_numbers()

    def i2b(n, size=None):
        return b64(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))
    jwks = {"keys": [
        {"kty": "RSA", "kid": "r1", "alg": "RS256", "use": "sig", "n": i2b(rn.n), "e": i2b(rn.e)},
        {"kty": "EC", "kid": "e1", "crv": "P-256", "x": i2b(en.x, 32), "y": i2b(en.y, 32)}]}

    def sign(claims, kid, alg):
        head = f"{b64({'alg': alg, 'kid': kid, 'typ': 'JWT'})}.{b64(claims)}"
        if alg == "RS256":
            sig = rsa_key.sign(head.encode(), padding.PKCS1v15(), hashes.SHA256())
        else:
            r, s = utils.decode_dss_signature(ec_key.sign(head.encode(), ec.ECDSA(hashes.SHA256())))
            sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{head}.{b64(sig)}"
    return jwks, sign


def test_jwks_validator_rs256_and_es256(tmp_path):
    jwks, sign = _jwks_and_signers()
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    v = JwksValidator.from_file(str(path), audience=("kafka",), issuer="https://idp")
    now_ms = int(NOW * 1000)
    claims = {"sub": "svc", "exp": NOW + 300, "iat": NOW, "aud": "kafka", "iss": "https://idp"}
    assert v.validate(sign(claims, "r1", "RS256"), now_ms).principal == "svc"
    assert v.validate(sign(claims, "e1", "ES256"), now_ms).lifetime_ms == now_ms + 300_000
    bad = {
        "wrong key": sign(claims, "r1", "ES256"),
        "unknown kid": sign(claims, "zz", "RS256"),
        "tampered": sign(claims, "r1", "RS256")[:-6] + "AAAAAA",
        "alg none": unsecured(claims),
        "no iat": sign({k: v for k, v in claims.items() if k != "iat"}, "r1", "RS256"),
        "expired beyond skew": sign({**claims, "exp": NOW - 31}, "r1", "RS256"),
        "other audience": sign({**claims, "aud": "other"}, "r1", "RS256"),
        "other issuer": sign({**claims, "iss": "https://evil"}, "r1", "RS256"),
        "not yet valid": sign({**claims, "nbf": NOW + 60}, "r1", "RS256"),
    }
    for what, tok in bad.items():
        with pytest.raises(TokenRefused):
            v.validate(tok, now_ms)
            pytest.fail(what)
    # within the default 30 s clock skew
    assert v.validate(sign({**claims, "exp": NOW - 10, "iat": NOW - 60}, "e1", "ES256"), now_ms).principal == "svc"
    with pytest.raises(TokenRefused):  # but not expiring before it was issued
        v.validate(sign({**claims, "exp": NOW - 10, "iat": NOW - 5}, "e1", "ES256"), now_ms)


def test_jwks_needs_an_audience_and_an_issuer_unless_allowed(tmp_path):
    from kproto.broker.security.oauth import validator_from_config
    path = tmp_path / "jwks.json"
    path.write_text('{"keys": []}')
    with pytest.raises(ValueError, match='requires "sasl.oauthbearer.expected.audience"'):
        validator_from_config(BrokerConfig(oauthbearer_jwks_file=str(path), oauthbearer_expected_issuer="i"))
    with pytest.raises(ValueError, match='requires "sasl.oauthbearer.expected.issuer"'):
        validator_from_config(BrokerConfig(oauthbearer_jwks_file=str(path), oauthbearer_expected_audience=("a",)))
    assert isinstance(validator_from_config(BrokerConfig(
        oauthbearer_jwks_file=str(path), oauthbearer_allow_unverified_audience=True,
        oauthbearer_allow_unverified_issuer=True)), JwksValidator)


# ------------------------------------------------------------------ over SaslAuthenticate

class _Channel:
    def __init__(self):
        self.closed = None
        self.peer = "/127.0.0.1"

    def close(self, reason):
        self.closed = reason

    def respond(self, frame):
        pass


def _exchange(security, channel, *tokens, version=2):
    from kproto.codecs import request as request_codec
    out = []
    security.handshake(channel, request_codec(17).cls(mechanism="OAUTHBEARER"), 1, out.append)
    assert out[0].error_code == 0 and "OAUTHBEARER" in out[0].mechanisms
    for t in tokens:
        security.authenticate(channel, request_codec(36).cls(auth_bytes=t), version, out.append)
    return out[1:]


def test_session_lifetime_and_expiry():
    clock = [NOW]
    sec = Security(BrokerConfig(sasl_enabled_mechanisms=("OAUTHBEARER",)), clock=lambda: clock[0])
    ch = _Channel()
    (resp,) = _exchange(sec, ch, initial(unsecured({"sub": "alice", "exp": NOW + 90})))
    assert (resp.error_code, resp.session_lifetime_ms) == (0, 90_000)
    assert sec.session(ch).principal == "User:alice"
    assert sec.gate(ch, b"", 3) is False  # a request within the session is served
    clock[0] = NOW + 91
    assert sec.gate(ch, b"", 3) is True and ch.closed == "session expired"
    # connections.max.reauth.ms caps the lifetime
    sec = Security(BrokerConfig(sasl_enabled_mechanisms=("OAUTHBEARER",), connections_max_reauth_ms=5000),
                   clock=lambda: NOW)
    (resp,) = _exchange(sec, _Channel(), initial(unsecured({"sub": "alice", "exp": NOW + 90})))
    assert resp.session_lifetime_ms == 5000


def test_refusal_over_sasl_authenticate():
    sec = Security(BrokerConfig(sasl_enabled_mechanisms=("OAUTHBEARER",)), clock=lambda: NOW)
    ch = _Channel()
    first, second = _exchange(sec, ch, initial(unsecured({"sub": "a", "exp": NOW - 1})), b"\x01")
    assert (first.error_code, bytes(first.auth_bytes)) == (0, b'{"status":"invalid_token"}')
    assert (second.error_code, second.error_message) == (58, '{"status":"invalid_token"}')
    assert ch.closed is not None


def test_kproto_client_with_a_token_provider(tmp_path):
    from kproto.client.cluster import Cluster
    from kproto.client.protocol import SaslConfig
    from kproto.client.sasl import SaslAuthenticationError
    from kproto.testing import BrokerThread

    calls = []

    def provider():
        calls.append(1)
        # whole seconds, as token issuers write them: a fraction of the current millisecond in
        # iat would be "issued after now" to a check in the same millisecond (Kafka's too)
        now = int(time.time())
        return unsecured({"sub": "alice", "exp": now + 600, "iat": now})

    broker = BrokerThread(tmp_path / "k", sasl_enabled_mechanisms=("OAUTHBEARER", "PLAIN"),
                          sasl_users={"x": "y"}).start()

    async def main():
        async with Cluster(broker.bootstrap, sasl=SaslConfig("OAUTHBEARER", token_provider=provider)) as c:
            await c.refresh_metadata([])
        assert calls  # asked when connecting
        expired = SaslConfig("OAUTHBEARER", token=unsecured({"sub": "a", "exp": time.time() - 60}))
        with pytest.raises(SaslAuthenticationError, match='invalid_token'):
            async with Cluster(broker.bootstrap, sasl=expired) as c:
                await c.refresh_metadata([])
    try:
        asyncio.run(asyncio.wait_for(main(), 30))
    finally:
        broker.stop()
