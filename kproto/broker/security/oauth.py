"""SASL OAUTHBEARER on the broker's side, as Kafka's ``OAuthBearerSaslServer`` runs it.

The client's one message (RFC 7628: GS2 header, ``auth=Bearer <token>``, extensions) is parsed
as ``OAuthBearerClientInitialResponse`` does; the token is checked by one of two validators:

- :class:`UnsecuredValidator`, Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler``: an
  unsigned JWT (``alg`` ``none``) whose principal claim (``sub`` unless configured) is a
  string, with ``exp`` (and ``iat`` if present) checked against the clock and the required
  scope present. For tests and development, as in Kafka.
- :class:`JwksValidator`, Kafka's ``BrokerJwtValidator`` with its keys read from a local JWKS
  file: the signature (RS256/384/512, PS256/384/512, ES256/384/512) checked with the key of the
  token's ``kid``, ``exp`` and ``iat`` required, ``nbf``, audience and issuer checked.

A token refused is answered, as Kafka does, with a JSON error document
(``{"status":"invalid_token"}``) in a successful SaslAuthenticate; the client answers ``^A``
and the exchange then fails with that document as the error message. The session lifetime
(KIP-368) is the token's ``exp``.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from kproto.broker.configs import BrokerConfig

__all__ = ["Token", "TokenRefused", "TokenUnanswered", "UnsecuredValidator", "JwksValidator",
           "Validator", "validator_from_config", "parse_initial_response"]

_SEP = "\x01"
# the SASLNAME of RFC 5802 (Java: [\x01-\x7F&&[^=,]])
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_KVPAIRS = rf"(?:{_KEY}={_VALUE}{_SEP})*"
_INITIAL = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,{_SEP}(?P<kvpairs>{_KVPAIRS}){_SEP}")
_AUTH = re.compile(r"(?P<scheme>\w+)[ ]+(?P<token>[-_~+/.a-zA-Z0-9]+(?:=*))", re.ASCII)


class InvalidMessage(ValueError):
    """The client's message is not an OAUTHBEARER initial response (Kafka: a SaslException,
    answered with the generic authentication failure)."""


class UnansweredMessage(InvalidMessage):
    """A message Kafka's parser fails on with an unexpected exception: a well-formed ``auth``
    whose scheme is not Bearer (its error message reads a group the matcher lacks); Kafka then
    closes the connection without an answer."""


def parse_initial_response(data: bytes) -> tuple[str, str, dict[str, str]]:
    """(authzid, token, extensions) of a client's initial response."""
    text = data.decode("utf-8", "replace")
    m = _INITIAL.fullmatch(text)
    if m is None:
        raise InvalidMessage("Invalid OAUTHBEARER client first message")
    # Utils.parseMap: split on the separator, then each pair at its first '='
    props: dict[str, str] = {}
    for pair in m.group("kvpairs").split(_SEP):
        if pair:
            k, _, v = pair.partition("=")
            props[k] = v
    auth = props.pop("auth", None)
    if auth is None:
        raise InvalidMessage("Invalid OAUTHBEARER client first message: 'auth' not specified")
    for k, v in props.items():
        if not re.fullmatch(_KEY, k):
            raise InvalidMessage(f"Extension name {k} is invalid")
        if not re.fullmatch(_VALUE, v):
            raise InvalidMessage(f"Extension value ({v}) for extension {k} is invalid")
    a = _AUTH.fullmatch(auth)
    if a is None:
        raise InvalidMessage("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if a.group("scheme").lower() != "bearer":
        raise UnansweredMessage("Invalid scheme in OAUTHBEARER client first message")
    return m.group("authzid") or "", a.group("token"), props


# ------------------------------------------------------------------ tokens

@dataclass(frozen=True)
class Token:
    """A validated token: whose it is, until when (ms since the epoch), its scope and claims."""

    principal: str
    lifetime_ms: int
    scope: frozenset[str] = frozenset()
    claims: dict[str, Any] = field(default_factory=dict, compare=False)


class TokenRefused(Exception):
    """The validator refused the token: ``status`` and ``scope`` go into the error document."""

    def __init__(self, reason: str, status: str = "invalid_token", scope: Optional[str] = None) -> None:
        super().__init__(reason)
        self.reason, self.status, self.scope = reason, status, scope


class TokenUnanswered(Exception):
    """A token Kafka's validator fails on with an unexpected exception (an unsecured JWS
    header without ``alg``: a NullPointerException); Kafka closes the connection unanswered."""


class Validator(Protocol):
    def validate(self, token: str, now_ms: int) -> Token: ...


def _b64url(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenRefused("malformed Base64 URL encoded value") from None


def _json_part(part: str) -> dict[str, Any]:
    try:
        doc = json.loads(_b64url(part))
    except (ValueError, UnicodeDecodeError):
        raise TokenRefused("malformed JSON") from None
    if not isinstance(doc, dict):
        raise TokenRefused("malformed JSON")
    return doc


def _number(claims: dict[str, Any], name: str) -> Optional[float]:
    v = claims.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TokenRefused(f"The '{name}' claim was not of type Number: {type(v).__name__}")
    return float(v)


def _scope(claims: dict[str, Any], name: str) -> frozenset[str]:
    v = claims.get(name)
    if isinstance(v, str):
        return frozenset(s for s in v.split(" ") if s.strip())
    if isinstance(v, list):
        return frozenset(s for s in v if isinstance(s, str) and s.strip())
    return frozenset()


#: what Java's String.trim() removes
_JAVA_BLANK = "".join(map(chr, range(33)))


def _java_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(items) + "]"


class UnsecuredValidator:
    """Kafka's ``OAuthBearerUnsecuredValidatorCallbackHandler`` (options
    ``unsecuredValidatorPrincipalClaimName``, ``...ScopeClaimName``, ``...RequiredScope``,
    ``...AllowableClockSkewMs``)."""

    def __init__(self, principal_claim: str = "sub", scope_claim: str = "scope",
                 required_scope: tuple[str, ...] = (), clock_skew_ms: int = 0) -> None:
        if clock_skew_ms < 0:
            raise ValueError(f"Allowable clock skew must not be negative: {clock_skew_ms}")
        self.principal_claim, self.scope_claim = principal_claim, scope_claim
        self.required_scope, self.clock_skew_ms = tuple(required_scope), clock_skew_ms

    def validate(self, token: str, now_ms: int) -> Token:
        if ".." in token:
            raise TokenRefused("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise TokenRefused("Unsecured JWS compact serializations must have 3 dot-separated "
                               "Base64URL-encoded values")
        header, claims = _json_part(parts[0]), _json_part(parts[1])
        if header.get("alg") is None:
            raise TokenUnanswered("JWS header must have an Algorithm value")
        if header.get("alg") != "none":
            raise TokenRefused("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise TokenRefused("Unsecured JWS must not contain a digital signature")
        exp, iat = _number(claims, "exp"), _number(claims, "iat")
        principal = claims.get(self.principal_claim)
        if principal is None:
            raise TokenRefused(f"Required claim missing: {self.principal_claim}")
        if not isinstance(principal, str):
            raise TokenRefused(f"The {self.principal_claim} claim had the incorrect type: "
                               f"{type(principal).__name__}")
        if not principal.strip(_JAVA_BLANK):
            raise TokenRefused(f"No principal name in JWT claim: {self.principal_claim}")
        skew = self.clock_skew_ms
        if iat is not None and iat * 1000 > now_ms + skew:
            raise TokenRefused(f"The Issued At value ({iat:f} seconds) was after the indicated "
                               f"time ({now_ms} ms) plus allowable clock skew ({skew} ms)")
        if exp is None:
            raise TokenRefused("Required claim missing: exp")
        if now_ms - skew >= exp * 1000:
            raise TokenRefused(f"The indicated time ({now_ms} ms) minus allowable clock skew "
                               f"({skew} ms) was on or after the Expiration Time value ({exp:f} seconds)")
        if iat is not None and exp <= iat:
            raise TokenRefused(f"The Expiration Time time ({exp:f} seconds) was not after the "
                               f"Issued At time ({iat:f} seconds)")
        scope = _scope(claims, self.scope_claim)
        for wanted in self.required_scope:
            if wanted not in scope:
                raise TokenRefused(f"The provided scope was missing a required scope ({wanted})",
                                   "insufficient_scope", _java_list(self.required_scope))
        return Token(principal, int(exp * 1000), scope, claims)


# ------------------------------------------------------------------ JWKS

def _int(b64: str) -> int:
    return int.from_bytes(_b64url(b64), "big")


class JwksValidator:
    """Kafka's ``BrokerJwtValidator`` with the keys of a local JWKS document: a signed JWT
    (never ``alg`` none) verified with the key named by its ``kid``; ``exp`` and ``iat``
    required, ``nbf`` honoured, ``clock_skew_ms`` allowed; the audience (one of ``audience``)
    and ``issuer`` checked when configured; the principal is the ``sub`` claim (or
    ``principal_claim``)."""

    _HASHES = {"256": "SHA256", "384": "SHA384", "512": "SHA512"}

    def __init__(self, jwks: dict[str, Any], *, principal_claim: str = "sub",
                 scope_claim: str = "scope", clock_skew_ms: int = 30_000,
                 audience: tuple[str, ...] = (), issuer: Optional[str] = None) -> None:
        self.keys = [k for k in jwks.get("keys", []) if isinstance(k, dict)]
        self.principal_claim, self.scope_claim = principal_claim, scope_claim
        self.clock_skew_ms, self.audience, self.issuer = clock_skew_ms, tuple(audience), issuer

    @classmethod
    def from_file(cls, path: str, **kwargs: Any) -> JwksValidator:
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f), **kwargs)

    def _verify(self, header: dict[str, Any], signed: bytes, signature: bytes) -> None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

        alg = header.get("alg")
        if not isinstance(alg, str) or alg[:2] not in ("RS", "PS", "ES") or alg[2:] not in self._HASHES:
            raise TokenRefused(f"algorithm {alg!r} not allowed")
        h = getattr(hashes, self._HASHES[alg[2:]])()
        kty = "EC" if alg.startswith("ES") else "RSA"
        kid = header.get("kid")
        candidates = [k for k in self.keys if k.get("kty") == kty and (kid is None or k.get("kid") == kid)
                      and k.get("alg", alg) == alg and k.get("use", "sig") == "sig"]
        if not candidates:
            raise TokenRefused(f"no key in the JWKS for kid {kid!r} and algorithm {alg}")
        for jwk in candidates:
            try:
                if kty == "RSA":
                    rsa_key = rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
                    pad = (padding.PKCS1v15() if alg.startswith("RS") else
                           padding.PSS(padding.MGF1(h), h.digest_size))
                    rsa_key.verify(signature, signed, pad, h)
                else:
                    curve = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(),
                             "P-521": ec.SECP521R1()}[jwk["crv"]]
                    ec_key = ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]),
                                                           curve).public_key()
                    half = len(signature) // 2
                    der = utils.encode_dss_signature(int.from_bytes(signature[:half], "big"),
                                                     int.from_bytes(signature[half:], "big"))
                    ec_key.verify(der, signed, ec.ECDSA(h))
                return
            except (InvalidSignature, KeyError, ValueError, TypeError):
                continue
        raise TokenRefused("JWT signature verification failed")

    def validate(self, token: str, now_ms: int) -> Token:
        parts = token.split(".")
        if len(parts) != 3 or not all(parts):
            raise TokenRefused("a signed JWT has three non-empty dot-separated parts")
        header, claims = _json_part(parts[0]), _json_part(parts[1])
        self._verify(header, f"{parts[0]}.{parts[1]}".encode("ascii"), _b64url(parts[2]))
        skew = self.clock_skew_ms
        exp, iat, nbf = _number(claims, "exp"), _number(claims, "iat"), _number(claims, "nbf")
        if exp is None:
            raise TokenRefused("No Expiration Time (exp) claim present.")
        if iat is None:
            raise TokenRefused("No Issued At (iat) claim present.")
        if now_ms - skew >= exp * 1000:
            raise TokenRefused("The JWT is no longer valid (exp)")
        if exp <= iat:  # Kafka refuses these (seen against 4.4.0)
            raise TokenRefused("The Expiration Time was not after the Issued At time")
        if nbf is not None and now_ms + skew < nbf * 1000:
            raise TokenRefused("The JWT is not yet valid (nbf)")
        if self.issuer is not None and claims.get("iss") != self.issuer:
            raise TokenRefused(f"Issuer (iss) claim value ({claims.get('iss')}) doesn't match "
                               f"expected value of {self.issuer}")
        if self.audience:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(a in self.audience for a in auds):
                raise TokenRefused("Audience (aud) claim not acceptable")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise TokenRefused(f"{self.principal_claim} value must be non-null and non-empty")
        return Token(principal, int(math.floor(exp * 1000)), _scope(claims, self.scope_claim), claims)


