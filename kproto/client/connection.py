"""One connection to one broker: framing, correlation, pipelining, version negotiation, SASL.

The logic is sans-I/O (:class:`ClientProtocol` turns request objects into frames and received
bytes into responses; :class:`ApiVersionTable` picks versions); :class:`Connection` is the thin
asyncio layer around it::

    conn = await Connection.open("127.0.0.1", 9092)        # ApiVersions negotiated on connect
    md = await conn.request(kproto.request(3).cls(topics=None))   # highest common version
    await conn.close()

Many requests may be in flight at once; Kafka answers them in order on one connection, so each
response must carry the correlation id of the oldest outstanding request. A request timeout
closes the connection (as Kafka's ``NetworkClient`` does): the answer may still arrive later,
and nothing after it could be trusted to line up.
"""
from __future__ import annotations

import asyncio
import ssl as _ssl
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from kproto.error_codes import error_name
from kproto.client.sasl import (OAuthBearerClient, PlainClient, SaslAuthenticationError,
                                ScramClient, sasl_client)
from kproto.codecs import message as _message_codec
from kproto.codecs import request as _request_codec
from kproto.codecs import response as _response_codec
from kproto.codecs.primitives import INT16, INT32
from kproto.errors import DecodeError, KprotoError
from kproto.framing import (DEFAULT_MAX_FRAME, FrameBuffer, RequestHeader, decode_response,
                            encode_request, response_header_version)

__all__ = [
    "KafkaConnectionError", "ConnectionClosedError", "RequestTimeoutError", "BrokerError",
    "NoCommonVersionError", "ApiVersionTable", "ClientProtocol", "Connection", "SaslConfig",
    "raise_for_error", "API_VERSIONS", "UNSUPPORTED_VERSION",
]

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
UNSUPPORTED_VERSION = 35
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
        if head.api_key == API_VERSIONS and head.version > 0 and len(frame) >= 6 \
                and INT16.unpack_from(frame, 4)[0] == UNSUPPORTED_VERSION:
            # A broker answers an ApiVersions version it does not know in v0 form (KIP-511), and
            # some (librdkafka's mock) in a malformed one: read what v0 can, else just the error.
            try:
                return decode_response(frame, API_VERSIONS, 0, size_prefix=False)[1]
            except DecodeError:
                return _response_codec(API_VERSIONS).cls(error_code=UNSUPPORTED_VERSION)
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


