"""SASL on the broker's side, sans-I/O: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER as Kafka's
``SaslServerAuthenticator``, ``PlainSaslServer``, ``ScramSaslServer`` and
``OAuthBearerSaslServer`` run them (OAUTHBEARER's tokens: :mod:`kproto.broker.security.oauth`).

Each connection has a :class:`ConnectionAuth` (kept by :class:`Security`, keyed by the core's
channel): on a SASL listener it starts in the handshake state, where only ApiVersions and
SaslHandshake are served (anything else closes the connection, as Kafka's authenticator does);
SaslHandshake v1 moves it to SaslAuthenticate round trips, v0 to the legacy flow of raw
size-prefixed tokens without a Kafka header. A failed exchange is answered with
SASL_AUTHENTICATION_FAILED (v1) and the connection closed. Once authenticated the principal is
``User:<name>``; without SASL it is ``User:ANONYMOUS`` on a PLAINTEXT listener and, on an SSL
listener, the client certificate's mapped subject (:mod:`kproto.broker.security.tls`).
A credential with a lifetime (an OAUTHBEARER token's ``exp``, or ``connections_max_reauth_ms``)
bounds the session (KIP-368): SaslAuthenticate v1+ tells the client, and the first request
after it ends closes the connection, unless it is a SaslHandshake: a client that authenticated
with SaslAuthenticate v1+ re-authenticates that way (same mechanism, same principal).

Credentials: ``sasl_users`` (name -> password) of :class:`~kproto.broker.configs.BrokerConfig`
are the PLAIN users (Kafka's ``user_<name>="<password>"`` JAAS options) and, salted with
``scram_iterations``, the SCRAM credentials of each SCRAM mechanism enabled;
AlterUserScramCredentials adds, replaces and deletes SCRAM credentials (checked by
:func:`scram_alterations`), kept across restarts as records of ``__cluster_metadata`` (the single
broker's own, where ``sasl_users``' credentials are written when it is made, or a cluster's).
A SCRAM client-first message with ``tokenauth=true`` authenticates a delegation token
(:mod:`kproto.broker.security.tokens`): the user name is the token's id, the principal its
owner, and the session ends with the token. The SCRAM math is
:mod:`kproto.client.sasl`'s (RFC 5802 / RFC 7677), shared with the client.
"""
from __future__ import annotations

import base64
import binascii
import hmac as _hmac
import re
import secrets
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Container, Iterable, Mapping, Optional, Union

from kproto.broker.configs import BrokerConfig
from kproto.broker.security.oauth import (InvalidMessage, TokenRefused, TokenUnanswered,
                                          UnansweredMessage, Validator,
                                          error_document, parse_initial_response,
                                          validator_from_config)
from kproto.broker.security.tls import NoMatchingRule, SslPrincipalMapper, peer_principal
from kproto.client.sasl import (SCRAM_MECHANISMS, auth_message, client_key, client_signature,
                                digest, salted_password, server_key, server_signature, stored_key,
                                username_from_sasl_name)
from kproto.codecs import response as response_codec
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey

__all__ = ["ScramCredential", "TokenCredential", "CredentialStore", "PlainServer", "ScramServer", "OAuthBearerServer",
           "SaslFailed",
           "ConnectionAuth", "Security", "ANONYMOUS", "SCRAM_MECHANISM_IDS", "SASL_VERSIONS",
           "image_credentials", "scram_records",
           "scram_alterations"]

ANONYMOUS = "User:ANONYMOUS"
#: AlterUserScramCredentials' mechanism numbers (Kafka's ScramMechanism)
SCRAM_MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
#: what the SASL handlers implement
SASL_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}
#: the requests a connection may send before it is authenticated
_PRE_AUTH = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}

Respond = Callable[[Any], None]


