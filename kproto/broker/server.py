"""The asyncio layer: TCP connections in front of :class:`~kproto.broker.core.BrokerCore`.

Each connection reads frames and hands them to the core one at a time (Kafka mutes a
connection while its request is in flight, so answers keep request order); the timer is
woken at its next deadline by the event loop, so a waiting fetch answers at once when data
arrives and at ``max_wait_ms`` otherwise. A bad frame closes only its own connection.
:class:`Listener` is that socket layer for any core (a controller node's too); :class:`Broker`
is a listener in front of a broker core.

    async with Broker(tmp_path) as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
"""
from __future__ import annotations

import asyncio
import logging
import os
import select
import socket
import ssl as _ssl
import threading
import time
import warnings
from collections import deque
from typing import Any, Optional

from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore, ControlHandle, HookAction
from kproto.broker.log import FileRegion, LogConfig
from kproto.broker.quotas import ConnectionQuotas
from kproto.broker.security.tls import client_auth_mode
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.framing import DEFAULT_MAX_FRAME

__all__ = ["Broker", "Listener"]

log = logging.getLogger("kproto.broker")

_LOG_CONFIGS = {"segment_bytes", "index_interval_bytes", "segment_index_bytes",
                "message_timestamp_type", "timestamp_before_max_ms", "timestamp_after_max_ms",
                "max_message_bytes"}


# Produce, Fetch, ListOffsets, Metadata, OffsetFetch, FindCoordinator, ApiVersions, InitProducerId
_HOT_APIS = (0, 1, 2, 3, 9, 10, 18, 22)


def _newest(rng: Optional[tuple[int, int]], n: int) -> list[int]:
    return [] if rng is None else list(range(max(rng[0], rng[1] - n + 1), rng[1] + 1))


