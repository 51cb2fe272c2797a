"""The client side of the Kafka protocol on one connection, sans-I/O: request objects in,
frames out; bytes in, responses out, in correlation order; version negotiation
(:class:`ApiVersionTable`), SASL settings, and the errors a broker answers with. The asyncio
:class:`~kproto.client.connection.Connection` drives it."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Optional

from kproto.client.sasl import OAuthBearerClient, PlainClient, ScramClient, sasl_client
from kproto.codecs import message as _message_codec
from kproto.codecs import request as _request_codec
from kproto.codecs import response as _response_codec
from kproto.codecs.primitives import INT16, INT32
from kproto.error_codes import error_name
from kproto.errors import DecodeError, KprotoError
from kproto.framing import (DEFAULT_MAX_FRAME, FrameBuffer, RequestHeader, decode_response,
                            encode_request, response_header_version)
from kproto.schemas.api_keys import ApiKey
from kproto.error_codes import ErrorCode

__all__ = [
    "KafkaConnectionError", "ConnectionClosedError", "RequestTimeoutError", "BrokerError",
    "NoCommonVersionError", "ApiVersionTable", "ClientProtocol", "SaslConfig",
    "raise_for_error",
]

_INT32_MAX = 2**31 - 1
_RESPONSE_HEADER = _message_codec("ResponseHeader")


class KafkaConnectionError(KprotoError):
    """The connection to a broker failed; requests in flight on it are lost."""


class ConnectionClosedError(KafkaConnectionError):
    """The connection was closed (by us, by the broker, or after an error)."""


class RequestTimeoutError(KafkaConnectionError):
    """No response within the request timeout; the connection was closed."""


class BrokerError(KprotoError):
    """A broker answered with a non-zero error code."""

    def __init__(self, code: int, what: str = "", message: str | None = None) -> None:
        self.code = code
        self.name = error_name(code)
        self.what = what
        detail = f" ({message})" if message else ""
        super().__init__(f"{what + ': ' if what else ''}{self.name} [{code}]{detail}")


class NoCommonVersionError(KprotoError):
    """The broker and kproto share no version of an API."""


def raise_for_error(code: int, what: str = "", message: str | None = None) -> None:
    """Raise :class:`BrokerError` unless ``code`` is 0 (NONE)."""
    if code:
        raise BrokerError(code, what, message)


class ApiVersionTable:
    """The versions a broker advertised, and the highest version both sides support per API.

    ``caps`` (API key -> highest version to use) works around brokers that advertise versions
    they do not handle correctly.
    """

    def __init__(self, ranges: dict[int, range], caps: Optional[dict[int, int]] = None) -> None:
        #: API key -> versions the broker supports
        self.broker = ranges
        self.caps = dict(caps or {})

    @classmethod
    def from_response(cls, resp: Any, caps: Optional[dict[int, int]] = None) -> "ApiVersionTable":
        return cls({a.api_key: range(a.min_version, a.max_version + 1) for a in resp.api_keys}, caps)

    def supported(self, api_key: int) -> range:
        """Versions both sides support (may be empty)."""
        try:
            ours = _request_codec(api_key).valid_versions
        except KeyError:
            return range(0)
        theirs = self.broker.get(api_key, range(0))
        stop = min(ours.stop, theirs.stop, self.caps.get(api_key, _INT32_MAX) + 1)
        return range(max(ours.start, theirs.start), stop)

    def pick(self, api_key: int, wanted: range | None = None) -> int:
        """The highest common version, within ``wanted`` when given (Kafka's
        ``NodeApiVersions.latestUsableVersion``)."""
        both = self.supported(api_key)
        if wanted is not None:
            both = range(max(both.start, wanted.start), min(both.stop, wanted.stop))
        if not both:
            raise NoCommonVersionError(
                f"API key {api_key}: broker supports {_fmt(self.broker.get(api_key))}, kproto "
                f"{_fmt(_request_codec(api_key).valid_versions) if _known(api_key) else 'none'}"
                + (f", wanted {_fmt(wanted)}" if wanted is not None else ""))
        return both[-1]


def _known(api_key: int) -> bool:
    try:
        _request_codec(api_key)
        return True
    except KeyError:
        return False


def _fmt(r: range | None) -> str:
    return "none" if not r else f"{r.start}-{r[-1]}"


@dataclass
class _InFlight:
    correlation_id: int
    api_key: int
    version: int
    token: Any


class ClientProtocol:
    """Sans-I/O request/response bookkeeping for one connection.

    :meth:`encode` assigns the next correlation id and returns the frame to write;
    :meth:`feed` takes received bytes and returns ``(token, result)`` pairs in request order,
    where ``result`` is the decoded response body or the :class:`DecodeError` met decoding it.
    A response whose correlation id is not the oldest outstanding one breaks the stream
    (:attr:`broken`): the connection must be dropped.
    """

    def __init__(self, client_id: str | None = "kproto", max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.client_id = client_id
        self._next_id = 0
        self._frames = FrameBuffer(max_frame)
        self.in_flight: deque[_InFlight] = deque()
        #: The error that made the byte stream unusable, once one did.
        self.broken: Optional[DecodeError] = None

    def encode(self, body: Any, version: int, token: Any = None, expect_response: bool = True) -> bytes:
        """The size-prefixed frame of ``body`` at ``version``; ``token`` comes back with the answer."""
        cid = self._next_id
        self._next_id = 0 if cid == _INT32_MAX else cid + 1
        header = RequestHeader(request_api_key=body.API_KEY, request_api_version=version,
                               correlation_id=cid, client_id=self.client_id)
        frame = encode_request(header, body)
        if expect_response:
            self.in_flight.append(_InFlight(cid, body.API_KEY, version, token))
        return frame

    def feed(self, data: bytes) -> list[tuple[Any, Any]]:
        """Received bytes -> ``(token, response body or DecodeError)`` for each complete frame.

        A frame that breaks the stream (bad size, unexpected correlation id) sets :attr:`broken`;
        the responses before it are still returned, and any later call raises that error.
        """
        if self.broken is not None:
            raise self.broken
        out = []
        try:
            self._frames.feed(data)
            for frame in self._frames.frames():
                out.append(self._match(frame))
        except DecodeError as e:
            self.broken = e
        return out

    def _match(self, frame: bytes) -> tuple[Any, Any]:
        if len(frame) < 4:
            raise DecodeError("response frame shorter than a correlation id", what="response")
        cid, = INT32.unpack_from(frame, 0)
        if not self.in_flight:
            raise DecodeError(f"response with correlation id {cid} but no request in flight",
                              what="response")
        head = self.in_flight[0]
        if cid != head.correlation_id:
            raise DecodeError(f"response correlation id {cid}, expected {head.correlation_id}",
                              what="response")
        self.in_flight.popleft()
        try:
            return head.token, self._decode(frame, head)
        except DecodeError as e:
            return head.token, e

    @staticmethod
    def _decode(frame: bytes, head: _InFlight) -> Any:
        if head.api_key == ApiKey.API_VERSIONS and head.version > 0 and len(frame) >= 6 \
                and INT16.unpack_from(frame, 4)[0] == ErrorCode.UNSUPPORTED_VERSION:
            # A broker answers an ApiVersions version it does not know in v0 form (KIP-511), and
            # some (librdkafka's mock) in a malformed one: read what v0 can, else just the error.
            try:
                return decode_response(frame, ApiKey.API_VERSIONS, 0, size_prefix=False)[1]
            except DecodeError:
                return _response_codec(ApiKey.API_VERSIONS).cls(error_code=ErrorCode.UNSUPPORTED_VERSION)
        # Bytes after the body are ignored, as Kafka's clients ignore them (librdkafka's mock
        # appends a stray byte to some flexible responses).
        _, pos = _RESPONSE_HEADER.decode_from(frame, 0, response_header_version(head.api_key, head.version))
        return _response_codec(head.api_key).decode_from(frame, pos, head.version)[0]


@dataclass
class SaslConfig:
    """SASL credentials: ``mechanism`` is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (with
    ``username`` and ``password``), or OAUTHBEARER (with ``token`` and optional ``extensions``)."""

    mechanism: str
    username: str = ""
    password: str = ""
    token: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.client()  # checks the mechanism and its credentials now, not after connecting

    def client(self) -> PlainClient | ScramClient | OAuthBearerClient:
        """A fresh state machine for one exchange."""
        if self.mechanism == "OAUTHBEARER":
            if self.token is None:
                raise ValueError("OAUTHBEARER needs a token")
            return sasl_client(self.mechanism, token=self.token, extensions=self.extensions)
        return sasl_client(self.mechanism, self.username, self.password)