class SaslFailed(Exception):
    """The exchange failed: ``message`` is what the client is told (Kafka's wording)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SaslUnanswered(SaslFailed):
    """The exchange failed where Kafka's authenticator throws an unexpected exception: the
    connection is closed without an answer."""


def _generic_failure(mechanism: str) -> SaslFailed:
    # what Kafka's authenticator answers to a SaslException (not a SaslAuthenticationException)
    return SaslFailed("Authentication failed during authentication due to invalid credentials "
                      f"with SASL mechanism {mechanism}")


# ------------------------------------------------------------------ credentials

@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps of a SCRAM password (Kafka's ``ScramCredential``)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted(cls, mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
        h = SCRAM_MECHANISMS[mechanism][0]
        return cls(salt, stored_key(h, client_key(h, salted)), server_key(h, salted), iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = 4096,
                      salt: Optional[bytes] = None) -> ScramCredential:
        salt = salt if salt is not None else secrets.token_bytes(32)
        h = SCRAM_MECHANISMS[mechanism][0]
        return cls.from_salted(mechanism, salted_password(h, password, salt, iterations), salt, iterations)

    def to_json(self) -> dict[str, Any]:
        return {"salt": base64.b64encode(self.salt).decode(), "stored_key":
                base64.b64encode(self.stored_key).decode(), "server_key":
                base64.b64encode(self.server_key).decode(), "iterations": self.iterations}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ScramCredential:
        return cls(base64.b64decode(doc["salt"]), base64.b64decode(doc["stored_key"]),
                   base64.b64decode(doc["server_key"]), int(doc["iterations"]))


@dataclass(frozen=True)
class TokenCredential:
    """A delegation token as SCRAM sees it (Kafka's ``DelegationTokenCache``): its owner's
    principal, its expiry (ms since the epoch) and a SCRAM credential per mechanism salted from
    the HMAC's base64 (the token's password) with Kafka's minimum iterations."""

    owner: str
    expiry_ms: int
    scram: dict[str, ScramCredential]


class CredentialStore:
    """PLAIN passwords, SCRAM credentials by (mechanism, user) and delegation tokens by id."""

    def __init__(self, plain: Optional[dict[str, str]] = None) -> None:
        self.plain: dict[str, str] = dict(plain or {})
        self.scram: dict[tuple[str, str], ScramCredential] = {}
        self.tokens: dict[str, TokenCredential] = {}
        #: what AlterUserScramCredentials changed (None: deleted), kept across restarts
        self.altered: dict[tuple[str, str], Optional[ScramCredential]] = {}

    def apply_altered(self, altered: dict[tuple[str, str], Optional[ScramCredential]]) -> None:
        for key, cred in altered.items():
            self.altered[key] = cred
            if cred is None:
                self.scram.pop(key, None)
            else:
                self.scram[key] = cred

    def put_token(self, token_id: str, owner: str, expiry_ms: int, hmac: bytes) -> None:
        """Add a token, or change its owner and expiry (its credentials are kept: the same
        HMAC)."""
        have = self.tokens.get(token_id)
        if have is None:
            password = base64.b64encode(hmac).decode("ascii")
            scram = {m: ScramCredential.from_password(m, password, SCRAM_MECHANISMS[m][1])
                     for m in SCRAM_MECHANISMS}
        else:
            scram = have.scram
        self.tokens[token_id] = TokenCredential(owner, expiry_ms, scram)

    @classmethod
    def from_config(cls, config: BrokerConfig) -> CredentialStore:
        store = cls(config.sasl_users)
        for mech in config.sasl_enabled_mechanisms:
            if mech in SCRAM_MECHANISMS:
                for user, password in config.sasl_users.items():
                    store.scram[(mech, user)] = ScramCredential.from_password(
                        mech, password, config.scram_iterations)
        return store


# ------------------------------------------------------------------ mechanisms

class PlainServer:
    """Kafka's ``PlainSaslServer``: one message ``authzid NUL user NUL password``."""

    mechanism = "PLAIN"

    def __init__(self, store: CredentialStore) -> None:
        self.store = store
        self.complete = False
        self.username: Optional[str] = None

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise SaslFailed("Authentication failed: username not specified")
        if not password:
            raise SaslFailed("Authentication failed: password not specified")
        expected = self.store.plain.get(user)
        if expected is None or not _hmac.compare_digest(expected.encode(), password.encode()):
            raise SaslFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslFailed("Authentication failed: Client requested an authorization id that "
                             "is different from username")
        self.username, self.complete = user, True
        return b""


