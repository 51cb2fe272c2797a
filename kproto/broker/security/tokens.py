"""Delegation tokens (KIP-48), sans-I/O: CreateDelegationToken, RenewDelegationToken,
ExpireDelegationToken and DescribeDelegationToken as Kafka 4.4 answers them, over the tokens
of a :class:`~kproto.storage.metadata_image.MetadataImage`.

A token is a random id and its HMAC-SHA512 under ``delegation.token.secret.key`` (the feature
is on only when the key is set). A client authenticates with SCRAM, the token id as the user
name and the HMAC in base64 as the password, and says so with the ``tokenauth=true``
extension; its principal is the token's owner. Each change is a DelegationTokenRecord (a
new token, a new expiry) or a RemoveDelegationTokenRecord (expired at once, or swept by
:meth:`DelegationTokens.sweep` once past its expiry) of the metadata log: the handlers return
the records for the caller to write, and the response to send once they are committed.

As in Kafka: token requests are refused (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED) on a PLAINTEXT
listener, on an SSL connection without a client certificate, and on a connection that itself
authenticated with a token; the owner, the requester and the renewers may renew, expire and
describe a token (DELEGATION_TOKEN_OWNER_MISMATCH for anyone else); creating a token for another owner
takes CREATE_TOKENS on that user, describing others' tokens DESCRIBE on the token or
DESCRIBE_TOKENS on its owner.
"""
from __future__ import annotations

import hmac as _hmac
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol

from kproto.broker.security.acl import DELEGATION_TOKEN, DESCRIBE, USER, CREATE_TOKENS, DESCRIBE_TOKENS
from kproto.codecs import message as message_codec
from kproto.codecs import metadata_record
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import INT16, Uuid
from kproto.error_codes import ErrorCode
from kproto.errors import DecodeError
from kproto.javahash import hashmap_capacity, java_hash_order, java_string_hash
from kproto.schemas.api_keys import ApiKey
from kproto.storage.metadata_image import DelegationTokenEntry, RecordType

__all__ = ["token_hmac", "new_token_id", "TokenRequest", "TokenSettings", "DelegationTokens", "TOKEN_VERSIONS", "TOKEN_CHANGES",
           "encode_principal", "decode_principal"]

