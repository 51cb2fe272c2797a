"""Requests between the nodes of a cluster, over real connections, with faults on demand.

Every node (broker or controller) is a Kafka-protocol listener; a node's requests to another
(a follower's Fetch, AlterPartition, BrokerHeartbeat, Raft's Vote and Fetch) leave through
:meth:`NodeNetwork.transport`, the :class:`~kproto.broker.cluster.replica.Transport` the sans-I/O
parts are written against. Connections are kproto's own client connections on loopback,
opened on first use: two per ordered pair of nodes, one for Fetch and one for the rest, as
Kafka keeps its replica fetchers, Raft client and controller channel on separate connections.
A broker answers one request per connection at a time, so a WriteTxnMarkers waiting for a
follower's fetch must not queue behind that follower's long-polling Fetch on the same link.

Faults, as a test injects them (Jepsen's nemesis):

* :meth:`NodeNetwork.partition` cuts the link between two nodes both ways: requests sent
  while it is cut, and answers arriving while it is cut, are lost; their senders see no
  answer until their timeout, as across a real partition (no reset arrives).
* :meth:`NodeNetwork.isolate` cuts a node from every other; :meth:`NodeNetwork.heal` mends all,
  or one node's links.
* :meth:`NodeNetwork.slow` delays every request and answer on a link.
"""
from __future__ import annotations

import asyncio
import ssl as _ssl
from typing import Any, Callable, Iterable, Optional

from kproto.client.connection import Connection
from kproto.client.protocol import KafkaConnectionError, SaslConfig
from kproto.errors import KprotoError

__all__ = ["NodeNetwork"]

_FETCH = 1  # ApiKey.FETCH: replica and Raft fetches long-poll on a connection of their own