class Connection:
    """An asyncio connection to one broker. Create with :meth:`open`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 client_id: str | None = "kproto", request_timeout: float = 30.0,
                 max_frame: int = DEFAULT_MAX_FRAME, version_caps: Optional[dict[int, int]] = None) -> None:
        self.host, self.port = writer.get_extra_info("peername")[:2]
        self.request_timeout = request_timeout
        self._reader, self._writer = reader, writer
        self._protocol = ClientProtocol(client_id, max_frame)
        self._closed: Optional[BaseException] = None
        self.version_caps = dict(version_caps or {})
        self.versions: ApiVersionTable = ApiVersionTable({}, self.version_caps)
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, host: str, port: int, *, ssl: _ssl.SSLContext | None = None,
                   client_id: str | None = "kproto", request_timeout: float = 30.0,
                   connect_timeout: float = 10.0, sasl: SaslConfig | None = None,
                   negotiate: bool = True, version_caps: Optional[dict[int, int]] = None) -> "Connection":
        """Connect, negotiate API versions (unless ``negotiate`` is False) and authenticate.
        ``version_caps`` limits the versions used per API key (see :class:`ApiVersionTable`)."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ssl, server_hostname=host if ssl else None),
                connect_timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {e!r}") from e
        conn = cls(reader, writer, client_id=client_id, request_timeout=request_timeout,
                   version_caps=version_caps)
        try:
            if negotiate:
                await conn.negotiate_versions()
            if sasl is not None:
                await conn.authenticate(sasl)
        except BaseException:
            await conn.close()
            raise
        return conn

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._protocol.in_flight)

    async def _read_loop(self) -> None:
        error: BaseException
        try:
            while True:
                data = await self._reader.read(262144)
                if not data:
                    error = ConnectionClosedError(f"{self.host}:{self.port} closed the connection")
                    break
                for fut, result in self._protocol.feed(data):
                    if fut.done():
                        continue
                    if isinstance(result, BaseException):
                        fut.set_exception(result)
                    else:
                        fut.set_result(result)
                if self._protocol.broken is not None:
                    raise self._protocol.broken
        except asyncio.CancelledError:
            error = ConnectionClosedError("connection closed")
        except (OSError, DecodeError) as e:
            error = ConnectionClosedError(f"{self.host}:{self.port}: {e}")
            error.__cause__ = e
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        if self._closed is None:
            self._closed = error
        for pending in self._protocol.in_flight:
            if not pending.token.done():
                pending.token.set_exception(self._closed)
                pending.token.exception()  # retrieved: no "never retrieved" warning if abandoned
        self._protocol.in_flight.clear()
        self._writer.close()

    async def close(self) -> None:
        """Close the connection; outstanding requests fail with :class:`ConnectionClosedError`."""
        self._fail(ConnectionClosedError("connection closed"))
        self._read_task.cancel()
        try:
            await self._read_task
        except asyncio.CancelledError:
            pass
        try:
            await self._writer.wait_closed()
        except (OSError, _ssl.SSLError):
            pass

    def version(self, api_key: int, wanted: range | None = None) -> int:
        """The version :meth:`request` uses for ``api_key`` (see :meth:`ApiVersionTable.pick`)."""
        return self.versions.pick(api_key, wanted)

    async def request(self, body: Any, version: int | None = None, *, timeout: float | None = None) -> Any:
        """Send a request message object and return the decoded response body.

        ``version`` defaults to the highest version both sides support.
        """
        return await self.response(self.send(body, version), type(body).__name__, timeout=timeout)

    async def response(self, fut: "asyncio.Future[Any]", what: str = "request", *,
                       timeout: float | None = None) -> Any:
        """Wait for the answer behind ``fut`` (from :meth:`send`). No answer within ``timeout``
        closes the connection (later answers could no longer be trusted) and raises
        :class:`RequestTimeoutError`."""
        timeout = self.request_timeout if timeout is None else timeout
        try:
            await self._writer.drain()  # back-pressure on big requests
        except OSError:
            pass  # the read loop reports the broken connection through ``fut``
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            err = RequestTimeoutError(f"{what} to {self.host}:{self.port} got no answer in {timeout} s")
            self._fail(err)
            raise err from None

    def send(self, body: Any, version: int | None = None, *, expect_response: bool = True
             ) -> "asyncio.Future[Any]":
        """Write a request now and return a future of its response (pipelining: call several
        times before awaiting). With ``expect_response`` False (Produce with acks=0) the future
        is already done with None."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._closed is not None:
            raise ConnectionClosedError(str(self._closed)) from self._closed
        if version is None:
            version = self.versions.pick(body.API_KEY)
        frame = self._protocol.encode(body, version, fut, expect_response)
        self._writer.write(frame)
        if not expect_response:
            fut.set_result(None)
        return fut

    async def negotiate_versions(self) -> ApiVersionTable:
        """ApiVersions at our highest version; on UNSUPPORTED_VERSION retry at the broker's
        highest ApiVersions version if its answer names one, else at v0 (as Kafka clients do)."""
        codec = _request_codec(API_VERSIONS)
        ours = codec.valid_versions
        version = ours[-1]
        for _ in range(3):
            body = codec.cls(client_software_name="kproto", client_software_version="0.1.0")
            resp = await self.request(body, version)
            if resp.error_code == UNSUPPORTED_VERSION and version > 0:
                theirs = [a.max_version for a in resp.api_keys if a.api_key == API_VERSIONS]
                version = min(theirs[0], ours[-1]) if theirs and theirs[0] < version else 0
                continue
            raise_for_error(resp.error_code, "ApiVersions")
            self.versions = ApiVersionTable.from_response(resp, self.version_caps)
            return self.versions
        raise NoCommonVersionError("ApiVersions negotiation did not converge")

    async def authenticate(self, config: SaslConfig) -> None:
        """SaslHandshake (v1) then SaslAuthenticate round trips until the mechanism completes."""
        if not self.versions.supported(SASL_HANDSHAKE) or self.versions.supported(SASL_HANDSHAKE)[-1] < 1:
            raise SaslAuthenticationError("broker does not support SaslHandshake v1 (KIP-152)")
        hs = await self.request(_request_codec(SASL_HANDSHAKE).cls(mechanism=config.mechanism), 1)
        if hs.error_code:
            raise SaslAuthenticationError(
                f"mechanism {config.mechanism} refused ({error_name(hs.error_code)}); "
                f"broker offers {', '.join(hs.mechanisms)}")
        mech = config.client()
        token: bytes | None = mech.initial()
        auth_cls = _request_codec(SASL_AUTHENTICATE).cls
        while token is not None:
            resp = await self.request(auth_cls(auth_bytes=token))
            if resp.error_code:
                detail = resp.error_message or "authentication failed"
                if isinstance(mech, OAuthBearerClient) and mech.server_error:
                    detail += f"; server said {mech.server_error}"
                raise SaslAuthenticationError(f"{error_name(resp.error_code)}: {detail}")
            token = mech.step(bytes(resp.auth_bytes))
        if not mech.complete:
            raise SaslAuthenticationError("SASL exchange ended before completing")

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exc: Iterable[Any]) -> None:
        await self.close()
