"""A Kafka cluster in one process: a KRaft controller quorum and brokers, with faults on demand.

    async with Cluster(brokers=3, controllers=1, data_dir=tmp_path) as cluster:
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
        ...
        leader = cluster.leader("orders", 0)
        await cluster.stop(leader, abrupt=True)      # kill -9 of that broker
        cluster.partition_network(leader, 2)         # or cut it from another node
        cluster.heal()
        await cluster.start(leader)

Each node is a Kafka-protocol listener on loopback with its own data directory under
``data_dir`` (``broker-<id>`` holds a real Kafka log directory with its ``__cluster_metadata-0``
replica, ``controller-<id>`` a controller's metadata log). Nodes talk through one
:class:`~kproto.broker.cluster.network.NodeNetwork`, where the faults are injected; clients are cut
from a broker with :meth:`Cluster.cut_clients`.

Node ids: brokers ``1..brokers``, controllers ``3001..3000+controllers`` (one id space, as in
a KRaft cluster whose controllers are separate processes).
"""
from __future__ import annotations

import asyncio
import os
import ssl
import time
from typing import Any, Mapping, Optional, Sequence

from kproto.broker.cluster.broker import ClusterBrokerCore
from kproto.broker.cluster.controller import ControllerConfig
from kproto.broker.features import TRANSACTION_VERSION_LEVEL
from kproto.broker.cluster.controller_node import ControllerNode, start_quorum
from kproto.broker.configs import BrokerConfig
from kproto.broker.cluster.migration import (LegacyState, migration_records, read_legacy_state,
                                              retire_files)
from kproto.broker.security.auth import SCRAM_MECHANISM_IDS, ScramCredential
from kproto.client.protocol import SaslConfig
from kproto.broker.core import Intercept
from kproto.storage.metadata_image import MetadataImage
from kproto.broker.cluster.network import NodeNetwork
from kproto.broker.cluster.raft import RaftConfig
from kproto.broker.cluster.replica import ReplicaConfig
from kproto.broker.server import Broker
from kproto.codecs.primitives import Uuid

__all__ = ["Cluster", "ClusterBroker", "CONTROLLER_ID_BASE"]

CONTROLLER_ID_BASE = 3000
_NODE_CLIENT_PREFIX = "kproto-node-"


