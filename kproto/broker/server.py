"""The asyncio layer: TCP connections in front of :class:`~kproto.broker.core.BrokerCore`.

Each connection reads frames and hands them to the core one at a time (Kafka mutes a
connection while its request is in flight, so answers keep request order); the timer is
woken at its next deadline by the event loop, so a waiting fetch answers at once when data
arrives and at ``max_wait_ms`` otherwise. A bad frame closes only its own connection.

    async with Broker(tmp_path) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
"""
from __future__ import annotations

import asyncio
import logging
import os
import ssl as _ssl
from typing import Any, Optional

from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore, ControlHandle, HookAction
from kproto.broker.log import LogConfig
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.errors import DecodeError
from kproto.framing import DEFAULT_MAX_FRAME, FrameBuffer

__all__ = ["Broker"]

log = logging.getLogger("kproto.broker")

_LOG_CONFIGS = {"segment_bytes", "index_interval_bytes", "segment_index_bytes",
                "message_timestamp_type", "timestamp_before_max_ms", "timestamp_after_max_ms",
                "max_message_bytes"}


# Produce, Fetch, ListOffsets, Metadata, OffsetFetch, FindCoordinator, ApiVersions, InitProducerId
_HOT_APIS = (0, 1, 2, 3, 9, 10, 18, 22)


