"""SASL PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER client mechanics as sans-I/O state machines.

A mechanism object turns server challenges into client responses; the caller moves the bytes
(SaslAuthenticate requests, or raw frames with SaslHandshake v0)::

    mech = sasl_client("SCRAM-SHA-512", "alice", "secret")
    token = mech.initial()
    while token is not None:
        token = mech.step(await exchange(token))   # exchange() is the caller's I/O
    assert mech.complete

The SCRAM helpers follow Kafka's ``ScramFormatter`` and ``ScramMessages`` (RFC 5802 / RFC 7677):
malformed server messages raise :class:`kproto.errors.DecodeError`; well-formed messages that fail
the exchange (wrong nonce, server error, bad signature) raise :class:`SaslAuthenticationError`.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac as _hmac
import re
import secrets
from typing import Mapping

from kproto.errors import DecodeError, KprotoError
from kproto.javahash import hashmap_copy_capacity, java_hash_order, java_string_hash

__all__ = [
    "SaslAuthenticationError", "PlainClient", "ScramClient", "OAuthBearerClient", "sasl_client",
    "MECHANISMS",
    "SCRAM_MECHANISMS", "sasl_name", "username_from_sasl_name", "hi", "hmac", "digest",
    "salted_password", "client_key", "stored_key", "server_key", "client_signature",
    "client_proof", "server_signature", "auth_message",
]


class SaslAuthenticationError(KprotoError):
    """The server rejected us, or failed to prove it knows the credentials."""


# mechanism -> (hashlib name, Kafka's minimum iteration count)
SCRAM_MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 4096),
    "SCRAM-SHA-512": ("sha512", 4096),
}
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")


# ---- ScramFormatter ------------------------------------------------------------------------

def sasl_name(username: str) -> str:
    """Escape a username for SCRAM (``=`` -> ``=3D``, ``,`` -> ``=2C``)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_from_sasl_name(name: str) -> str:
    """Inverse of :func:`sasl_name`."""
    return name.replace("=2C", ",").replace("=3D", "=")


def hmac(hash_name: str, key: bytes, data: bytes) -> bytes:
    """HMAC with Java's rule that the key must not be empty (``Mac.init`` refuses it)."""
    if not key:
        raise ValueError("Empty key")
    return _hmac.new(key, data, hash_name).digest()


def digest(hash_name: str, data: bytes) -> bytes:
    """The plain message digest H()."""
    return hashlib.new(hash_name, data).digest()


def hi(hash_name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802 Hi(): PBKDF2-HMAC with one output block."""
    if not password:
        raise ValueError("Empty key")
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    return hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)


def salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i); Kafka's normalisation is plain UTF-8 encoding."""
    return hi(hash_name, password.encode("utf-8"), salt, iterations)


def client_key(hash_name: str, salted: bytes) -> bytes:
    """HMAC(SaltedPassword, "Client Key")."""
    return hmac(hash_name, salted, b"Client Key")


def stored_key(hash_name: str, client_key_: bytes) -> bytes:
    """H(ClientKey)."""
    return digest(hash_name, client_key_)


def server_key(hash_name: str, salted: bytes) -> bytes:
    """HMAC(SaltedPassword, "Server Key")."""
    return hmac(hash_name, salted, b"Server Key")


def auth_message(client_first_bare: str, server_first: str, client_final_without_proof: str) -> bytes:
    """The AuthMessage both sides sign."""
    return f"{client_first_bare},{server_first},{client_final_without_proof}".encode("utf-8")


def client_signature(hash_name: str, stored_key_: bytes, auth: bytes) -> bytes:
    """HMAC(StoredKey, AuthMessage)."""
    return hmac(hash_name, stored_key_, auth)


def client_proof(hash_name: str, salted: bytes, auth: bytes) -> bytes:
    """ClientKey XOR ClientSignature."""
    ck = client_key(hash_name, salted)
    sig = client_signature(hash_name, stored_key(hash_name, ck), auth)
    return bytes(a ^ b for a, b in zip(ck, sig))


def server_signature(hash_name: str, server_key_: bytes, auth: bytes) -> bytes:
    """HMAC(ServerKey, AuthMessage)."""
    return hmac(hash_name, server_key_, auth)


# ---- message parsing (ScramMessages) -------------------------------------------------------

_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"           # printable ASCII except ','
_B64 = r"[A-Za-z0-9+/]+={0,2}"
_EXT = r"(?:,[A-Za-z]+=[^,]*)*"
_SERVER_FIRST = re.compile(rf"(?:m=[^,]*,)?r=({_PRINTABLE}),s=({_B64}),i=([0-9]+){_EXT}")
_SERVER_FINAL = re.compile(rf"(?:e=([^,]*)|v=({_B64})){_EXT}")
_EXT_KEY = re.compile(r"[A-Za-z]+")


def _text(data: bytes | bytearray | memoryview, what: str) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"not UTF-8: {e.reason}", what=what, offset=e.start) from None