class ClusterBroker(Broker):
    """One broker of a :class:`Cluster`: the broker listener over a
    :class:`~kproto.broker.cluster.broker.ClusterBrokerCore`."""

    def __init__(self, node_id: int, data_dir: str, *, voters: Sequence[int], network: NodeNetwork,
                 cluster_id: str, raft_config: Optional[RaftConfig] = None,
                 replica_config: Optional[ReplicaConfig] = None,
                 broker_heartbeat_interval_ms: int = 2000, host: str = "127.0.0.1", port: int = 0,
                 **config: Any) -> None:
        super().__init__(data_dir, port, host=host, node_id=node_id, cluster_id=cluster_id, **config)
        self.node_id = node_id
        self.voters = list(voters)
        self.network = network
        self.raft_config, self.replica_config = raft_config, replica_config
        self.broker_heartbeat_interval_ms = broker_heartbeat_interval_ms
        self.core: Optional[ClusterBrokerCore] = None
        self._crash_files: Optional[asyncio.Future[None]] = None

    async def settle(self) -> None:
        """Wait until the files of an abrupt stop are written."""
        if self._crash_files is not None:
            await self._crash_files
            self._crash_files = None

    async def start(self) -> ClusterBroker:
        await self.settle()  # its directory as the crash left it
        self.config.port = await self.listen(self.config.host, self.config.port)
        internal = self.config.inter_broker_listener_name
        if internal:
            # the other brokers reach this one on its inter-broker listener, clients on the main one
            tls = self.config.inter_broker_security_protocol in ("SSL", "SASL_SSL")
            self.config.inter_broker_port = await self.listen_also(
                internal, self.config.host, self.config.inter_broker_port, self.ssl_context if tls else None)
            self.network.register(self.node_id, self.config.host, self.config.inter_broker_port)
        else:
            self.network.register(self.node_id, self.config.host, self.config.port)
        self.core = ClusterBrokerCore(
            self.data_dir, self.config, voters=self.voters,
            transport=self.network.transport(self.node_id, after=self.arm_timer),
            raft_config=self.raft_config, replica_config=self.replica_config,
            broker_heartbeat_interval_ms=self.broker_heartbeat_interval_ms,
            security_protocol=self.security_protocol)
        self.arm_timer()
        self._warm(self._hot_codecs())
        return self

    async def stop(self, abrupt: bool = False, timeout: float = 10.0) -> None:
        """Stop. Graceful: a controlled shutdown first (the controller moves leadership away,
        up to ``timeout`` seconds), then the logs closed with their checkpoints. ``abrupt``:
        as kill -9, sockets gone and nothing more written."""
        core = self.core
        if core is not None and not abrupt:
            done = asyncio.get_running_loop().create_future()
            core.begin_controlled_shutdown(lambda: _settle(done, None))
            self.arm_timer()
            try:
                await asyncio.wait_for(done, timeout)
            except asyncio.TimeoutError:
                pass
        if core is not None and abrupt:
            # the other nodes lose it at once; the files a crash leaves (every active segment's
            # preallocated indexes: seconds for tens of partitions) are written off the event
            # loop the whole cluster shares, or the controller would fence every broker meanwhile
            await self.stop_listening()
            self.core = None
            core.detach(clean=False)
            self.network.drop_connections(self.node_id)
            self._crash_files = asyncio.ensure_future(asyncio.to_thread(core.close, False))
            return
        await self.close(clean=not abrupt)
        self.network.drop_connections(self.node_id)

    @property
    def running(self) -> bool:
        return self.core is not None


