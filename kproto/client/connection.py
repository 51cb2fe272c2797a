"""One connection to one broker: framing, correlation, pipelining, version negotiation, SASL.

The logic is sans-I/O, in :mod:`kproto.client.protocol` (``ClientProtocol`` turns request objects
into frames and received bytes into responses; ``ApiVersionTable`` picks versions);
:class:`Connection` is the thin asyncio layer around it::

    conn = await Connection.open("127.0.0.1", 9092)        # ApiVersions negotiated on connect
    md = await conn.request(kproto.request(3).cls(topics=None))   # highest usable version
    await conn.close()

Many requests may be in flight at once; Kafka answers them in order on one connection, so each
response must carry the correlation id of the oldest outstanding request. An answer that says
the client was throttled (KIP-219) holds the connection's next requests back for that long, as
Kafka's clients do: the broker has muted the connection meanwhile anyway. A request timeout
closes the connection (as Kafka's ``NetworkClient`` does): the answer may still arrive later,
and nothing after it could be trusted to line up.

A SASL session with a lifetime (SaslAuthenticate's ``session_lifetime_ms``, KIP-368) is renewed
on the open connection as Kafka's clients renew it: at a random 85-95% of the lifetime the
client sends SaslHandshake and SaslAuthenticate again with the same mechanism (a fresh token
from an OAUTHBEARER ``token_provider``); requests made meanwhile wait until it is done.
"""
from __future__ import annotations

import asyncio
import functools
import random
import ssl as _ssl
from typing import Any, Iterable, Optional

from kproto.client.protocol import (ApiVersionTable, ClientProtocol, ConnectionClosedError,
                                    KafkaConnectionError, NoCommonVersionError,
                                    RequestTimeoutError, SaslConfig, UnsupportedVersionError,
                                    raise_for_error)
from kproto.client.sasl import OAuthBearerClient, SaslAuthenticationError
from kproto.codecs import request as _request_codec
from kproto.error_codes import ErrorCode, error_name
from kproto.errors import DecodeError
from kproto.framing import DEFAULT_MAX_FRAME
from kproto.schemas.api_keys import ApiKey