def _b64(s: str, what: str) -> bytes:
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError) as e:
        raise DecodeError(f"bad base64: {e}", what=what) from None


# ---- mechanisms ------------------------------------------------------------------------------

class _OneMessageClient:
    """A mechanism whose client says everything in its first message (PLAIN, OAUTHBEARER)."""

    def __init__(self, message: bytes) -> None:
        self._message = message
        self.complete = False
        self._sent = False

    def initial(self) -> bytes:
        """The client's message."""
        self._sent = True
        return self._message

    def _check_sent(self) -> None:
        if not self._sent:
            raise RuntimeError("initial() must be called first")


class PlainClient(_OneMessageClient):
    """SASL PLAIN (RFC 4616): one message ``authzid NUL username NUL password``."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str, authzid: str = "") -> None:
        for name, v in (("username", username), ("password", password), ("authzid", authzid)):
            if "\0" in v:
                raise ValueError(f"{name} must not contain NUL")
        super().__init__(f"{authzid}\0{username}\0{password}".encode("utf-8"))

    def step(self, challenge: bytes) -> bytes | None:
        """The server's (empty) answer ends the exchange."""
        self._check_sent()
        self.complete = True
        return None


class ScramClient:
    """SCRAM-SHA-256/512 client (what Kafka's ``ScramSaslClient`` does), sans-I/O.

    ``nonce`` defaults to a random printable string; ``extensions`` are appended to the
    client-first message (``tokenauth=true`` for delegation tokens); ``min_iterations`` is the
    smallest iteration count accepted from the server (Kafka: 4096). ``max_iterations`` bounds the
    work a hostile server can demand (Kafka's client has no bound; brokers cap credentials at 16384).
    """

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None,
                 extensions: Mapping[str, str] | None = None, authzid: str = "",
                 min_iterations: int | None = None, max_iterations: int = 1_000_000) -> None:
        try:
            self.hash_name, default_min = SCRAM_MECHANISMS[mechanism]
        except KeyError:
            raise ValueError(f"unsupported SCRAM mechanism {mechanism!r}") from None
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self.min_iterations = default_min if min_iterations is None else min_iterations
        self.max_iterations = max_iterations
        self.nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        if not re.fullmatch(_PRINTABLE, self.nonce):
            raise ValueError("nonce must be printable ASCII without ','")
        ext = dict(extensions or {})
        for k, v in ext.items():
            if not _EXT_KEY.fullmatch(k) or "," in v:
                raise ValueError(f"invalid SCRAM extension {k!r}={v!r}")
        self.client_first_bare = f"n={sasl_name(username)},r={self.nonce}" + "".join(
            f",{k}={v}" for k, v in ext.items())
        gs2 = f"n,a={sasl_name(authzid)}," if authzid else "n,,"
        self.client_first = gs2 + self.client_first_bare
        self._gs2 = gs2
        self.server_first: str | None = None
        self.salt: bytes | None = None
        self.iterations: int | None = None
        self._expected_server_signature: bytes | None = None
        self._state = "initial"
        self.complete = False

    def initial(self) -> bytes:
        """The client-first message."""
        if self._state != "initial":
            raise RuntimeError("initial() was already called")
        self._state = "server-first"
        return self.client_first.encode("utf-8")

    def step(self, challenge: bytes) -> bytes | None:
        """Feed the server-first (returns client-final) or server-final (returns None)."""
        if self._state == "server-first":
            return self.receive_server_first(challenge)
        if self._state == "server-final":
            self.receive_server_final(challenge)
            return None
        raise RuntimeError(f"no server message expected in state {self._state!r}")

    def receive_server_first(self, data: bytes) -> bytes:
        """Parse the server-first message and compute the client-final message."""
        text = _text(data, "SCRAM server-first message")
        m = _SERVER_FIRST.fullmatch(text)
        if not m:
            raise DecodeError("invalid SCRAM server-first message format", what="SCRAM server-first message")
        nonce, salt_b64, iterations = m.group(1), m.group(2), int(m.group(3))
        if iterations <= 0 or iterations > 0x7FFFFFFF:
            raise DecodeError("invalid iterations", what="SCRAM server-first message")
        if not nonce.startswith(self.nonce):
            raise SaslAuthenticationError("invalid server nonce: does not start with client nonce")
        if iterations < self.min_iterations:
            raise SaslAuthenticationError(
                f"requested iterations {iterations} is less than minimum {self.min_iterations} "
                f"for {self.mechanism}")
        if iterations > self.max_iterations:
            raise SaslAuthenticationError(
                f"requested iterations {iterations} is more than the allowed {self.max_iterations}")
        salt = _b64(salt_b64, "SCRAM server-first message")
        self.server_first, self.salt, self.iterations = text, salt, iterations
        channel = base64.b64encode(self._gs2.encode("utf-8")).decode("ascii")
        without_proof = f"c={channel},r={nonce}"
        self.client_final_without_proof = without_proof
        auth = auth_message(self.client_first_bare, text, without_proof)
        salted = salted_password(self.hash_name, self._password, salt, iterations)
        proof = client_proof(self.hash_name, salted, auth)
        self._expected_server_signature = server_signature(
            self.hash_name, server_key(self.hash_name, salted), auth)
        self._state = "server-final"
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("utf-8")

    def receive_server_final(self, data: bytes) -> None:
        """Check the server-final message: an error, or the server's signature."""
        if self._state != "server-final":
            raise RuntimeError("server-final message not expected now")
        text = _text(data, "SCRAM server-final message")
        m = _SERVER_FINAL.fullmatch(text)
        if not m:
            raise DecodeError("invalid SCRAM server-final message format", what="SCRAM server-final message")
        self._state = "done"
        if m.group(1) is not None:
            raise SaslAuthenticationError(f"SCRAM server error: {m.group(1)}")
        sig = _b64(m.group(2), "SCRAM server-final message")
        if not _hmac.compare_digest(sig, self._expected_server_signature or b""):
            raise SaslAuthenticationError("invalid server signature in server-final message")
        self.complete = True