_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_CLIENT_FIRST = re.compile(rf"n,(?:a=({_SASLNAME}))?,(n=({_SASLNAME}),r=([\x21-\x2b\x2d-\x7e]+)"
                           r"((?:,[A-Za-z]+=[\x01-\x2b\x2d-\x7f]*)*))")
_CLIENT_FINAL = re.compile(r"(c=([A-Za-z0-9+/]*={0,2}),r=([\x21-\x2b\x2d-\x7e]+)"
                           r"(?:,[A-Za-z]+=[\x01-\x2b\x2d-\x7f]*)*),p=([A-Za-z0-9+/]+={0,2})")


class ScramServer:
    """Kafka's ``ScramSaslServer``: client-first -> server-first, client-final -> server-final."""

    def __init__(self, mechanism: str, store: CredentialStore, nonce: Optional[str] = None) -> None:
        self.mechanism = mechanism
        self.hash_name = SCRAM_MECHANISMS[mechanism][0]
        self.store = store
        self._nonce_suffix = nonce if nonce is not None else secrets.token_urlsafe(24)
        self.complete = False
        self.username: Optional[str] = None
        #: authenticated with a delegation token (``tokenauth=true``), and when it expires
        self.token_authenticated = False
        self.lifetime_ms: Optional[int] = None
        self._state = "client-first"
        self._cred: Optional[ScramCredential] = None
        self._client_first_bare = self._server_first = self._nonce = ""

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _generic_failure(self.mechanism) from None
        if self._state == "client-first":
            return self._client_first(text)
        if self._state == "client-final":
            return self._client_final(text)
        raise SaslFailed("Unexpected SASL token after the exchange completed")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise SaslFailed("Invalid SCRAM client first message format")
        authzid, bare, name, nonce, ext = m.groups()
        user = username_from_sasl_name(name)
        extensions = dict(e.partition("=")[::2] for e in (ext or "").split(",")[1:])
        if extensions.get("tokenauth", "").lower() == "true":
            # a delegation token: the user name is its id; the principal its owner's
            token = self.store.tokens.get(user)
            if token is None:
                raise _generic_failure(self.mechanism)  # "Token Authentication failed: Invalid tokenId"
            cred: Optional[ScramCredential] = token.scram.get(self.mechanism)
            principal_name = token.owner.partition(":")[2]
            self.token_authenticated, self.lifetime_ms = True, token.expiry_ms
        else:
            cred, principal_name = self.store.scram.get((self.mechanism, user)), user
        if cred is None:
            raise _generic_failure(self.mechanism)  # "Invalid user credentials"
        if authzid and username_from_sasl_name(authzid) != user:
            raise SaslFailed("Authentication failed: Client requested an authorization id that "
                             "is different from username")
        self.username, self._cred = principal_name, cred
        self._client_first_bare = bare
        self._nonce = nonce + self._nonce_suffix
        self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                              f"i={cred.iterations}")
        self._state = "client-final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self._state = "failed"
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise _generic_failure(self.mechanism)
        without_proof, _channel, nonce, proof_b64 = m.groups()
        if nonce != self._nonce:
            raise _generic_failure(self.mechanism)  # "Invalid client nonce in the final client message."
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except (binascii.Error, ValueError):
            raise _generic_failure(self.mechanism) from None
        cred = self._cred
        assert cred is not None
        h = self.hash_name
        auth = auth_message(self._client_first_bare, self._server_first, without_proof)
        signature = client_signature(h, cred.stored_key, auth)
        if len(proof) != len(signature):
            raise _generic_failure(self.mechanism)
        computed = digest(h, bytes(a ^ b for a, b in zip(proof, signature)))
        if not _hmac.compare_digest(computed, cred.stored_key):
            raise _generic_failure(self.mechanism)  # "Invalid client credentials"
        self._state, self.complete = "done", True
        sig = server_signature(h, cred.server_key, auth)
        return f"v={base64.b64encode(sig).decode()}".encode()