#: what the handlers implement (Kafka 4.4's versions)
TOKEN_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.CREATE_DELEGATION_TOKEN: (1, 3),
    ApiKey.RENEW_DELEGATION_TOKEN: (1, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (1, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (1, 3),
}

Records = list[tuple[Any, int]]
_PRINCIPAL = message_codec("DefaultPrincipalData")
#: (principal, host, operation, resource type, resource name) -> allowed
Authorize = Callable[[str, str, int, int, str], bool]


def token_hmac(token_id: str, secret: str) -> bytes:
    """The token's HMAC as Kafka's ``DelegationTokenManager.createHmac`` computes it:
    HmacSHA512 over the id's UTF-8 bytes, keyed with the secret's."""
    return _hmac.new(secret.encode("utf-8"), token_id.encode("utf-8"), "sha512").digest()


def new_token_id() -> str:
    """A token id as Kafka makes one (``Uuid.randomUuid().toString()``: 22 base64url
    characters, never starting with '-')."""
    while True:
        text = str(Uuid(os.urandom(16)))
        if not text.startswith("-"):
            return text


@dataclass(frozen=True)
class TokenRequest:
    """Who asks: ``principal`` (``User:<name>``) from ``host``; ``allowed`` is False where
    Kafka refuses token requests (a PLAINTEXT listener, SSL without a client certificate, a
    connection authenticated with a token)."""

    principal: str
    host: str
    allowed: bool


class TokenSettings(Protocol):
    """The token settings (:class:`~kproto.broker.configs.BrokerConfig`'s, a cluster
    controller's :class:`~kproto.broker.cluster.controller.ControllerConfig`'s)."""

    delegation_token_secret_key: Optional[str]
    delegation_token_max_lifetime_ms: int
    delegation_token_expiry_time_ms: int


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


class DelegationTokens:
    """The four token APIs over ``tokens`` (the metadata image's, by id); ``authorize`` is
    the authorizer's check, None without an authorizer (then everything is allowed, as
    Kafka's ``AuthHelper`` allows it); ``now_ms`` the clock."""

    def __init__(self, config: TokenSettings, authorize: Optional[Authorize],
                 now_ms: Callable[[], int]) -> None:
        self.config = config
        self.authorize = authorize
        self.now_ms = now_ms

    @property
    def enabled(self) -> bool:
        return bool(self.config.delegation_token_secret_key)

    def hmac(self, token_id: str) -> bytes:
        assert self.config.delegation_token_secret_key
        return token_hmac(token_id, self.config.delegation_token_secret_key)

    def _may(self, who: TokenRequest, op: int, rtype: int, name: str) -> bool:
        return self.authorize is None or self.authorize(who.principal, who.host, op, rtype, name)

    # -------------------------------------------------------------- create
    def create(self, who: TokenRequest, body: Any, version: int,
               tokens: Mapping[str, DelegationTokenEntry]) -> tuple[Any, Records]:
        """CreateDelegationToken: the response and the DelegationTokenRecord to write."""
        cls = response_codec(ApiKey.CREATE_DELEGATION_TOKEN).cls
        owner = who.principal
        if version >= 3 and body.owner_principal_name:
            owner = f"{body.owner_principal_type}:{body.owner_principal_name}"
        out = cls(error_code=0, issue_timestamp_ms=-1, expiry_timestamp_ms=-1, max_timestamp_ms=-1,
                  token_id="", hmac=b"")
        out.principal_type, out.principal_name = _split(owner)
        if version >= 3:
            out.token_requester_principal_type, out.token_requester_principal_name = _split(who.principal)
        renewers = [f"{r.principal_type}:{r.principal_name}" for r in body.renewers]
        if not who.allowed:
            out.error_code = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        elif owner != who.principal and not self._may(who, CREATE_TOKENS, USER, owner):
            out.error_code = ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
        elif any(r.principal_type != "User" for r in body.renewers):
            out.error_code = ErrorCode.INVALID_PRINCIPAL_TYPE
        elif not self.enabled:
            out.error_code = ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
        if out.error_code:
            return out, []
        now = self.now_ms()
        lifetime = self.config.delegation_token_max_lifetime_ms
        if body.max_lifetime_ms > 0:
            lifetime = min(lifetime, body.max_lifetime_ms)
        max_ms = now + lifetime
        expiry = min(max_ms, now + self.config.delegation_token_expiry_time_ms)
        token_id = new_token_id()
        while token_id in tokens:
            token_id = new_token_id()
        out.issue_timestamp_ms, out.expiry_timestamp_ms, out.max_timestamp_ms = now, expiry, max_ms
        out.token_id, out.hmac = token_id, self.hmac(token_id)
        entry = DelegationTokenEntry(token_id, owner, who.principal, tuple(renewers), now, max_ms, expiry)
        return out, [_record(entry)]

    # -------------------------------------------------------------- renew / expire
    def _find(self, hmac: bytes, tokens: Mapping[str, DelegationTokenEntry]) -> Optional[DelegationTokenEntry]:
        for t in tokens.values():
            if _hmac.compare_digest(self.hmac(t.token_id), hmac):
                return t
        return None

    def _change(self, api_key: int, who: TokenRequest, hmac: bytes,
                tokens: Mapping[str, DelegationTokenEntry]) -> tuple[Any, Optional[DelegationTokenEntry], int]:
        cls = response_codec(api_key).cls
        if not who.allowed:
            return cls(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=-1), None, 0
        if not self.enabled:
            return cls(error_code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, expiry_timestamp_ms=0), None, 0
        token = self._find(hmac, tokens)
        if token is None:
            return cls(error_code=ErrorCode.DELEGATION_TOKEN_NOT_FOUND, expiry_timestamp_ms=0), None, 0
        if not token.owner_or_renewer(who.principal):
            return cls(error_code=ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH, expiry_timestamp_ms=0), None, 0
        now = self.now_ms()
        if token.max_ms < now or token.expiry_ms < now:
            return cls(error_code=ErrorCode.DELEGATION_TOKEN_EXPIRED, expiry_timestamp_ms=0), None, 0
        return cls(error_code=0, expiry_timestamp_ms=0), token, now

    def renew(self, who: TokenRequest, body: Any, version: int,
              tokens: Mapping[str, DelegationTokenEntry]) -> tuple[Any, Records]:
        """RenewDelegationToken: the expiry moves to now plus the renew period (at most
        ``delegation.token.expiry.time.ms``), never past the token's maximum."""
        out, token, now = self._change(ApiKey.RENEW_DELEGATION_TOKEN, who, bytes(body.hmac), tokens)
        if token is None:
            return out, []
        period = self.config.delegation_token_expiry_time_ms
        if body.renew_period_ms > 0:
            period = min(period, body.renew_period_ms)
        out.expiry_timestamp_ms = min(token.max_ms, now + period)
        return out, [_record(_with_expiry(token, out.expiry_timestamp_ms))]

    def expire(self, who: TokenRequest, body: Any, version: int,
               tokens: Mapping[str, DelegationTokenEntry]) -> tuple[Any, Records]:
        """ExpireDelegationToken: a negative period removes the token now, otherwise its
        expiry becomes now plus the period (never past its maximum)."""
        out, token, now = self._change(ApiKey.EXPIRE_DELEGATION_TOKEN, who, bytes(body.hmac), tokens)
        if token is None:
            return out, []
        if body.expiry_time_period_ms < 0:
            out.expiry_timestamp_ms = now
            return out, [(metadata_record(RecordType.REMOVE_DELEGATION_TOKEN)(token_id=token.token_id), 0)]
        out.expiry_timestamp_ms = min(token.max_ms, now + body.expiry_time_period_ms)
        return out, [_record(_with_expiry(token, out.expiry_timestamp_ms))]

    # -------------------------------------------------------------- describe
    def describe(self, who: TokenRequest, body: Any, version: int,
                 tokens: Mapping[str, DelegationTokenEntry]) -> Any:
        """DescribeDelegationToken (served by the broker from its image): the tokens of the
        owners asked for (null: all) the principal may see, in the order of Kafka's token
        cache (a HashMap by id)."""
        cls = response_codec(ApiKey.DESCRIBE_DELEGATION_TOKEN).cls
        if not who.allowed:
            return cls(error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, tokens=[])
        if not self.enabled:
            return cls(error_code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED, tokens=[])
        owners = None if body.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in body.owners]
        if owners == []:
            return cls(error_code=0, tokens=[])
        out = []
        for token_id in java_hash_order(list(tokens), java_string_hash, hashmap_capacity(len(tokens))):
            t = tokens[token_id]
            if owners is not None and not any(t.owner_or_renewer(o) for o in owners):
                continue
            if not (t.owner_or_renewer(who.principal)
                    or self._may(who, DESCRIBE, DELEGATION_TOKEN, t.token_id)
                    or self._may(who, DESCRIBE_TOKENS, USER, t.owner)):
                continue
            d = cls.DescribedDelegationToken(issue_timestamp=t.issue_ms, expiry_timestamp=t.expiry_ms,
                                             max_timestamp=t.max_ms, token_id=t.token_id,
                                             hmac=self.hmac(t.token_id))
            d.principal_type, d.principal_name = _split(t.owner)
            if version >= 3:
                d.token_requester_principal_type, d.token_requester_principal_name = _split(t.requester)
            d.renewers = [cls.DescribedDelegationTokenRenewer(principal_type=k, principal_name=n)
                          for k, n in map(_split, t.renewers)]
            out.append(d)
        return cls(error_code=0, tokens=out)

    # -------------------------------------------------------------- expiry
    def sweep(self, tokens: Mapping[str, DelegationTokenEntry]) -> Records:
        """RemoveDelegationTokenRecords for the tokens past their expiry (Kafka's controller
        sweeps every ``delegation.token.expiry.check.interval.ms``)."""
        now = self.now_ms()
        gone = metadata_record(RecordType.REMOVE_DELEGATION_TOKEN)
        return [(gone(token_id=t.token_id), 0) for t in tokens.values() if t.expiry_ms < now]