class NodeNetwork:
    """The links between nodes: addresses, connections and injected faults."""

    def __init__(self) -> None:
        self.addresses: dict[int, tuple[str, int]] = {}
        self._cut: set[frozenset[int]] = set()
        self._delay_ms: dict[frozenset[int], int] = {}
        self._connections: dict[tuple[int, int, bool], Connection] = {}
        self._connecting: dict[tuple[int, int, bool], asyncio.Future[Optional[Connection]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self.lost = 0  # requests or answers dropped by a cut
        #: how a node's listener is reached: a TLS client context and SASL credentials
        self._security: dict[int, tuple[Optional[_ssl.SSLContext], Optional[SaslConfig]]] = {}

    # ------------------------------------------------------------------ topology
    def register(self, node: int, host: str, port: int) -> None:
        """Where ``node`` listens (again, after a restart on a new port)."""
        self.addresses[node] = (host, port)
        self.drop_connections(node)

    def secure(self, node: int, ssl: Optional[_ssl.SSLContext] = None,
               sasl: Optional[SaslConfig] = None) -> None:
        """Reach ``node`` over TLS (``ssl``: the client context, which presents the
        inter-broker certificate if the listener asks for one) and authenticate with ``sasl``
        (Kafka's inter-broker listener and ``sasl.mechanism.inter.broker.protocol``)."""
        self._security[node] = (ssl, sasl)

    def drop_connections(self, node: int) -> None:
        """Close every connection to or from ``node`` (it stopped or restarted)."""
        for key in [k for k in self._connections if node in k[:2]]:
            conn = self._connections.pop(key)
            self._spawn(conn.close())

    # ------------------------------------------------------------------ faults
    def partition(self, a: int, b: int) -> None:
        """Cut the link between ``a`` and ``b`` (both ways)."""
        self._cut.add(frozenset((a, b)))

    def isolate(self, node: int, others: Optional[Iterable[int]] = None) -> None:
        """Cut ``node`` from ``others`` (default: every node known)."""
        for other in (self.addresses if others is None else others):
            if other != node:
                self.partition(node, other)

    def slow(self, a: int, b: int, delay_ms: int) -> None:
        """Delay requests and answers between ``a`` and ``b`` by ``delay_ms`` (0: no delay)."""
        key = frozenset((a, b))
        if delay_ms > 0:
            self._delay_ms[key] = delay_ms
        else:
            self._delay_ms.pop(key, None)

    def heal(self, node: Optional[int] = None) -> None:
        """Mend every cut and remove every delay, or only those of ``node``'s links."""
        if node is None:
            self._cut.clear()
            self._delay_ms.clear()
            return
        self._cut = {link for link in self._cut if node not in link}
        self._delay_ms = {link: ms for link, ms in self._delay_ms.items() if node not in link}

    def is_cut(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self._cut

    # ------------------------------------------------------------------ requests
    def transport(self, src: int, after: Optional[Callable[[], None]] = None) -> "_NodeTransport":
        """The transport of node ``src`` (what its replica manager, Raft replica and
        controller channel send through). ``after`` runs once each answer was handled (the
        node's listener re-arms its timer: an answer can schedule tasks outside any request)."""
        return _NodeTransport(self, src, after)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, src: int, dst: int, fetch: bool) -> Optional[Connection]:
        """The connection from ``src`` to ``dst`` for fetches or for the rest; None when it
        cannot be opened (no exception: a task cancelled meanwhile leaves none unretrieved)."""
        key = (src, dst, fetch)
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[Optional[Connection]] = asyncio.get_running_loop().create_future()
        self._connecting[key] = fut
        opened: Optional[Connection] = None
        try:
            host, port = self.addresses[dst]
            ssl, sasl = self._security.get(dst, (None, None))
            # SASL needs the versions (SaslHandshake v1); plain links send explicit versions
            opened = await Connection.open(host, port, client_id=f"kproto-node-{src}",
                                           negotiate=sasl is not None, ssl=ssl, sasl=sasl,
                                           connect_timeout=5.0)
            self._connections[key] = opened
        except (KafkaConnectionError, OSError, asyncio.TimeoutError, KeyError, KprotoError):
            opened = None  # KprotoError: the SASL exchange failed
        finally:
            self._connecting.pop(key, None)
            if not fut.done():
                fut.set_result(opened)
        return opened

    async def request(self, src: int, dst: int, api_key: int, version: int, body: Any,
                      timeout_ms: int) -> Optional[Any]:
        """One request from ``src`` to ``dst``: its answer, or None (no answer in time, the
        link cut, the node gone)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        link = frozenset((src, dst))

        async def lost() -> None:
            self.lost += 1
            await asyncio.sleep(max(0.0, deadline - loop.time()))

        if link in self._cut or dst not in self.addresses:
            await lost()
            return None
        delay = self._delay_ms.get(link, 0) / 1000
        if delay:
            await asyncio.sleep(delay)
        try:
            conn = await asyncio.wait_for(self._connection(src, dst, api_key == _FETCH),
                                          max(0.001, deadline - loop.time()))
            if conn is None:
                return None
            fut = conn.send(body, version)
            answer = await conn.response(fut, type(body).__name__,
                                         timeout=max(0.001, deadline - loop.time()))
        except (KafkaConnectionError, OSError, asyncio.TimeoutError):
            return None
        if delay:
            await asyncio.sleep(delay)
        if link in self._cut:
            await lost()  # cut while the answer was on its way
            return None
        return answer

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in list(self._connections.values()):
            await conn.close()
        self._connections.clear()


class _NodeTransport:
    """A node's side of the network (:class:`kproto.broker.cluster.replica.Transport`)."""

    def __init__(self, network: NodeNetwork, src: int, after: Optional[Callable[[], None]]) -> None:
        self.network, self.src, self.after = network, src, after

    def send(self, dst: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Optional[Any]], None], timeout_ms: int) -> None:
        async def run() -> None:
            answer = await self.network.request(self.src, dst, api_key, version, body, timeout_ms)
            on_response(answer)
            if self.after is not None:
                self.after()
        self.network._spawn(run())