_UNVERIFIED = ('The OAuth validator for the broker requires "{0}" to be configured so that the '
               'token\'s {1} claim can be verified, but it was not set. Set "{0}" to {2}, or set '
               '"{3}" to true to accept tokens regardless of their {4}.')


def validator_from_config(config: BrokerConfig) -> Validator:
    """The validator a broker's settings name. With a JWKS, as Kafka's broker validator: an
    expected audience and issuer are required unless ``oauthbearer_allow_unverified_*`` says
    otherwise (ValueError, Kafka's ConfigException message)."""
    if config.oauthbearer_jwks_file:
        if not config.oauthbearer_expected_audience and not config.oauthbearer_allow_unverified_audience:
            raise ValueError(_UNVERIFIED.format(
                "sasl.oauthbearer.expected.audience", 'audience ("aud")',
                "the audience(s) that identify this cluster",
                "sasl.oauthbearer.allow.unverified.audience", "audience"))
        if config.oauthbearer_expected_issuer is None and not config.oauthbearer_allow_unverified_issuer:
            raise ValueError(_UNVERIFIED.format(
                "sasl.oauthbearer.expected.issuer", 'issuer ("iss")',
                "the issuer URL of the OAuth/OIDC provider that signs the tokens",
                "sasl.oauthbearer.allow.unverified.issuer", "issuer"))
        return JwksValidator.from_file(
            config.oauthbearer_jwks_file, principal_claim=config.oauthbearer_sub_claim_name,
            scope_claim=config.oauthbearer_scope_claim_name,
            clock_skew_ms=(30_000 if config.oauthbearer_clock_skew_ms is None
                           else config.oauthbearer_clock_skew_ms),
            audience=config.oauthbearer_expected_audience, issuer=config.oauthbearer_expected_issuer)
    return UnsecuredValidator(config.oauthbearer_sub_claim_name, config.oauthbearer_scope_claim_name,
                              config.oauthbearer_required_scope, config.oauthbearer_clock_skew_ms or 0)


# ------------------------------------------------------------------ the mechanism

def error_document(status: str, scope: Optional[str] = None,
                   openid_configuration: Optional[str] = None) -> str:
    """Kafka's JSON error response (its exact spacing)."""
    doc = f'{{"status":"{status}"'
    if scope is not None:
        doc += f', "scope":"{scope}"'
    if openid_configuration is not None:
        doc += f', "openid-configuration":"{openid_configuration}"'
    return doc + "}"