def _with_expiry(t: DelegationTokenEntry, expiry_ms: int) -> DelegationTokenEntry:
    return DelegationTokenEntry(t.token_id, t.owner, t.requester, t.renewers, t.issue_ms, t.max_ms, expiry_ms)


def _record(t: DelegationTokenEntry) -> tuple[Any, int]:
    return (metadata_record(RecordType.DELEGATION_TOKEN)(
        owner=t.owner, requester=t.requester, renewers=list(t.renewers), issue_timestamp=t.issue_ms,
        max_timestamp=t.max_ms, expiration_timestamp=t.expiry_ms, token_id=t.token_id), 0)


#: the token changes a cluster's broker forwards to the controller in an EnvelopeRequest
TOKEN_CHANGES = (ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN, ApiKey.EXPIRE_DELEGATION_TOKEN)


def encode_principal(principal: str, token_authenticated: bool) -> bytes:
    """A principal as a forwarding broker puts it in an EnvelopeRequest (Kafka's
    ``DefaultKafkaPrincipalBuilder.serialize``: the DefaultPrincipalData version, then the
    message)."""
    kind, name = _split(principal)
    obj = _PRINCIPAL.cls(type=kind, name=name, token_authenticated=token_authenticated)
    return INT16.pack(0) + _PRINCIPAL.encode(obj, 0)


def decode_principal(data: bytes) -> tuple[str, bool]:
    """(principal, token authenticated) of :func:`encode_principal`'s bytes;
    :class:`~kproto.errors.DecodeError` when they are not that."""
    if len(data) < 2:
        raise DecodeError("principal shorter than its version", what="DefaultPrincipalData", offset=0)
    version = INT16.unpack_from(data, 0)[0]
    if version != 0:
        raise DecodeError(f"unknown DefaultPrincipalData version {version}", what="DefaultPrincipalData", offset=0)
    obj = _PRINCIPAL.decode(memoryview(data)[2:], 0)
    return f"{obj.type}:{obj.name}", bool(obj.token_authenticated)