class Cluster:
    """``brokers`` brokers and a quorum of ``controllers`` (1 or 3) controllers under
    ``data_dir`` (a temporary directory when None), as an async context manager.

    ``port``: the first broker's port (the others follow it), 0 for free ports.
    ``broker_session_timeout_ms``/``broker_heartbeat_interval_ms``: how soon a silent broker
    is fenced (Kafka's defaults 9000/2000; tests shorten them). Other keywords are broker
    settings (:class:`~kproto.broker.configs.BrokerConfig` and log defaults, as
    :class:`~kproto.broker.server.Broker` takes them) or, for ``default_replication_factor``,
    ``min_insync_replicas`` and ``unclean_leader_election_enable``, the controller's too.
    ``racks``: each broker's ``broker.rack`` in id order (replicas are spread over racks).

    Security: ``ssl_context`` (a server context) makes every listener TLS, the brokers' (SSL,
    or SASL_SSL with ``sasl_enabled_mechanisms``) and the controllers' (SSL);
    ``inter_broker_ssl`` is the client context the nodes connect to each other with (it
    presents the inter-broker certificate when ``ssl_client_auth`` asks for one), and
    ``inter_broker_sasl`` the credentials brokers authenticate to brokers with (Kafka's
    ``sasl.mechanism.inter.broker.protocol`` and JAAS). ``scram_users`` (name: password) are
    written to the metadata log as SCRAM credentials of both SCRAM mechanisms when the
    cluster is first started (as ``kafka-storage format --add-scram``), so brokers can
    authenticate to each other with SCRAM. The controllers' listener takes the same SASL
    mechanisms (their users: ``sasl_users`` and ``scram_users``; OAUTHBEARER tokens checked by
    the same ``oauthbearer_*`` settings), and every node link authenticates with
    ``inter_broker_sasl`` (``sasl.mechanism.controller.protocol`` alike): with OAUTHBEARER,
    a ``token_provider`` whose tokens the nodes renew on their links before they expire.
    ``inter_broker_protocol`` (Kafka's ``security.inter.broker.protocol``) gives each broker a
    second listener, ``inter_broker_listener_name`` (``inter.broker.listener.name``), of that
    protocol: the brokers reach each other there (``inter_broker_ssl``/``inter_broker_sasl``
    as the protocol needs) and clients on the main listener; both are registered, and Metadata
    names each broker's endpoint on the listener it was asked on.
    """

    def __init__(self, brokers: int = 3, controllers: int = 1,
                 data_dir: Optional[str | os.PathLike[str]] = None, *, host: str = "127.0.0.1",
                 port: int = 0, cluster_id: Optional[str] = None,
                 broker_session_timeout_ms: int = 9000, broker_heartbeat_interval_ms: int = 2000,
                 raft_config: Optional[RaftConfig] = None,
                 replica_config: Optional[ReplicaConfig] = None,
                 default_replication_factor: Optional[int] = None,
                 racks: Optional[Sequence[Optional[str]]] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 inter_broker_ssl: Optional[ssl.SSLContext] = None,
                 inter_broker_sasl: Optional[SaslConfig] = None,
                 scram_users: Optional[Mapping[str, str]] = None,
                 inter_broker_protocol: Optional[str] = None,
                 inter_broker_listener_name: str = "INTERNAL",
                 **broker_config: Any) -> None:
        if brokers < 1 or controllers < 1:
            raise ValueError("a cluster needs at least one broker and one controller")
        if racks is not None and len(racks) != brokers:
            raise ValueError(f"{len(racks)} racks given for {brokers} brokers")
        if broker_config.get("sasl_enabled_mechanisms") and inter_broker_sasl is None:
            raise ValueError("SASL listeners need inter_broker_sasl: the credentials brokers "
                             "authenticate to each other with")
        if ssl_context is not None and inter_broker_ssl is None:
            raise ValueError("TLS listeners need inter_broker_ssl: the client context nodes "
                             "connect to each other with")
        if inter_broker_protocol is not None:
            if inter_broker_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
                raise ValueError(f"unknown security protocol {inter_broker_protocol!r}")
            if "SSL" in inter_broker_protocol and (ssl_context is None or inter_broker_ssl is None):
                raise ValueError(f"an {inter_broker_protocol} inter-broker listener needs ssl_context "
                                 "and inter_broker_ssl")
            if inter_broker_protocol.startswith("SASL_") and (
                    not broker_config.get("sasl_enabled_mechanisms") or inter_broker_sasl is None):
                raise ValueError(f"a {inter_broker_protocol} inter-broker listener needs "
                                 "sasl_enabled_mechanisms and inter_broker_sasl")
            broker_config["inter_broker_listener_name"] = inter_broker_listener_name
            broker_config["inter_broker_security_protocol"] = inter_broker_protocol
        self.scram_users = dict(scram_users or {})
        mechanisms = tuple(broker_config.get("sasl_enabled_mechanisms", ()))
        # the controllers' listener takes the brokers' mechanisms, OAUTHBEARER validated as the
        # brokers validate it, sessions bounded alike
        controller_security = BrokerConfig(
            sasl_enabled_mechanisms=mechanisms,
            sasl_users={**broker_config.get("sasl_users", {}), **self.scram_users},
            scram_iterations=broker_config.get("scram_iterations", 4096),
            **{k: v for k, v in broker_config.items()
               if k.startswith("oauthbearer_") or k == "connections_max_reauth_ms"}) if mechanisms else None
        self._tmp: Optional[Any] = None
        if data_dir is None:
            import tempfile
            self._tmp = tempfile.TemporaryDirectory(prefix="kproto-cluster-")
            data_dir = self._tmp.name
        self.data_dir = os.fspath(data_dir)
        self.host = host
        self.cluster_id = cluster_id or self._stored_cluster_id() or str(Uuid(os.urandom(16)))
        self.network = NodeNetwork()
        self.controller_ids = [CONTROLLER_ID_BASE + i for i in range(1, controllers + 1)]
        self.broker_ids = list(range(1, brokers + 1))
        ccfg = ControllerConfig(
            cluster_id=self.cluster_id, broker_session_timeout_ms=broker_session_timeout_ms,
            broker_heartbeat_interval_ms=broker_heartbeat_interval_ms,
            default_replication_factor=(default_replication_factor if default_replication_factor
                                        is not None else min(3, brokers)),
            num_partitions=broker_config.get("num_partitions", 1),
            min_insync_replicas=broker_config.get("min_insync_replicas", 1),
            transaction_version=broker_config.get("transaction_version", TRANSACTION_VERSION_LEVEL),
            unclean_leader_election_enable=broker_config.pop("unclean_leader_election_enable", False),
            # the brokers keep the token settings too: they compute the HMACs they authenticate
            **{k: v for k, v in broker_config.items() if k.startswith("delegation_token_")})
        self.controllers = {
            n: ControllerNode(n, self.controller_ids, os.path.join(self.data_dir, f"controller-{n}"),
                              cluster_id=self.cluster_id, network=self.network, host=host,
                              raft_config=raft_config, controller_config=ccfg,
                              ssl_context=ssl_context, security_config=controller_security)
            for n in self.controller_ids}
        sasl = inter_broker_sasl if broker_config.get("sasl_enabled_mechanisms") else None
        for n in self.controller_ids:
            self.network.secure(n, inter_broker_ssl, sasl)
        for n in self.broker_ids:
            if inter_broker_protocol is None:
                self.network.secure(n, inter_broker_ssl, sasl)
            else:  # the brokers' own listener for each other
                self.network.secure(n, inter_broker_ssl if "SSL" in inter_broker_protocol else None,
                                    sasl if inter_broker_protocol.startswith("SASL_") else None)
        self.brokers = {
            n: ClusterBroker(n, os.path.join(self.data_dir, f"broker-{n}"), voters=self.controller_ids,
                             network=self.network, cluster_id=self.cluster_id,
                             raft_config=raft_config, replica_config=replica_config,
                             broker_heartbeat_interval_ms=broker_heartbeat_interval_ms, host=host,
                             port=port + i if port else 0,
                             rack=racks[i] if racks is not None else None,
                             ssl_context=ssl_context, **broker_config)
            for i, n in enumerate(self.broker_ids)}
        self._client_cuts: dict[int, list[Any]] = {}
        #: what could not be read of the brokers' old JSON files at the last start_all
        self.migration_problems: list[str] = []

    def _stored_cluster_id(self) -> Optional[str]:
        """The id a data dir of an earlier run was formatted with (restarting a cluster)."""
        from kproto.storage.checkpoints import MetaProperties
        for name in sorted(os.listdir(self.data_dir)) if os.path.isdir(self.data_dir) else ():
            path = os.path.join(self.data_dir, name, "meta.properties")
            if os.path.exists(path):
                with open(path, "rb") as f:
                    return MetaProperties.parse(f.read()).cluster_id
        return None

    # ------------------------------------------------------------------ lifecycle
    async def start_all(self, timeout: float = 30.0) -> Cluster:
        """Start the quorum, then the brokers; returns once every broker is unfenced. Configs,
        ACLs and SCRAM credentials found in the brokers' JSON files of an older kproto
        (``kproto-configs.json``, ``kproto-security.json``) are first written to the metadata
        log by the active controller, and the files renamed to ``*.migrated``."""
        await start_quorum(self.controllers.values())
        await self._migrate_state_files(timeout)
        await self._bootstrap_scram(timeout)
        for b in self.brokers.values():
            await b.start()
        await self.wait_for(lambda: all(b.core is not None and b.core.ready for b in self.brokers.values()),
                            timeout, "every broker registered and unfenced")
        return self

    async def _bootstrap_scram(self, timeout: float) -> None:
        """``scram_users``' credentials that the metadata lacks, written by the active
        controller before any broker starts."""
        if not self.scram_users:
            return
        state = LegacyState(scram={(mech, user): ScramCredential.from_password(mech, password)
                                   for user, password in self.scram_users.items()
                                   for mech in SCRAM_MECHANISM_IDS})
        await self._write_state(state, timeout)

    async def _migrate_state_files(self, timeout: float) -> None:
        dirs = [os.path.join(self.data_dir, f"broker-{n}") for n in self.broker_ids]
        state = read_legacy_state(dirs)
        self.migration_problems = state.problems
        if not state.files:
            return
        await self._write_state(state, timeout)
        retire_files(state)

    async def _write_state(self, state: LegacyState, timeout: float) -> None:
        """Have the active controller write what ``state`` has and the metadata lacks."""
        await self.wait_for(lambda: self.active_controller() is not None, timeout,
                            "an active controller")
        controller = self.controllers[self.active_controller()].controller  # type: ignore[index]
        records = migration_records(state, controller.image, controller.new_acl_id)
        if not records:
            return
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()

        def committed(ok: bool) -> None:
            if not done.done():
                done.set_result(ok)
        controller.write_records(records, committed)
        if not await asyncio.wait_for(done, timeout):
            raise RuntimeError("the active controller resigned before the migrated state was committed")

    async def __aenter__(self) -> Cluster:
        return await self.start_all()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, controlled: bool = False) -> None:
        """Stop every node, then the network: the brokers cleanly but without a controlled
        shutdown, or with ``controlled`` one after another with theirs first, as Kafka's
        brokers stop on SIGTERM (the metadata then records each one fenced: a cluster started
        later on these directories, kproto's or Apache Kafka's, registers them again at once)."""
        for b in self.brokers.values():
            if b.running:
                if controlled:
                    await b.stop()
                else:
                    await b.close(clean=True)
            await b.settle()
        for c in self.controllers.values():
            if c.running:
                await c.stop()
        await self.network.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def stop(self, node: int, abrupt: bool = False) -> None:
        """Stop a broker or a controller: gracefully (a broker's controlled shutdown, a
        controller leader's resignation) or ``abrupt`` as kill -9."""
        if node in self.brokers:
            await self.brokers[node].stop(abrupt=abrupt)
        elif node in self.controllers:
            await self.controllers[node].stop(abrupt=abrupt)
        else:
            raise KeyError(f"no node {node}")

    async def start(self, node: int) -> None:
        """Start a stopped node again over its data directory (recovered as Kafka would)."""
        if node in self.brokers:
            b = self.brokers[node]
            if not b.running:
                await b.start()  # on the port it had: clients' bootstrap lists stay valid
        elif node in self.controllers:
            await self.controllers[node].start()
        else:
            raise KeyError(f"no node {node}")

    # ------------------------------------------------------------------ faults
    def partition_network(self, a: int, b: int) -> None:
        """Cut the link between nodes ``a`` and ``b`` both ways (requests and answers lost)."""
        self.network.partition(a, b)

    def isolate(self, node: int) -> None:
        """Cut ``node`` from every other node."""
        self.network.isolate(node, self.broker_ids + self.controller_ids)

    def slow(self, a: int, b: int, delay_ms: int) -> None:
        """Delay everything between ``a`` and ``b`` by ``delay_ms`` (0: no delay)."""
        self.network.slow(a, b, delay_ms)

    def slow_disk(self, node: int, delay_ms: int) -> None:
        """Every client request to broker ``node`` waits ``delay_ms`` first (a slow disk as
        clients see it: appends and reads answer late); 0 ends it."""
        self._hook_clients(node, Intercept(delay_ms=delay_ms) if delay_ms > 0 else None)

    def cut_clients(self, node: int) -> None:
        """Cut clients off broker ``node``: their connections are dropped at their next
        request (nodes keep talking to it)."""
        self._hook_clients(node, Intercept(drop=True))

    def heal(self, node: Optional[int] = None) -> None:
        """Mend every cut and delay between nodes and between clients and brokers, or only
        those of ``node``."""
        self.network.heal(node)
        for n in list(self._client_cuts):
            if node is None or n == node:
                self._hook_clients(n, None)

    def _hook_clients(self, node: int, action: Optional[Intercept]) -> None:
        for handle in self._client_cuts.pop(node, []):
            handle.remove()
        broker = self.brokers[node]
        if action is None or broker.core is None:
            return

        def hook(header: Any, body: Any) -> Optional[Intercept]:
            return None if (header.client_id or "").startswith(_NODE_CLIENT_PREFIX) else action

        from kproto.codecs import request as request_codec
        keys = broker.core.api_versions()
        self._client_cuts[node] = [broker.core.control(k, hook, times=None) for k in keys
                                   if request_codec(k) is not None]

    # ------------------------------------------------------------------ views
    @property
    def bootstrap(self) -> str:
        """``host:port,...`` of the running brokers."""
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def image(self) -> MetadataImage:
        """The freshest metadata image: the active controller's, else a running broker's."""
        for c in self.controllers.values():
            if c.is_leader:
                return c.controller.image
        best: Optional[MetadataImage] = None
        for b in self.brokers.values():
            if b.core is not None and (best is None or b.core.image.offset > best.offset):
                best = b.core.image
        if best is None:
            raise RuntimeError("no node is running")
        return best

    def leader(self, topic: str, partition: int) -> Optional[int]:
        """The partition's leader in the metadata (None: no leader, or no such partition)."""
        p = self.image().partition(topic, partition)
        return None if p is None or p.leader < 0 else p.leader

    def isr(self, topic: str, partition: int) -> list[int]:
        p = self.image().partition(topic, partition)
        return [] if p is None else list(p.isr)

    def active_controller(self) -> Optional[int]:
        for n, c in self.controllers.items():
            if c.is_leader:
                return n
        return None

    async def wait_for(self, condition: Any, timeout: float = 30.0, what: str = "condition") -> None:
        """Poll ``condition()`` until true; TimeoutError naming ``what`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            await asyncio.sleep(0.02)

    async def create_topic(self, name: str, partitions: int = 1, replication_factor: int = -1,
                           configs: Optional[dict[str, str]] = None, timeout: float = 30.0) -> None:
        """Create a topic through the active controller and wait until every broker has it
        with a leader for each partition."""
        from kproto.codecs import request as request_codec
        from kproto.schemas.api_keys import ApiKey
        cls = request_codec(ApiKey.CREATE_TOPICS).cls
        body = cls(topics=[cls.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor, assignments=[],
            configs=[cls.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])],
            timeout_ms=int(timeout * 1000), validate_only=False)
        broker = next(b for b in self.brokers.values() if b.core is not None)
        assert broker.core is not None
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        broker.core.send_to_controller(ApiKey.CREATE_TOPICS, 7, body,
                                       lambda r: _settle(done, r),
                                       int(timeout * 1000))
        broker.arm_timer()
        resp = await done
        if resp is None:
            raise TimeoutError(f"no answer from the controller creating {name}")
        code = resp.topics[0].error_code
        if code:
            from kproto.error_codes import ErrorCode
            raise RuntimeError(f"creating {name}: {ErrorCode(code).name} {resp.topics[0].error_message or ''}")

        def everywhere() -> bool:
            for b in self.brokers.values():
                if b.core is None:
                    continue
                t = b.core.image.topics.get(name)
                if t is None or len(t.partitions) != partitions or \
                        any(p.leader < 0 for p in t.partitions.values()):
                    return False
            return True

        await self.wait_for(everywhere, timeout, f"topic {name} on every broker")


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    """Resolve ``future`` with ``value`` unless it already is."""
    if not future.done():
        future.set_result(value)