class _QueueBudget:
    """Kafka's ``queued.max.requests`` and ``queued.max.request.bytes`` across connections:
    requests read (or being read) and not yet handled. A connection whose next frame does not
    fit waits, reading nothing more, until handled requests make room; it is not dropped. A
    frame larger than the whole byte budget is admitted when nothing else is held (Kafka's
    non-strict memory pool), so it cannot wait forever."""

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests if max_requests > 0 else None
        self.max_bytes = max_bytes if max_bytes >= 0 else None
        self.requests = 0
        self.bytes = 0
        self.peak_requests = 0
        self.peak_bytes = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _fits(self, size: int) -> bool:
        if self.max_requests is not None and self.requests >= self.max_requests:
            return False
        return self.max_bytes is None or self.bytes == 0 or self.bytes + size <= self.max_bytes

    def try_acquire(self, size: int) -> bool:
        """Take ``size`` now if it fits and nobody waits before it (first come, first served)."""
        if self._waiters or not self._fits(size):
            return False
        self._take(size)
        return True

    async def acquire(self, size: int) -> None:
        if self.try_acquire(size):
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append(fut)
        try:
            await fut  # only the head of the line is woken
            while not self._fits(size):
                fut = self._waiters[0] = loop.create_future()
                await fut
        finally:
            self._waiters.remove(fut)
            self._wake()  # the next in line checks once this one has taken its share
        self._take(size)

    def _take(self, size: int) -> None:
        self.requests += 1
        self.bytes += size
        self.peak_requests = max(self.peak_requests, self.requests)
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def release(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        self._wake()

    def _wake(self) -> None:
        if self._waiters and not self._waiters[0].done():
            self._waiters[0].set_result(None)


class _Connection:
    """A channel of the core bound to one socket."""

    def __init__(self, transport: asyncio.Transport, listener: Optional[str] = None) -> None:
        self.transport = transport
        #: the name of the listener it came in on (None: the broker's main listener)
        self.listener = listener
        peer = transport.get_extra_info("peername")
        self.peer = f"/{peer[0]}" if isinstance(peer, tuple) else "/127.0.0.1"
        #: the TLS session (an SSL listener's: the client certificate), None on PLAINTEXT
        self.ssl_object: Optional[_ssl.SSLObject] = transport.get_extra_info("ssl_object")
        #: a plaintext socket sends a Fetch answer's records from their files (sendfile, as
        #: Kafka's PLAINTEXT listener does); TLS copies them through the encryption
        self.sends_files = self.ssl_object is None and hasattr(os, "sendfile")
        #: the answer being sent with sendfile; nothing more is read from the connection
        #: (nor written to it) until it is out
        self.sending: Optional[asyncio.Task[None]] = None
        self.done: Optional[asyncio.Future[None]] = None
        self.closed: Optional[str] = None
        #: KIP-219: the loop time until which nothing more is read (a throttled client)
        self.muted_until = 0.0

    def mute(self, throttle_ms: int) -> None:
        """Read no further request for ``throttle_ms`` (after this answer)."""
        self.muted_until = max(self.muted_until, asyncio.get_running_loop().time() + throttle_ms / 1000.0)

    def respond(self, frame: Optional[bytes]) -> None:
        if self.closed is None and frame is not None:
            self.transport.write(frame)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def respond_parts(self, parts: list[Any]) -> None:
        """The answer as buffers and :class:`FileRegion` parts, sent in order by a task: the
        buffers with the transport's writes, each region with ``sendfile`` once what precedes
        it is out (a slow reader waits in the event loop, blocking nothing)."""
        if self.closed is None:
            self.sending = asyncio.get_running_loop().create_task(self._send(parts))
        else:
            _close_regions(parts)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    async def _send(self, parts: list[Any]) -> None:
        loop = asyncio.get_running_loop()
        transport: Any = self.transport
        sock = transport.get_extra_info("socket")
        # TCP_CORK: the answer's small pieces between regions go out in full packets
        cork = sock is not None and hasattr(socket, "TCP_CORK")
        try:
            if cork:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            pending: list[Any] = []
            for part in parts:
                if type(part) is not FileRegion:
                    pending.append(part)
                    continue
                if pending:
                    transport.write(b"".join(pending))
                    pending.clear()
                with open(part.fd, "rb", buffering=0, closefd=False) as f:  # type: ignore[arg-type]
                    sent = await loop.sendfile(transport, f, part.offset, part.count, fallback=False)
                part.close()
                if sent != part.count:  # the segment file was truncated under the answer
                    raise OSError(f"sent {sent} of a file region's {part.count} bytes")
            if pending:
                transport.write(b"".join(pending))
            if cork and not transport.is_closing():
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        except (OSError, RuntimeError) as exc:  # ConnectionError is an OSError
            self.close(f"sending an answer failed: {exc}")
        finally:
            _close_regions(parts)

    def close(self, reason: str) -> None:
        if self.sending is not None and not self.sending.done() and self.sending is not asyncio.current_task():
            self.sending.cancel()  # its finally closes the regions not sent
        if self.closed is None:
            self.closed = reason
            log.info("closing connection %s: %s", self.transport.get_extra_info("peername"), reason)
            self.transport.close()
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


def _close_regions(parts: list[Any]) -> None:
    for part in parts:
        if type(part) is FileRegion:
            part.close()


_AFTER_REQUEST = -1
""":attr:`_Receiver.stopped` after a request that must be waited for before the next is read."""

_HEAD = 16 << 10
"""Bytes a connection reads at once between frames. Frames that fit are read together (a small
request costs no turn of the loop of its own) and copied out once; a larger frame's bytes past
them are read into its own buffer."""


class _Receiver(asyncio.BufferedProtocol):
    """A connection's reads: up to :data:`_HEAD` bytes at once between frames, a larger frame
    into a buffer of exactly its size, filled by the kernel (``recv_into``) with no copy in user
    space (but of its first bytes, read with its size). A frame is handled as soon as it is
    complete; reading goes on at once when its answer is out, and otherwise stops (the transport
    paused, as Kafka mutes a channel) while :meth:`Listener._serve`, woken through
    :meth:`next_stop`, waits for what is missing."""

    def __init__(self, listener: Listener, name: Optional[str]) -> None:
        self.listener, self.name = listener, name
        self.transport: Any = None
        self.conn: _Connection  # once connected
        self._head = memoryview(bytearray(_HEAD))
        self._start = self._end = 0  # the head's bytes not yet taken
        self._frame: Optional[memoryview] = None  # a frame being read into its own buffer
        self._pos = 0  # bytes of it read
        #: the budget share (queued.max.request.bytes) taken for the frame being read; -1: none
        self.held = -1
        #: why reading stopped, for the task: a frame's size (waiting for the budget) or
        #: _AFTER_REQUEST; None: reading
        self.stopped: Optional[int] = None
        self.lost = False
        self._wakeup: Optional[asyncio.Future[None]] = None
        self._writable: Optional[asyncio.Future[None]] = None

    # ------------------------------------------------------------------ asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        # nothing is read before the task has admitted the connection (connection quotas)
        self.transport.pause_reading()
        self.conn = _Connection(self.transport, self.name)
        asyncio.get_running_loop().create_task(self.listener._serve(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return self._frame[self._pos:]
        if self._end == _HEAD:  # full only once closing (a TLS shutdown still reads): dropped
            self._start = self._end = 0
        return self._head[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.conn.closed is not None:
            return  # closing (a TLS shutdown still reads): what arrives now is dropped unread
        if self._frame is None:
            self._end += nbytes
            self._frames()
            return
        self._pos += nbytes
        if self._pos == len(self._frame):
            frame, self._frame = self._frame, None
            # read-only: the buffer is this request's alone, and the records views the log
            # keeps are read-only as over bytes (bytes would cost a copy)
            self._deliver(frame.toreadonly())

    def eof_received(self) -> None:
        return None  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost = True
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # ------------------------------------------------------------------ frames
    def _frames(self) -> None:
        """Handle the frames in the head while reading goes on; keep the rest of it."""
        listener, head = self.listener, self._head
        while self.stopped is None and self._frame is None and self.conn.closed is None:
            start = self._start
            if self._end - start < 4:
                break
            size = int.from_bytes(head[start:start + 4], "big", signed=True)
            self._start = start + 4
            if size < 0 or size > listener.max_frame:
                # refused from its size prefix alone, before the rest of it is read
                self.conn.close(f"frame size {size} out of range (max {listener.max_frame})")
                return
            if listener._queue.try_acquire(size):
                self.read_frame(size)
            else:
                self._stop(size)  # the task waits for the budget; nothing is read meanwhile
        if self._frame is None and self.stopped is None and self._start:
            n = self._end - self._start  # less than a size prefix: moved to the front
            head[:n] = head[self._start:self._end]
            self._start, self._end = 0, n

    def read_frame(self, size: int) -> None:
        """Read the frame of ``size`` bytes, its share of the budget taken."""
        self.held = size
        start, have = self._start, self._end - self._start
        if have >= size:
            self._start = start + size
            self._deliver(bytes(self._head[start:start + size]))
            return
        self._frame = memoryview(bytearray(size))
        self._frame[:have] = self._head[start:self._end]
        self._pos, self._start, self._end = have, 0, 0

    def _deliver(self, frame: Any) -> None:
        conn, listener = self.conn, self.listener
        size, self.held = self.held, -1
        try:
            core = listener.core
            if core is None:
                conn.close("no core to handle requests")
                return
            conn.done = asyncio.get_running_loop().create_future()
            try:
                core.handle(conn, frame)
            except Exception:  # a core bug ends this connection, not the broker
                log.exception("error handling a request")
                conn.close("internal error")
        finally:
            # handled (Kafka releases the request's buffer once its handler returns; a long
            # poll waits in the purgatory, not in the queue)
            listener._queue.release(size)
        listener.arm_timer()
        if (conn.closed is None and conn.done.done() and conn.sending is None and not conn.muted_until
                and self.transport.get_write_buffer_size() <= 1 << 20):
            return  # answered: the next frame is read on
        self._stop(_AFTER_REQUEST)

    def release(self) -> None:
        """Give back the budget share of a frame left unread (the connection is gone)."""
        if self.held >= 0:
            self.listener._queue.release(self.held)
            self.held = -1

    # ------------------------------------------------------------------ the task's side
    def _stop(self, why: int) -> None:
        self.transport.pause_reading()
        self.stopped = why
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def next_stop(self) -> Optional[int]:
        """Why reading stopped (see :attr:`stopped`), once it has; None: the connection is gone."""
        while self.stopped is None:
            if self.lost:
                return None
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
        why, self.stopped = self.stopped, None
        return why

    def resume(self) -> None:
        """Read on: the frames already in the head first, then the socket."""
        self._frames()
        if self.stopped is None and self.conn.closed is None:
            self.transport.resume_reading()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its low mark."""
        if self._writable is not None and not self.lost:
            await self._writable


STALL_WARNING_S = 2.0
"""Seconds the event loop may stay away while clients wait before :class:`Listener` warns."""

_STALL_ADVICE = (
    "a blocking call on the event loop's thread (confluent-kafka's producer.flush(), "
    "kafka-python, time.sleep) stops the broker on that loop, and a client waiting for it "
    "deadlocks; run the broker on its own thread (kproto.testing's kafka_broker fixture, "
    "BrokerThread, ClusterThread) or make the blocking call with "
    "`await asyncio.to_thread(...)`")


class _StallWatchdog:
    """A daemon thread that warns once when the loop has not run for ``limit_s`` while a client
    waits for it: an unanswered request, a connection not yet accepted, or bytes not yet read.
    The loop's only cost is a heartbeat callback every quarter of the limit."""

    def __init__(self, listener: Listener, loop: asyncio.AbstractEventLoop, limit_s: float,
                 fds: list[int]) -> None:
        self.listener, self.loop, self.limit_s, self.fds = listener, loop, limit_s, fds
        self.beat = time.monotonic()
        self.stopped = threading.Event()
        self.warned = False
        self._handle: Optional[asyncio.TimerHandle] = None
        self._heartbeat()
        self.thread = threading.Thread(target=self._watch, name="kproto-stall-watchdog",
                                       daemon=True)
        self.thread.start()

    def _heartbeat(self) -> None:
        self.beat = time.monotonic()
        self._handle = self.loop.call_later(self.limit_s / 4, self._heartbeat)

    def stop(self) -> None:
        self.stopped.set()
        if self._handle is not None:
            self._handle.cancel()

    def _waiting(self) -> bool:
        """Is a client waiting for the loop? (read from this thread while the loop stands)"""
        try:
            conns = list(self.listener._connections)
        except RuntimeError:  # changed while copied: the loop is running
            return False
        if any(c.closed is None and c.done is not None and not c.done.done() for c in conns):
            return True
        fds = list(self.fds)
        for c in conns:
            sock = c.transport.get_extra_info("socket")
            if sock is not None and c.closed is None:
                fds.append(sock.fileno())
        fds = [fd for fd in fds if fd >= 0]
        try:
            readable, _, _ = select.select(fds, [], [], 0)
        except (OSError, ValueError):  # a socket closed meanwhile
            return False
        return bool(readable)

    def _watch(self) -> None:
        while not self.stopped.wait(self.limit_s / 4):
            stalled = time.monotonic() - self.beat
            if stalled >= self.limit_s and self._waiting() and not self.stopped.is_set():
                message = (f"kproto: the event loop serving {self.listener!r} has not run for "
                           f"{stalled:.1f} s while a client waits for it: {_STALL_ADVICE}")
                log.warning("%s", message)
                warnings.warn(message, RuntimeWarning, stacklevel=1)
                self.warned = True
                return


class Listener:
    """The socket layer in front of a sans-I/O core: any object with ``handle(channel, frame)``,
    ``next_deadline_ms()``, ``advance_clock()`` (and ``close(clean)``, called by its owner).
    A connection's frames go to ``core.handle`` one at a time; the event loop wakes the core's
    timer at its next deadline. :class:`Broker` is one; a controller node is another
    (:mod:`kproto.broker.cluster.controller_node`)."""

    core: Any

    def __init__(self, *, max_frame: int = DEFAULT_MAX_FRAME, queued_max_requests: int = 500,
                 queued_max_request_bytes: int = -1,
                 ssl_context: Optional[_ssl.SSLContext] = None,
                 stall_warning_s: Optional[float] = STALL_WARNING_S) -> None:
        """``stall_warning_s``: warn (once, logging and :class:`RuntimeWarning`) when the event
        loop has not run for that long while a client waits for it, the sign of a blocking
        client called on the loop's thread; None: no watchdog."""
        self.ssl_context = ssl_context
        self.stall_warning_s = stall_warning_s
        self._watchdog: Optional[_StallWatchdog] = None
        self.max_frame = max_frame
        self.core = None
        self._server: Optional[asyncio.AbstractServer] = None
        #: more listeners by name (a cluster broker's inter-broker listener)
        self._extra_servers: dict[str, asyncio.AbstractServer] = {}
        self._wakeup: Optional[asyncio.TimerHandle] = None
        self._wakeup_at: Optional[int] = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._connections: set[_Connection] = set()
        self._queue = _QueueBudget(queued_max_requests, queued_max_request_bytes)
        # Kafka's acceptor: one new connection at a time past the connection limits
        self._acceptor = asyncio.Lock()
        self._slot_freed = asyncio.Event()

    async def listen(self, host: str, port: int) -> int:
        """Accept connections on ``host:port`` (0: a free port); the port bound."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Receiver(self, None), host, port,
                                                ssl=self.ssl_context)
        if self.stall_warning_s is not None and self._watchdog is None:
            self._watchdog = _StallWatchdog(self, asyncio.get_running_loop(), self.stall_warning_s,
                                            [s.fileno() for s in self._server.sockets])
        return self._server.sockets[0].getsockname()[1]

    async def listen_also(self, name: str, host: str, port: int,
                          ssl_context: Optional[_ssl.SSLContext] = None) -> int:
        """Accept connections on another listener, ``name`` (Kafka's listener names): its
        connections' channels carry the name, for the core to apply that listener's security.
        The port bound."""
        server = await asyncio.get_running_loop().create_server(lambda: _Receiver(self, name), host,
                                                                port, ssl=ssl_context)
        self._extra_servers[name] = server
        return server.sockets[0].getsockname()[1]

    async def stop_listening(self) -> None:
        """Stop accepting, drop the connections and the timer's wakeup (the core is left to
        its owner)."""
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        if self._server is not None:
            self._server.close()
        for server in self._extra_servers.values():
            server.close()
        for conn in list(self._connections):
            conn.close("broker shutting down")
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        extra, self._extra_servers = self._extra_servers, {}
        for server in extra.values():
            await server.wait_closed()
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
            self._wakeup_at = None

    # ------------------------------------------------------------------ time
    def arm_timer(self) -> None:
        """Wake the core's timer at its next deadline (call after the core was driven from
        outside a request: a response from another node, a task it scheduled)."""
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
            self.arm_timer()

    # ------------------------------------------------------------------ connections
    async def _admit(self, quotas: ConnectionQuotas, ip: str) -> bool:
        """Kafka's acceptor and ConnectionQuotas: wait out the broker's connection creation
        rate and for ``max.connections`` to leave room, then the address's limits: over its
        connection_creation_rate, the connection is held unread and closed after the throttle
        time; past ``max.connections.per.ip``, closed at once."""
        loop = asyncio.get_running_loop()

        def now_ms() -> int:
            return int(loop.time() * 1000)
        async with self._acceptor:
            delay = quotas.accept_delay(now_ms())
            if delay > 0:
                await asyncio.sleep(delay / 1000.0)
            while not quotas.slot_available():
                self._slot_freed.clear()
                await self._slot_freed.wait()
            verdict, value = quotas.admit(ip, now_ms())
        if verdict == "throttle":
            log.debug("delaying the close of a connection from %s for %d ms", ip, value)
            await asyncio.sleep(value / 1000.0)
        elif verdict == "refuse":
            log.info("refused a connection from %s: the address already has the configured maximum "
                     "of %d connections", ip, value)
        return verdict == "ok"

    async def _serve(self, rx: _Receiver) -> None:
        """A connection's task: admit it, then wait for whatever its receiver stopped for."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = rx.conn
        quotas: Optional[ConnectionQuotas] = getattr(self.core, "connection_quotas", None)
        ip = conn.peer[1:]
        if quotas is not None:
            # nothing is read before the connection is taken (Kafka's acceptor has not handed
            # it to a processor yet): a client's request waits in the kernel's buffer
            try:
                admitted = await self._admit(quotas, ip)
            except asyncio.CancelledError:
                admitted = False
            if not admitted:
                self._tasks.discard(task)
                rx.transport.close()  # with a request unread in the kernel: a reset, as Kafka's
                return
        self._connections.add(conn)
        loop = asyncio.get_running_loop()
        try:
            rx.resume()
            while conn.closed is None:
                why = await rx.next_stop()
                if why is None:
                    return  # the client is gone
                if why != _AFTER_REQUEST:
                    # queued.max.requests / queued.max.request.bytes: the frame's bytes are
                    # read only once the shared budget has room
                    await self._queue.acquire(why)
                    rx.read_frame(why)
                else:
                    assert conn.done is not None
                    await conn.done
                    if conn.sending is not None:
                        # the next request is read once this answer is out (Kafka mutes a
                        # connection while its answer is being sent)
                        await conn.sending
                        conn.sending = None
                    if conn.closed is not None:
                        return
                    if conn.muted_until:
                        # throttled (KIP-219): the answer is out, the next request waits
                        await asyncio.sleep(max(0.0, conn.muted_until - loop.time()))
                        conn.muted_until = 0.0
                    if rx.transport.get_write_buffer_size() > 1 << 20:
                        await rx.drain()
                rx.resume()
        except asyncio.CancelledError:
            pass
        finally:
            rx.release()
            self._connections.discard(conn)
            self._tasks.discard(task)
            if quotas is not None:
                quotas.closed(ip)
                self._slot_freed.set()
            closed = getattr(self.core, "connection_closed", None)
            if closed is not None:
                closed(conn)  # a broker's share sessions end with their connection
            if conn.closed is None:
                conn.closed = "client gone"
                rx.transport.close()


class Broker(Listener):
    """A single-node Kafka broker on ``host:port`` (port 0: a free one) over ``data_dir``.

    ``config``: :class:`~kproto.broker.configs.BrokerConfig` fields (``node_id``,
    ``auto_create_topics``, ``num_partitions``, ...) and the log defaults of
    :class:`~kproto.broker.log.LogConfig` (``segment_bytes``, ``message_timestamp_type``, ...).
    ``stall_warning_s`` (default 2 s, None: off): see :class:`Listener`.
    ``ssl_context`` (a server-side :class:`ssl.SSLContext`) makes the listener SSL, or SASL_SSL
    with ``sasl_enabled_mechanisms``; ``ssl_client_auth`` ``required`` or ``requested`` sets its
    ``verify_mode`` (the context must then trust the clients' CA); security settings are in :mod:`kproto.broker.security.auth` and
    :mod:`kproto.broker.security.acl` (``sasl_users``, ``authorizer``, ``super_users``).
    """

    def __init__(self, data_dir: str | os.PathLike[str], port: int = 0, *, host: str = "127.0.0.1",
                 max_frame: Optional[int] = None, ssl_context: Optional[_ssl.SSLContext] = None,
                 stall_warning_s: Optional[float] = STALL_WARNING_S, **config: Any) -> None:
        log_cfg = {k: config.pop(k) for k in list(config) if k in _LOG_CONFIGS}
        if max_frame is not None:  # the older name of socket.request.max.bytes
            config["socket_request_max_bytes"] = max_frame
        self.config = BrokerConfig(host=host, port=port, log=LogConfig(**log_cfg), **config)
        self.data_dir = os.fspath(data_dir)
        verify = client_auth_mode(self.config.ssl_client_auth)  # checks the value
        if ssl_context is not None and self.config.ssl_client_auth != "none":
            # ssl.client.auth: the TLS handshake asks for a client certificate ("none", the
            # default, leaves the context as it was made: a server context asks for none)
            ssl_context.verify_mode = verify
        # socket.request.max.bytes: a frame announcing more is refused and its connection
        # closed before its bytes are read, as Kafka's NetworkReceive does
        super().__init__(max_frame=self.config.socket_request_max_bytes or DEFAULT_MAX_FRAME,
                         queued_max_requests=self.config.queued_max_requests,
                         queued_max_request_bytes=self.config.queued_max_request_bytes,
                         ssl_context=ssl_context, stall_warning_s=stall_warning_s)
        self.core: Optional[BrokerCore] = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> Broker:
        self.config.port = await self.listen(self.config.host, self.config.port)
        # the core opens (and recovers) the log directory once the advertised port is known
        self.core = BrokerCore(self.data_dir, self.config)
        self.core.connection_quotas.listener = self.security_protocol  # the listener's name
        self._warm(self._hot_codecs())
        return self

    def _hot_codecs(self) -> list[tuple[int, int]]:
        assert self.core is not None
        versions = self.core.api_versions()
        return [(key, v) for key in _HOT_APIS for v in _newest(versions.get(key), 3)]

    def warm_up(self) -> None:
        """Compile the hot codecs now, all at once (~0.3 s of CPU), instead of a piece per
        turn of the loop while the first clients are served: a broker process that is going
        to serve for long (``kproto broker``) answers its first produce burst at full speed."""
        for key, version in self._hot_codecs():
            request_codec(key).source(version)
            response_codec(key).source(version)

    def _warm(self, todo: list[tuple[int, int]]) -> None:
        """Compile the codecs of the APIs a client calls first and most (request decoder and
        response encoder of their newest versions: librdkafka 2.16 sends Produce v10, Java 3.9
        v11), one version per turn of the loop while the client connects: compiled lazily,
        they cost a client's first Produce ~10 ms. The caches are process-wide: only the first
        broker of a process pays."""
        if not todo or self.core is None:
            return
        key, version = todo.pop()
        request_codec(key).source(version)
        response_codec(key).source(version)
        asyncio.get_running_loop().call_soon(self._warm, todo)

    async def close(self, clean: bool = True) -> None:
        """Stop accepting, drop the connections, close the logs (``clean``: checkpoints and
        the clean-shutdown marker, as a SIGTERM'd Kafka broker leaves them)."""
        await self.stop_listening()
        if self.core is not None:
            self.core.close(clean)
            self.core = None

    async def __aenter__(self) -> Broker:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Broker({self.config.host}:{self.config.port})"

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