class OAuthBearerServer:
    """Kafka's ``OAuthBearerSaslServer``: the client's initial response, its token checked by
    ``validator``; a refused token is answered with the JSON error document, the client's
    ``^A`` to it then fails the exchange with the document as the message."""

    mechanism = "OAUTHBEARER"

    def __init__(self, validator: Validator, clock: Callable[[], float] = time.time) -> None:
        self.validator, self.clock = validator, clock
        self.complete = False
        self.username: Optional[str] = None
        #: when the token expires (ms since the epoch)
        self.lifetime_ms: Optional[int] = None
        self.extensions: dict[str, str] = {}
        self._error: Optional[str] = None

    def step(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise SaslFailed(self._error)
        self._error = None
        try:
            authzid, value, extensions = parse_initial_response(token)
        except UnansweredMessage as exc:
            raise SaslUnanswered(str(exc)) from None
        except InvalidMessage:
            raise _generic_failure(self.mechanism) from None
        try:
            validated = self.validator.validate(value, int(self.clock() * 1000))
        except TokenRefused as refused:
            self._error = error_document(refused.status, refused.scope)
            return self._error.encode()
        except TokenUnanswered as exc:
            raise SaslUnanswered(str(exc)) from None
        if authzid and authzid != validated.principal:
            raise SaslFailed(f"Authentication failed: Client requested an authorization id "
                             f"({authzid}) that is different from the token's principal name "
                             f"({validated.principal})")
        # both of Kafka's validator callback handlers accept every extension
        self.extensions = extensions
        self.username, self.lifetime_ms, self.complete = validated.principal, validated.lifetime_ms, True
        return b""


Mechanism = Union[PlainServer, ScramServer, OAuthBearerServer]


# ------------------------------------------------------------------ connections

class ConnectionAuth:
    """One connection's authentication state (Kafka's ``SaslServerAuthenticator`` states:
    ``handshake`` (HANDSHAKE_OR_VERSIONS_REQUEST), ``authenticate``, ``legacy`` (after a v0
    handshake: raw tokens), ``complete``, ``failed``)."""

    def __init__(self, sasl: bool, host: str) -> None:
        self.state = "handshake" if sasl else "complete"
        self.principal = ANONYMOUS
        self.host = host
        self.mechanism: Optional[Mechanism] = None
        #: when the session ends (ms since the epoch), None: it lasts
        self.expires_ms: Optional[int] = None
        #: why the connection cannot be authenticated (state ``failed`` before any request)
        self.failure = ""
        #: the SaslAuthenticate version the client authenticated with (v1+: it can
        #: re-authenticate, KIP-368), and whether a re-authentication is under way
        self.authenticate_version = -1
        self.reauthenticating = False
        #: authenticated with a delegation token (which may not ask for tokens)
        self.token_authenticated = False

    @property
    def authenticated(self) -> bool:
        return self.state == "complete"


class Security:
    """The listener's security: which SASL mechanisms it takes, the credentials, and each
    connection's :class:`ConnectionAuth`."""

    def __init__(self, config: BrokerConfig, store: Optional[CredentialStore] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.mechanisms = [m for m in config.sasl_enabled_mechanisms]
        for m in self.mechanisms:
            if m not in ("PLAIN", "OAUTHBEARER") and m not in SCRAM_MECHANISMS:
                raise ValueError(f"unsupported SASL mechanism {m!r} "
                                 "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")
        self.validator: Optional[Validator] = (validator_from_config(config)
                                               if "OAUTHBEARER" in self.mechanisms else None)
        self.ssl_mapper = SslPrincipalMapper(config.ssl_principal_mapping_rules)
        self.store = store if store is not None else CredentialStore.from_config(config)
        self._sessions: weakref.WeakKeyDictionary[Any, ConnectionAuth] = weakref.WeakKeyDictionary()
        #: called with the store after AlterUserScramCredentials changed it (persistence)
        self.on_change: Optional[Callable[[CredentialStore], None]] = None

    @property
    def sasl(self) -> bool:
        return bool(self.mechanisms)

    def session(self, channel: Any) -> ConnectionAuth:
        s = self._sessions.get(channel)
        if s is None:
            peer = getattr(channel, "peer", None) or "/127.0.0.1"
            s = ConnectionAuth(self.sasl, peer.lstrip("/"))
            if not self.sasl:
                # an SSL listener: the client certificate's subject, mapped (Kafka's
                # DefaultKafkaPrincipalBuilder); no certificate: ANONYMOUS
                try:
                    principal = peer_principal(getattr(channel, "ssl_object", None), self.ssl_mapper)
                except NoMatchingRule as exc:
                    s.state, s.failure = "failed", str(exc)
                else:
                    if principal is not None:
                        s.principal = principal
            self._sessions[channel] = s
        return s

    # -------------------------------------------------------------- gate
    def gate(self, channel: Any, frame: bytes, api_key: Optional[int]) -> bool:
        """Called for every frame before the core reads it: True when this frame was
        handled here (a legacy raw token, or a request refused before authentication, whose
        connection is then closed); False lets the core handle it."""
        if not self.sasl and getattr(channel, "ssl_object", None) is None:
            return False  # PLAINTEXT: nothing to check (the hot path)
        s = self.session(channel)
        if s.state == "complete":
            if api_key == ApiKey.SASL_HANDSHAKE and s.authenticate_version >= 1:
                return False  # a re-authentication (KIP-368), also of an expired session
            if s.expires_ms is not None and self.clock() * 1000 >= s.expires_ms:
                # KIP-368: an expired session may only re-authenticate; kproto closes it
                s.state = "failed"
                channel.close("session expired")
                return True
            return False
        if s.state == "failed":
            channel.close(f"authentication failed: {s.failure}")
            return True
        if s.state == "legacy":
            self._legacy_token(channel, s, bytes(frame))
            return True
        if s.state == "handshake" and api_key in _PRE_AUTH:
            return False
        if s.state == "authenticate" and api_key == ApiKey.SASL_AUTHENTICATE:
            return False
        name = (ApiKey(api_key).name if api_key is not None and api_key in ApiKey._value2member_map_
                else str(api_key))
        during = "SASL handshake" if s.state == "handshake" else "SASL authentication"
        s.state = "failed"
        channel.close(f"Unexpected Kafka request of type {name} during {during}.")
        return True

    def _legacy_token(self, channel: Any, s: ConnectionAuth, token: bytes) -> None:
        assert s.mechanism is not None
        try:
            out = s.mechanism.step(token)
        except SaslFailed as exc:
            s.state = "failed"
            channel.close(f"SASL authentication failed: {exc.message}")
            return
        if s.mechanism.complete:
            self._authenticated(s)
        channel.respond(len(out).to_bytes(4, "big") + out)

    def _authenticated(self, s: ConnectionAuth) -> int:
        """Completes the session; its lifetime in ms (0: unbounded), as
        SaslServerAuthenticator computes it from the credential's expiry and
        ``connections.max.reauth.ms``. A re-authentication must keep the principal."""
        assert s.mechanism is not None and s.mechanism.username is not None
        principal = f"User:{s.mechanism.username}"
        if s.reauthenticating and principal != s.principal:
            old, new = s.principal.split(":", 1), principal.split(":", 1)
            raise SaslFailed(f"Cannot change principals during re-authentication from "
                             f"{old[0]}.{old[1]}: {new[0]}.{new[1]}")
        s.state, s.principal, s.reauthenticating = "complete", principal, False
        s.token_authenticated = isinstance(s.mechanism, ScramServer) and s.mechanism.token_authenticated
        now = int(self.clock() * 1000)
        # the credential's expiry: an OAUTHBEARER token's, a delegation token's
        expiry = getattr(s.mechanism, "lifetime_ms", None)
        max_reauth = self.config.connections_max_reauth_ms
        if expiry is None and max_reauth <= 0:
            return 0
        if expiry is None:
            lifetime = max_reauth
        elif max_reauth <= 0:
            lifetime = expiry - now
        else:
            lifetime = min(expiry - now, max_reauth)
        lifetime = max(0, lifetime)
        s.expires_ms = now + lifetime
        return lifetime

    def _new_mechanism(self, name: str) -> Mechanism:
        if name == "PLAIN":
            return PlainServer(self.store)
        if name == "OAUTHBEARER":
            assert self.validator is not None
            return OAuthBearerServer(self.validator, self.clock)
        return ScramServer(name, self.store)

    # -------------------------------------------------------------- handlers
    def handshake(self, channel: Any, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.SASL_HANDSHAKE).cls
        s = self.session(channel)
        reauth = s.state == "complete" and self.sasl and s.authenticate_version >= 1 and version >= 1
        if s.state != "handshake" and not reauth:
            # a PLAINTEXT/SSL listener, or after authentication: KafkaApis answers this
            respond(cls(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[]))
            return
        if reauth and s.mechanism is not None and body.mechanism != s.mechanism.mechanism:
            s.state = "failed"
            respond(cls(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=[s.mechanism.mechanism]))
            channel.close(f"SASL mechanism '{body.mechanism}' requested by client is not supported "
                          f"for re-authentication of mechanism '{s.mechanism.mechanism}'")
            return
        s.reauthenticating = reauth
        if body.mechanism not in self.mechanisms:
            s.state = "failed"
            respond(cls(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=list(self.mechanisms)))
            channel.close(f"Unsupported SASL mechanism {body.mechanism}")
            return
        s.mechanism = self._new_mechanism(body.mechanism)
        s.state = "authenticate" if version >= 1 else "legacy"
        respond(cls(error_code=0, mechanisms=list(self.mechanisms)))

    def authenticate(self, channel: Any, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.SASL_AUTHENTICATE).cls
        s = self.session(channel)
        if s.state != "authenticate" or s.mechanism is None:
            respond(cls(error_code=ErrorCode.ILLEGAL_SASL_STATE, error_message=
                        "SaslAuthenticate request received after successful authentication",
                        auth_bytes=b""))
            return
        try:
            out = s.mechanism.step(bytes(body.auth_bytes))
            lifetime = self._authenticated(s) if s.mechanism.complete else 0
        except SaslUnanswered as exc:
            s.state = "failed"
            channel.close(f"SASL authentication failed: {exc.message}")
            return
        except SaslFailed as exc:
            s.state = "failed"
            message = exc.message
            if s.reauthenticating:  # Kafka's generic failure names the re-authentication
                message = message.replace("failed during authentication", "failed during re-authentication")
            respond(cls(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message,
                        auth_bytes=b""))
            channel.close(f"SASL authentication failed: {message}")
            return
        s.authenticate_version = version
        # the schema default of a nullable string is "", and Kafka sends it
        respond(cls(error_code=0, error_message="", auth_bytes=out, session_lifetime_ms=lifetime))

    # -------------------------------------------------------------- SCRAM credential admin
    def describe_scram(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS).cls
        users: dict[str, list[tuple[str, ScramCredential]]] = {}
        for (mech, user), cred in sorted(self.store.scram.items()):
            users.setdefault(user, []).append((mech, cred))
        wanted = [u.name for u in body.users] if body.users else sorted(users)
        results = []
        for name in dict.fromkeys(wanted):
            res = cls.DescribeUserScramCredentialsResult(user=name, error_code=0, error_message=None,
                                                         credential_infos=[])
            if wanted.count(name) > 1:
                res.error_code = ErrorCode.DUPLICATE_RESOURCE
                res.error_message = f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"
            elif name not in users:
                res.error_code = ErrorCode.RESOURCE_NOT_FOUND
                res.error_message = f"Attempt to describe a user credential that does not exist: {name}"
            else:
                res.credential_infos = [cls.CredentialInfo(mechanism=SCRAM_MECHANISM_IDS[m],
                                                           iterations=c.iterations)
                                        for m, c in users[name]]
            results.append(res)
        respond(cls(error_code=0, error_message="", results=results))  # Kafka: '', not null

    def alter_scram(self, body: Any, version: int, respond: Respond) -> None:
        response, changes = scram_alterations(body, self.store.scram)
        if changes:
            self.store.apply_altered(changes)
            if self.on_change is not None:
                self.on_change(self.store)
        respond(response)


def scram_alterations(body: Any, existing: Container[tuple[str, str]]
                      ) -> tuple[Any, dict[tuple[str, str], Optional[ScramCredential]]]:
    """An AlterUserScramCredentials request checked against the ``existing`` (mechanism,
    user) credentials: its response and the changes (None: a credential deleted)."""
    cls = response_codec(ApiKey.ALTER_USER_SCRAM_CREDENTIALS).cls
    by_id = {v: k for k, v in SCRAM_MECHANISM_IDS.items()}
    names = [d.name for d in body.deletions] + [u.name for u in body.upsertions]
    errors: dict[str, tuple[int, str]] = {}
    changes: dict[tuple[str, str], Optional[ScramCredential]] = {}
    for n in names:
        if names.count(n) > 1:
            errors.setdefault(n, (ErrorCode.DUPLICATE_RESOURCE,
                                  "A user credential cannot be altered twice in the same request"))
    for d in body.deletions:
        if d.name in errors:
            continue
        mech = by_id.get(d.mechanism)
        if not d.name:
            errors[d.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif (mech, d.name) not in existing:
            errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                              "Attempt to delete a user credential that does not exist")
        else:
            changes[(mech, d.name)] = None
    for u in body.upsertions:
        if u.name in errors:
            continue
        mech = by_id.get(u.mechanism)
        if not u.name:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
        elif mech is None:
            errors[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
        elif not 4096 <= u.iterations <= 16384:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Iterations must be between "
                              "4096 and 16384" if u.iterations > 4096 else
                              "Too few iterations" if u.iterations > 0 else "Iterations must be positive")
        elif not u.salt or not u.salted_password:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty")
        else:
            changes[(mech, u.name)] = ScramCredential.from_salted(
                mech, bytes(u.salted_password), bytes(u.salt), u.iterations)
    return cls(results=[cls.AlterUserScramCredentialsResult(
        user=n, error_code=errors.get(n, (0, None))[0], error_message=errors.get(n, (0, None))[1])
        for n in dict.fromkeys(names)]), changes


_SCRAM_NAMES = {v: k for k, v in SCRAM_MECHANISM_IDS.items()}


def image_credentials(scram: Mapping[tuple[int, str], Any], keys: Optional[Iterable[tuple[int, str]]] = None
                      ) -> dict[tuple[str, str], Optional[ScramCredential]]:
    """A metadata image's SCRAM credentials ((mechanism id, user) -> its entry) by (mechanism
    name, user), as a :class:`CredentialStore` takes them; ``keys``: only these, one absent
    from the image as None (removed). Mechanisms this broker does not know are left out."""
    wanted = scram if keys is None else keys
    out: dict[tuple[str, str], Optional[ScramCredential]] = {}
    for mid, user in wanted:
        if mid in _SCRAM_NAMES:
            c = scram.get((mid, user))
            out[(_SCRAM_NAMES[mid], user)] = None if c is None else ScramCredential(
                c.salt, c.stored_key, c.server_key, c.iterations)
    return out


def scram_records(changes: Mapping[tuple[str, str], Optional[ScramCredential]],
                  have: Optional[Mapping[tuple[int, str], Any]] = None) -> list[tuple[Any, int]]:
    """The metadata records of SCRAM credential ``changes`` ((mechanism name, user) ->
    credential, None: removed): a UserScramCredentialRecord per credential, a
    RemoveUserScramCredentialRecord per removal. With ``have`` (the image's credentials),
    only what differs from it: no record for a credential already so nor for the removal of
    one that is not there."""
    from kproto.codecs import metadata_record
    from kproto.storage.metadata_image import RecordType

    put = metadata_record(RecordType.USER_SCRAM_CREDENTIAL)
    remove = metadata_record(RecordType.REMOVE_USER_SCRAM_CREDENTIAL)
    records: list[tuple[Any, int]] = []
    for (mech, user), c in changes.items():
        mid = SCRAM_MECHANISM_IDS.get(mech)
        if mid is None:
            continue
        old = have.get((mid, user)) if have is not None else None
        if c is None:
            if have is None or old is not None:
                records.append((remove(name=user, mechanism=mid), 0))
        elif have is None or old is None or (old.salt, old.stored_key, old.server_key, old.iterations) != \
                (c.salt, c.stored_key, c.server_key, c.iterations):
            records.append((put(name=user, mechanism=mid, salt=c.salt, stored_key=c.stored_key,
                                server_key=c.server_key, iterations=c.iterations), 0))
    return records