_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")          # RFC 6750 b64token
_EXT_KEY = re.compile(r"[A-Za-z]+")                        # RFC 7628 key
_EXT_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")            # RFC 7628 value


class OAuthBearerClient(_OneMessageClient):
    """SASL OAUTHBEARER (RFC 7628) as Kafka's ``OAuthBearerSaslClient``: one message
    ``n,[a=authzid],^Aauth=Bearer <token>[^Aextensions]^A^A``; the server answers nothing on
    success, or an error document, to which the client answers ``^A`` and the server fails
    the exchange (:attr:`server_error` then holds the document). The token comes from the
    caller (an OAuth client), as with Kafka's login callback handler."""

    mechanism = "OAUTHBEARER"

    def __init__(self, token: str, extensions: Mapping[str, str] | None = None,
                 authzid: str = "") -> None:
        if not _B64TOKEN.fullmatch(token):
            raise ValueError("an OAUTHBEARER token must be an RFC 6750 b64token")
        ext = dict(extensions or {})
        for k, v in ext.items():
            if k == "auth" or not _EXT_KEY.fullmatch(k):
                raise ValueError(f"invalid SASL extension key {k!r}")
            if not _EXT_VALUE.fullmatch(v):
                raise ValueError(f"invalid value for SASL extension {k!r}")
        if "," in authzid or "=" in authzid:
            raise ValueError("authzid must not contain ',' or '='")
        # Kafka writes them in the order of SaslExtensions' map: a HashMap copy (new
        # HashMap<>(m)) of the HashMap the login callback filled, in the order given here
        order = java_hash_order(java_hash_order(ext), java_string_hash, hashmap_copy_capacity(len(ext)))
        ext_part = "".join(f"\x01{k}={ext[k]}" for k in order)
        super().__init__((f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}"
                          f"{ext_part}\x01\x01").encode("utf-8"))
        self.server_error: str | None = None

    def step(self, challenge: bytes) -> bytes | None:
        """Empty: authenticated. Otherwise the server's error document: answer ``^A``."""
        self._check_sent()
        if self.server_error is not None:
            raise SaslAuthenticationError(f"OAUTHBEARER refused: {self.server_error}")
        if not challenge:
            self.complete = True
            return None
        self.server_error = _text(challenge, "OAUTHBEARER server error")
        return b"\x01"


def sasl_client(mechanism: str, username: str = "", password: str = "",
                **kwargs) -> PlainClient | ScramClient | OAuthBearerClient:
    """A client state machine for ``mechanism`` (one of :data:`MECHANISMS`); OAUTHBEARER takes
    ``token`` (and optional ``extensions``) instead of a username and password."""
    if mechanism == "PLAIN":
        return PlainClient(username, password, **kwargs)
    if mechanism == "OAUTHBEARER":
        return OAuthBearerClient(**kwargs)
    return ScramClient(mechanism, username, password, **kwargs)