class _Connection:
    """A channel of the core bound to one socket."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"/{peer[0]}" if isinstance(peer, tuple) else "/127.0.0.1"
        self.done: Optional[asyncio.Future[None]] = None
        self.closed: Optional[str] = None

    def respond(self, frame: Optional[bytes]) -> None:
        if self.closed is None and frame is not None:
            self.writer.write(frame)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def close(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason
            log.info("closing connection %s: %s", self.writer.get_extra_info("peername"), reason)
            self.writer.close()
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


class Broker:
    """A single-node Kafka broker on ``host:port`` (port 0: a free one) over ``data_dir``.

    ``config``: :class:`~kproto.broker.configs.BrokerConfig` fields (``node_id``,
    ``auto_create_topics``, ``num_partitions``, ...) and the log defaults of
    :class:`~kproto.broker.log.LogConfig` (``segment_bytes``, ``message_timestamp_type``, ...).
    ``ssl_context`` (a server-side :class:`ssl.SSLContext`) makes the listener SSL, or SASL_SSL
    with ``sasl_enabled_mechanisms``; security settings are in :mod:`kproto.broker.auth` and
    :mod:`kproto.broker.acl` (``sasl_users``, ``authorizer``, ``super_users``).
    """

    def __init__(self, data_dir: str | os.PathLike[str], port: int = 0, *, host: str = "127.0.0.1",
                 max_frame: Optional[int] = None, ssl_context: Optional[_ssl.SSLContext] = None,
                 **config: Any) -> None:
        log_cfg = {k: config.pop(k) for k in list(config) if k in _LOG_CONFIGS}
        if max_frame is not None:  # the older name of socket.request.max.bytes
            config["socket_request_max_bytes"] = max_frame
        self.config = BrokerConfig(host=host, port=port, log=LogConfig(**log_cfg), **config)
        self.data_dir = os.fspath(data_dir)
        self.ssl_context = ssl_context
        # socket.request.max.bytes: a frame announcing more is refused and its connection
        # closed before its bytes are read, as Kafka's NetworkReceive does
        self.max_frame = self.config.socket_request_max_bytes or DEFAULT_MAX_FRAME
        self.core: Optional[BrokerCore] = None
        self._server: Optional[asyncio.AbstractServer] = None
        self._wakeup: Optional[asyncio.TimerHandle] = None
        self._wakeup_at: Optional[int] = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[_Connection] = set()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> Broker:
        self._server = await asyncio.start_server(self._serve, self.config.host, self.config.port,
                                                  ssl=self.ssl_context)
        self.config.port = self._server.sockets[0].getsockname()[1]
        # the core opens (and recovers) the log directory once the advertised port is known
        self.core = BrokerCore(self.data_dir, self.config)
        self._warm(list(_HOT_APIS))
        return self

    def _warm(self, keys: list[int]) -> None:
        """Compile the codecs of the APIs a client calls first and most (request decoder and
        response encoder at the newest advertised version), one per turn of the loop while the
        client connects: compiled lazily, Produce's cost its first request ~10 ms. Process-wide
        caches: only the first broker of a process pays."""
        core = self.core
        if core is None or not keys:
            return
        key = keys.pop()
        rng = core.api_versions().get(key)
        if rng is not None:
            request_codec(key).source(rng[1])
            response_codec(key).source(rng[1])
        asyncio.get_running_loop().call_soon(self._warm, keys)

    async def close(self, clean: bool = True) -> None:
        """Stop accepting, drop the connections, close the logs (``clean``: checkpoints and
        the clean-shutdown marker, as a SIGTERM'd Kafka broker leaves them)."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.close("broker shutting down")
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._wakeup is not None:
            self._wakeup.cancel()
        if self.core is not None:
            self.core.close(clean)
            self.core = None

    async def __aenter__(self) -> Broker:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def security_protocol(self) -> str:
        """The listener's, as a client names it (``security.protocol``)."""
        sasl = bool(self.config.sasl_enabled_mechanisms)
        tls = self.ssl_context is not None
        return {(False, False): "PLAINTEXT", (False, True): "SSL", (True, False): "SASL_PLAINTEXT",
                (True, True): "SASL_SSL"}[(sasl, tls)]

    @property
    def bootstrap(self) -> str:
        """``host:port`` for a client's bootstrap servers."""
        return f"{self.config.host}:{self.config.port}"

    def control(self, api_key: int, action: HookAction, *, times: Optional[int] = 1) -> ControlHandle:
        """Intercept requests of ``api_key`` (see :meth:`BrokerCore.control`)."""
        assert self.core is not None, "the broker is not started"
        return self.core.control(api_key, action, times=times)

    # ------------------------------------------------------------------ time
    def _arm_timer(self) -> None:
        core = self.core
        if core is None:
            return
        deadline = core.next_deadline_ms()
        if deadline is None or (self._wakeup_at is not None and self._wakeup_at <= deadline):
            return
        if self._wakeup is not None:
            self._wakeup.cancel()
        loop = asyncio.get_running_loop()
        self._wakeup_at = deadline
        # the timer's clock is time.monotonic, as the loop's: the deadline is a loop time
        self._wakeup = loop.call_at((deadline + 1) / 1000.0, self._on_timer)

    def _on_timer(self) -> None:
        self._wakeup = None
        self._wakeup_at = None
        if self.core is not None:
            self.core.advance_clock()
            self._arm_timer()

    # ------------------------------------------------------------------ connections
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Connection(writer)
        self._connections.add(conn)
        frames = FrameBuffer(self.max_frame)
        loop = asyncio.get_running_loop()
        try:
            while conn.closed is None:
                data = await reader.read(256 * 1024)
                if not data:
                    break
                frames.feed(data)
                try:
                    for frame in frames.frames():
                        core = self.core
                        if core is None:
                            return
                        conn.done = loop.create_future()
                        try:
                            core.handle(conn, frame)
                        except Exception:  # a core bug ends this connection, not the broker
                            log.exception("error handling a request")
                            conn.close("internal error")
                        self._arm_timer()
                        await conn.done
                        if conn.closed is not None:
                            return
                        if writer.transport.get_write_buffer_size() > 1 << 20:
                            await writer.drain()
                except DecodeError as exc:  # a frame size out of range
                    conn.close(str(exc))
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(conn)
            self._tasks.discard(task)
            if conn.closed is None:
                conn.closed = "client gone"
                writer.close()