__all__ = ["Connection"]


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
        #: KIP-219: requests are held back until this loop time; those sent meanwhile wait here
        self.throttled_until = 0.0
        self._held: list[bytes] = []
        self._release: Optional[asyncio.TimerHandle] = None
        #: KIP-368: the SASL session's lifetime the broker gave (ms, 0: it lasts), how many
        #: re-authentications were done, and the one under way (requests wait for it)
        self.session_lifetime_ms = 0
        self.reauthentications = 0
        self._sasl: Optional[SaslConfig] = None
        self._reauth_timer: Optional[asyncio.TimerHandle] = None
        self._reauth_task: Optional[asyncio.Task[None]] = None
        #: requests made during a re-authentication: (body, version, future, expect_response),
        #: encoded (so numbered) once it is done, as the broker takes nothing else meanwhile
        self._waiting: list[tuple[Any, int, "asyncio.Future[Any]", bool]] = []
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def open(cls, host: str, port: int, *, ssl: _ssl.SSLContext | None = None,
                   client_id: str | None = "kproto", request_timeout: float = 30.0,
                   connect_timeout: float = 10.0, sasl: SaslConfig | None = None,
                   negotiate: bool = True, version_caps: Optional[dict[int, int]] = None,
                   cluster_id: Optional[str] = None, node_id: int = -1) -> "Connection":
        """Connect, negotiate API versions (unless ``negotiate`` is False) and authenticate.
        ``version_caps`` limits the versions used per API key (see :class:`ApiVersionTable`).
        ``cluster_id`` and ``node_id``: whom the client means to reach (see :meth:`negotiate_versions`)."""
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
                await conn.negotiate_versions(cluster_id, node_id)
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
                results = self._protocol.feed(data)
                throttle_ms = self._protocol.take_throttle()
                if throttle_ms > 0:
                    self.throttled_until = max(self.throttled_until,
                                               asyncio.get_running_loop().time() + throttle_ms / 1000.0)
                for fut, result in results:
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
        self._held.clear()
        for _, _, fut, _ in self._waiting:
            if not fut.done():
                fut.set_exception(self._closed)
                fut.exception()
        self._waiting.clear()
        if self._release is not None:
            self._release.cancel()
            self._release = None
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        self._writer.close()

    async def close(self) -> None:
        """Close the connection; outstanding requests fail with :class:`ConnectionClosedError`."""
        self._fail(ConnectionClosedError("connection closed"))
        if self._reauth_task is not None and not self._reauth_task.done():
            self._reauth_task.cancel()
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

        ``version`` defaults to the highest version the broker and kproto's client both
        support (:meth:`version`); an explicit ``version`` is sent as it is.
        """
        return await self.response(self.send(body, version), type(body).__name__, timeout=timeout)

    async def response(self, fut: "asyncio.Future[Any]", what: str = "request", *,
                       timeout: float | None = None) -> Any:
        """Wait for the answer behind ``fut`` (from :meth:`send`). No answer within ``timeout``
        closes the connection (later answers could no longer be trusted) and raises
        :class:`RequestTimeoutError`."""
        timeout = self.request_timeout if timeout is None else timeout
        # a request held back by a throttle has its whole timeout once it is out
        timeout += max(0.0, self.throttled_until - asyncio.get_running_loop().time())
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
        is already done with None (once the request is out, when it waited for a
        re-authentication)."""
        loop = asyncio.get_running_loop()
        if self._closed is not None:
            raise ConnectionClosedError(str(self._closed)) from self._closed
        if version is None:
            version = self.versions.pick(body.API_KEY)
        if self._reauth_task is not None:
            fut = loop.create_future()
            self._waiting.append((body, version, fut, expect_response))
            return fut
        return self._send(body, version, expect_response)

    def _send(self, body: Any, version: int | None, expect_response: bool) -> "asyncio.Future[Any]":
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if self._closed is not None:
            raise ConnectionClosedError(str(self._closed)) from self._closed
        if version is None:
            version = self.versions.pick(body.API_KEY)
        frame = self._protocol.encode(body, version, fut, expect_response)
        if self._held or loop.time() < self.throttled_until:
            self._held.append(frame)
            if self._release is None:
                self._release = loop.call_at(self.throttled_until, self._send_held)
        else:
            self._writer.write(frame)
        if not expect_response:
            fut.set_result(None)
        return fut

    def _send_held(self) -> None:
        """Write the requests held back by a throttle, in order, once it is over."""
        self._release = None
        if self._closed is not None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self.throttled_until:  # a later answer made it longer
            self._release = loop.call_at(self.throttled_until, self._send_held)
            return
        for frame in self._held:
            self._writer.write(frame)
        self._held.clear()

    async def negotiate_versions(self, cluster_id: Optional[str] = None, node_id: int = -1) -> ApiVersionTable:
        """ApiVersions at our highest version; on UNSUPPORTED_VERSION retry at the broker's
        highest ApiVersions version if its answer names one, else at v0 (as Kafka clients do).
        From v5 the request names the cluster and node the client means to reach when it knows
        both (as Kafka's NetworkClient does once it has metadata); a broker of another cluster
        or id answers REBOOTSTRAP_REQUIRED, raised as :class:`BrokerError`. Without them the
        negotiation starts at v4: v5 adds nothing else (its response is v4's), and brokers that
        close the connection on an ApiVersions version they do not know (instead of KIP-511's
        v0 answer) keep working."""
        codec = _request_codec(ApiKey.API_VERSIONS)
        ours = self.versions.ours(ApiKey.API_VERSIONS)
        named = cluster_id is not None and node_id >= 0
        version = ours[-1] if named else min(ours[-1], 4)
        for _ in range(3):
            body = codec.cls(client_software_name="kproto", client_software_version="0.1.0")
            if version >= 5 and cluster_id is not None and node_id >= 0:
                body.cluster_id, body.node_id = cluster_id, node_id
            resp = await self.request(body, version)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
                theirs = [a.max_version for a in resp.api_keys if a.api_key == ApiKey.API_VERSIONS]
                version = min(theirs[0], ours[-1]) if theirs and theirs[0] < version else 0
                continue
            raise_for_error(resp.error_code, "ApiVersions")
            self.versions = ApiVersionTable.from_response(resp, self.version_caps)
            return self.versions
        raise NoCommonVersionError("ApiVersions negotiation did not converge")

    async def authenticate(self, config: SaslConfig) -> None:
        """SaslHandshake (v1) then SaslAuthenticate round trips until the mechanism completes.
        A session with a lifetime is renewed on this connection before it ends (KIP-368)."""
        await self._authenticate(config)
        self._sasl = config
        self._schedule_reauthentication()

    def _schedule_reauthentication(self) -> None:
        # Kafka's clients: at a random 85-95% of the session's lifetime
        if self.session_lifetime_ms > 0 and self._closed is None:
            delay = self.session_lifetime_ms * random.uniform(0.85, 0.95) / 1000.0
            self._reauth_timer = asyncio.get_running_loop().call_later(delay, self._begin_reauthentication)

    def _begin_reauthentication(self) -> None:
        self._reauth_timer = None
        if self._closed is None and self._sasl is not None:
            self._reauth_task = asyncio.get_running_loop().create_task(self._reauthenticate(self._sasl))

    async def _reauthenticate(self, config: SaslConfig) -> None:
        try:
            await self._authenticate(config)
        except Exception as exc:  # noqa: BLE001 - refused, lost, or a token provider failing
            # the session cannot be renewed: the connection is of no further use
            if self._closed is None:
                err = ConnectionClosedError(f"re-authentication with {self.host}:{self.port} failed: {exc}")
                err.__cause__ = exc
                self._fail(err)
            return
        finally:
            self._reauth_task = None
        self.reauthentications += 1
        self._schedule_reauthentication()
        waiting, self._waiting = self._waiting, []
        for body, version, fut, expect_response in waiting:
            try:
                sent = self._send(body, version, expect_response)
            except Exception as exc:  # noqa: BLE001 - the caller's future carries it
                fut.set_exception(exc)
                continue
            sent.add_done_callback(functools.partial(_chain, fut))

    async def _authenticate(self, config: SaslConfig) -> None:
        async def ask(body: Any, version: int | None = None) -> Any:
            return await self.response(self._send(body, version, True), type(body).__name__)
        try:
            version = self.version(ApiKey.SASL_HANDSHAKE)  # v1 (KIP-152), the client's only one
        except UnsupportedVersionError:
            raise SaslAuthenticationError("broker does not support SaslHandshake v1 (KIP-152)") from None
        hs = await ask(_request_codec(ApiKey.SASL_HANDSHAKE).cls(mechanism=config.mechanism), version)
        if hs.error_code:
            raise SaslAuthenticationError(
                f"mechanism {config.mechanism} refused ({error_name(hs.error_code)}); "
                f"broker offers {', '.join(hs.mechanisms)}")
        mech = config.client()
        token: bytes | None = mech.initial()
        auth_cls = _request_codec(ApiKey.SASL_AUTHENTICATE).cls
        resp = None
        while token is not None:
            resp = await ask(auth_cls(auth_bytes=token))
            if resp.error_code:
                detail = resp.error_message or "authentication failed"
                if isinstance(mech, OAuthBearerClient) and mech.server_error:
                    detail += f"; server said {mech.server_error}"
                raise SaslAuthenticationError(f"{error_name(resp.error_code)}: {detail}")
            token = mech.step(bytes(resp.auth_bytes))
        if not mech.complete:
            raise SaslAuthenticationError("SASL exchange ended before completing")
        # SaslAuthenticate v1+ says how long the session lasts (v0: no lifetime)
        self.session_lifetime_ms = max(0, getattr(resp, "session_lifetime_ms", 0) or 0)

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exc: Iterable[Any]) -> None:
        await self.close()


def _chain(fut: "asyncio.Future[Any]", done: "asyncio.Future[Any]") -> None:
    """Hand a request's answer to the future its caller got while it waited."""
    if fut.done():
        return
    if done.cancelled():
        fut.cancel()
        return
    exc = done.exception()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(done.result())
