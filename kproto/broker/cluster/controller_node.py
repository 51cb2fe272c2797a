"""A KRaft controller node on a real socket: one voter of the controller quorum.

:class:`ControllerCore` is the sans-I/O part: it decodes request frames and routes the Raft
APIs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, DescribeQuorum, FetchSnapshot) to the node's
:class:`~kproto.broker.cluster.raft.KRaftReplica` and the controller APIs (BrokerRegistration,
BrokerHeartbeat, CreateTopics, AlterPartition, ...) to its
:class:`~kproto.broker.cluster.controller.QuorumController`, which answers NOT_CONTROLLER unless it is
the active controller, as Kafka's does. One :class:`~kproto.broker.timer.SystemTimer` drives
both.

:class:`ControllerNode` puts it behind the broker's :class:`~kproto.broker.server.Listener`
and sends Raft's requests through a :class:`~kproto.broker.cluster.network.NodeNetwork`. Addresses:
a quorum needs every voter's address before its Raft replicas start, so a node first binds
its port (:meth:`ControllerNode.listen`, port 0: a free one) and registers it in the network;
:func:`start_quorum` binds every node before starting any replica. A node restarted later binds
a new port and registers it again (the network drops the old connections).

    network = NodeNetwork()
    nodes = [ControllerNode(n, [1, 2, 3], tmp / f"c{n}", cluster_id=cid, network=network)
             for n in (1, 2, 3)]
    await start_quorum(nodes)

The data directory is a Kafka controller's log dir: ``meta.properties`` and the
``__cluster_metadata-0`` partition folder with ``quorum-state``.
"""
from __future__ import annotations

import dataclasses
import os
import ssl
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from kproto.broker.cluster.controller import METADATA_VERSION_3_7, ControllerConfig, QuorumController
from kproto.broker.core import Channel, Request, api_versions_refusal, parse_request
from kproto.broker.features import METADATA_VERSION, set_api_versions_features, supported_features
from kproto.broker.cluster.network import NodeNetwork
from kproto.broker.cluster.raft import (BEGIN_QUORUM_EPOCH, DESCRIBE_QUORUM, END_QUORUM_EPOCH, FETCH,
                                FETCH_SNAPSHOT, VOTE, KRaftReplica, RaftConfig, RaftMetadataLog,
                                RaftTransport, open_metadata_log)
from kproto.broker.configs import BrokerConfig
from kproto.broker.security.auth import SASL_VERSIONS, Security
from kproto.broker.security.tokens import TOKEN_CHANGES, TOKEN_VERSIONS, TokenRequest, decode_principal
from kproto.broker.server import Listener
from kproto.broker.timer import CallbackTask, Clock, SystemTimer
from kproto.codecs import request as request_codec
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.errors import DecodeError
from kproto.framing import ResponseHeader, encode_response, peek_request_header
from kproto.schemas.api_keys import ApiKey
from kproto.storage.checkpoints import MetaProperties

__all__ = ["ControllerCore", "ControllerNode", "RaftMetadataLog", "RAFT_APIS", "CONTROLLER_APIS",
           "start_quorum"]

#: Raft APIs and the versions the replica's handlers read, as Kafka 4.4's controller lists them
#: (a Fetch before v13 names no topic id: refused INVALID_REQUEST, as Kafka does; Vote v2 is
#: Kafka 4's pre-vote, which the replica answers).
RAFT_APIS: dict[int, tuple[int, int]] = {
    FETCH: (4, 18), VOTE: (0, 2), BEGIN_QUORUM_EPOCH: (0, 1), END_QUORUM_EPOCH: (0, 1),
    DESCRIBE_QUORUM: (0, 2), FETCH_SNAPSHOT: (0, 1),
}
#: Controller APIs and the versions the QuorumController's handlers were written for (a
#: Kafka 3.9 controller's ranges, CreateTopics/DeleteTopics as the broker's; AlterPartitionReassignments
#: v1, KIP-860's allow_replication_factor_change, as the single broker serves it).
CONTROLLER_APIS: dict[int, tuple[int, int]] = {
    ApiKey.BROKER_REGISTRATION: (0, 4),
    ApiKey.BROKER_HEARTBEAT: (0, 2),  # v2's cordoned log directories are not kept
    ApiKey.UNREGISTER_BROKER: (0, 0),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.ALTER_PARTITION: (2, 3),  # Kafka 4 dropped v0-1 (KIP-896)
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.CREATE_ACLS: (1, 3),  # Kafka 4 dropped v0 (KIP-896)
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
    ApiKey.UPDATE_FEATURES: (0, 2),
    ApiKey.CONTROLLER_REGISTRATION: (0, 0),
    ApiKey.UNREGISTER_CONTROLLER: (0, 0),
    ApiKey.ENVELOPE: (0, 0),  # a broker's forwarded request with its client's principal
}
#: how often a controller checks that the metadata log holds its registration
_REGISTRATION_CHECK_MS = 500
_API_VERSIONS_RANGE = (0, 5)


def _advertised() -> dict[int, tuple[int, int]]:
    """What this node serves: the handlers' ranges within the versions the codecs know."""
    out: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in {**RAFT_APIS, **CONTROLLER_APIS,
                          ApiKey.API_VERSIONS: _API_VERSIONS_RANGE}.items():
        valid = request_codec(key).valid_versions
        lo2, hi2 = max(lo, valid.start), min(hi, valid[-1])
        if lo2 <= hi2:
            out[int(key)] = (lo2, hi2)
    return out


class ControllerCore:
    """A controller node's requests and timer, sans-I/O (the ``core`` a
    :class:`~kproto.broker.server.Listener` drives): the Raft replica of
    ``__cluster_metadata-0`` under ``data_dir`` and the quorum controller over it."""

    def __init__(self, node_id: int, voters: Sequence[int], data_dir: str, *, cluster_id: str,
                 transport: RaftTransport, raft_config: Optional[RaftConfig] = None,
                 controller_config: Optional[ControllerConfig] = None,
                 clock: Optional[Clock] = None,
                 addresses: Optional[Mapping[int, tuple[str, int]]] = None,
                 security: Optional[Security] = None, security_protocol: int = 0) -> None:
        """``security``: SASL on the listener (only SaslHandshake and SaslAuthenticate, then
        ApiVersions, before a connection is authenticated); ``security_protocol``: the
        listener's (Kafka's SecurityProtocol id), named in the controller's registration."""
        self.security_protocol = security_protocol
        self.node_id = node_id
        self.security = security if security is not None and security.sasl else None
        #: the controllers' (host, port), for DescribeQuorum's nodes
        self.addresses = addresses if addresses is not None else {}
        self.timer = SystemTimer(clock=clock)
        self.log = open_metadata_log(data_dir, raft_config)
        self.replica = KRaftReplica(node_id, voters, self.log, cluster_id=cluster_id,
                                    transport=transport, timer=self.timer, config=raft_config)
        # a copy: one config object may be given to every node of the quorum
        cfg = dataclasses.replace(controller_config or ControllerConfig(), node_id=node_id,
                                  cluster_id=cluster_id, voters=tuple(voters))
        self.controller = QuorumController(node_id, RaftMetadataLog(self.replica), self.timer, cfg)
        self.replica.register(self.controller)
        self.versions = _advertised()
        if self.security is not None:
            self.versions.update(SASL_VERSIONS)
        self.closed = False
        self.transport = transport
        self.incarnation_id = Uuid(os.urandom(16))
        self._registering = False
        self._check_registration()

    # ------------------------------------------------------------------ time
    def next_deadline_ms(self) -> Optional[int]:
        return self.timer.next_expiration_ms()

    def advance_clock(self) -> None:
        """Run the due Raft and controller tasks (elections, fetches, session checks)."""
        self.timer.advance_clock()

    # ------------------------------------------------------------------ registration
    def _check_registration(self) -> None:
        """Kafka's ControllerRegistrationManager: once the metadata log is at a version with
        controller registrations and holds none of this incarnation, ask the active controller
        (this one too) for one, with the controller listener and the supported features."""
        if self.closed:
            return
        self.timer.add(CallbackTask(_REGISTRATION_CHECK_MS, self._check_registration))
        committed = self.controller.committed
        leader = self.replica.leader_id
        mine = committed.controllers.get(self.node_id)
        if (self._registering or leader is None or self.node_id not in self.addresses
                or committed.features.get(METADATA_VERSION, 0) < METADATA_VERSION_3_7
                or (mine is not None and mine.incarnation_id == self.incarnation_id)):
            return
        cls = request_codec(ApiKey.CONTROLLER_REGISTRATION).cls
        host, port = self.addresses[self.node_id]
        body = cls(controller_id=self.node_id, incarnation_id=self.incarnation_id, zk_migration_ready=False,
                   listeners=[cls.Listener(name="CONTROLLER", host=host, port=port,
                                           security_protocol=self.security_protocol)],
                   features=[cls.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                             for n, (lo, hi) in supported_features().items()])
        self._registering = True

        def answered(resp: Optional[Any]) -> None:
            self._registering = False  # checked again at the next tick either way
        self.transport.send(leader, ApiKey.CONTROLLER_REGISTRATION, 0, body, answered, 5000)

    # ------------------------------------------------------------------ requests
    def handle(self, channel: Channel, frame: bytes) -> None:
        """One request frame (without its size prefix); the channel gets one ``respond`` or
        ``close`` for it, now or later (a Raft Fetch waits for data)."""
        sec = self.security
        try:
            key, ver, cid = peek_request_header(frame, size_prefix=False)
        except DecodeError as exc:
            if sec is not None and sec.gate(channel, frame, None):  # a legacy SASL token
                return
            channel.close(f"bad request header: {exc}")
            return
        if sec is not None and sec.gate(channel, frame, key):  # before authentication: SASL only
            return
        rng = self.versions.get(key)
        if key == ApiKey.API_VERSIONS and ver > self.versions[key][1]:
            # KIP-511: a version too new is answered in v0 form with the versions we have
            self._api_versions(cid, 0, channel, ErrorCode.UNSUPPORTED_VERSION, only=key)
            return
        if rng is None or not rng[0] <= ver <= rng[1]:
            # Kafka closes a connection whose request it cannot serve on this listener
            channel.close(f"API key {key} v{ver} not served by a controller")
            return
        try:
            header, body = parse_request(frame, key, ver)
        except DecodeError as exc:
            channel.close(f"cannot parse request (API key {key} v{ver}): {exc}")
            return
        req = Request(channel, header, body, key, ver, self.timer.clock.now_ms())
        if self.closed:
            channel.close("controller shutting down")
        elif key == ApiKey.API_VERSIONS:
            refused = api_versions_refusal(body, ver, self.controller.config.cluster_id, self.node_id)
            self._api_versions(cid, ver, channel, refused)
        elif sec is not None and key == ApiKey.SASL_HANDSHAKE:
            sec.handshake(channel, body, ver, req.respond)
        elif sec is not None and key == ApiKey.SASL_AUTHENTICATE:
            sec.authenticate(channel, body, ver, req.respond)
        elif key == DESCRIBE_QUORUM:
            self.replica.handle(key, ver, body, lambda resp: req.respond(self._with_nodes(ver, resp)))
        elif key in RAFT_APIS:
            self.replica.handle(key, ver, body, req.respond)
        elif key == ApiKey.ENVELOPE:
            self._envelope(req)
        else:
            principal = sec.session(channel).principal if sec is not None else "User:ANONYMOUS"
            self.controller.handle(key, ver, body, req.respond,
                                   (principal.split(":", 1)[-1], header.client_id or ""))

    def _envelope(self, req: Request) -> None:
        """A request a broker forwarded (Kafka's EnvelopeRequest): served as its client's,
        under the principal and client id it carries; its answer goes back in the envelope."""
        cls = response_codec(ApiKey.ENVELOPE).cls
        if not self.controller.active:
            req.respond(cls(error_code=ErrorCode.NOT_CONTROLLER, response_data=None))
            return
        try:
            frame = bytes(req.body.request_data)
            key, ver, _ = peek_request_header(frame, size_prefix=False)
            rng = CONTROLLER_APIS.get(key) if key not in TOKEN_CHANGES else TOKEN_VERSIONS[key]
            if key == ApiKey.ENVELOPE or rng is None or not rng[0] <= ver <= rng[1]:
                req.respond(cls(error_code=ErrorCode.INVALID_REQUEST, response_data=None))
                return
            header, body = parse_request(frame, key, ver)
            principal, token_authenticated = decode_principal(bytes(req.body.request_principal or b""))
        except DecodeError:
            req.respond(cls(error_code=ErrorCode.INVALID_REQUEST, response_data=None))
            return
        address = bytes(req.body.client_host_address)
        # token changes are served only forwarded (the controller takes no token request itself)
        requester = TokenRequest(principal, ".".join(map(str, address)) if len(address) == 4 else "",
                                 not token_authenticated) if key in TOKEN_CHANGES else None

        def answer(resp: Any) -> None:
            data = encode_response(ResponseHeader(correlation_id=header.correlation_id), resp, key, ver)
            req.respond(cls(error_code=ErrorCode.NONE, response_data=data[4:]))  # no size prefix
        self.controller.handle(key, ver, body, answer, (principal.split(":", 1)[-1], header.client_id or ""),
                               requester)

    def _with_nodes(self, ver: int, resp: Any) -> Any:
        """DescribeQuorum v2+ names the voters' controller listeners, as Kafka's does."""
        parts = [p for t in resp.topics for p in t.partitions if p.error_code == ErrorCode.NONE]
        if ver >= 2 and parts:
            cls = type(resp)
            resp.nodes = [cls.Node(node_id=v.replica_id, listeners=[cls.Listener(
                name="CONTROLLER", host=self.addresses[v.replica_id][0], port=self.addresses[v.replica_id][1])])
                for v in parts[0].current_voters if v.replica_id in self.addresses]
        return resp

    def _api_versions(self, cid: int, ver: int, channel: Channel, code: int,
                      only: Optional[int] = None) -> None:
        cls = response_codec(ApiKey.API_VERSIONS).cls
        # a refused request (not KIP-511's version fallback) is answered with its error alone
        keys = [only] if only is not None else [] if code else sorted(self.versions)
        body = cls(error_code=code, api_keys=[
            cls.ApiVersion(api_key=k, min_version=self.versions[k][0],
                           max_version=self.versions[k][1]) for k in keys])
        if ver >= 3 and only is None and not code:
            # as Kafka's controller: the committed levels, their epoch the offset of the last
            # feature change
            committed = self.controller.committed
            set_api_versions_features(body, ver, committed.features, committed.features_offset)
        channel.respond(encode_response(ResponseHeader(correlation_id=cid), body,
                                        ApiKey.API_VERSIONS, ver))

    def close(self, clean: bool = True) -> None:
        """Stop. ``clean``: a leader resigns first (EndQuorumEpoch) and the log is closed with
        its checkpoints; otherwise the replica just stops, as a killed process would, and
        the quorum state stays as it was."""
        if self.closed:
            return
        self.closed = True
        self.replica.shutdown(graceful=clean)
        self.log.close(clean)


def _ensure_meta_properties(data_dir: str, node_id: int, cluster_id: str) -> None:
    """``meta.properties`` as ``kafka-storage format`` writes it for a controller; an existing
    one must be this node's and this cluster's (Kafka refuses to start otherwise)."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, "meta.properties")
    if os.path.exists(path):
        with open(path, "rb") as f:
            meta = MetaProperties.parse(f.read())
        if meta.node_id not in (None, node_id) or meta.cluster_id not in (None, cluster_id):
            raise ValueError(f"{path} belongs to node {meta.node_id} of cluster "
                             f"{meta.cluster_id}, not node {node_id} of {cluster_id}")
        return
    props = {"version": "1", "cluster.id": cluster_id, "node.id": str(node_id),
             "directory.id": str(Uuid(os.urandom(16)))}
    with open(path, "wb") as f:
        f.write(MetaProperties(props).encode())


class ControllerNode:
    """One controller of the quorum, serving the Kafka protocol on ``host:port``.

    ``voters``: the voter ids, or a mapping id -> (host, port) of addresses known in advance
    (registered in ``network``). ``port`` 0: a free port at each start.
    """

    def __init__(self, node_id: int, voters: Union[Mapping[int, tuple[str, int]], Iterable[int]],
                 data_dir: Union[str, os.PathLike[str]], *, cluster_id: str, network: NodeNetwork,
                 host: str = "127.0.0.1", port: int = 0, raft_config: Optional[RaftConfig] = None,
                 controller_config: Optional[ControllerConfig] = None,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 security_config: Optional[BrokerConfig] = None) -> None:
        """``ssl_context``: the listener's (a server context), making it SSL;
        ``security_config``: its SASL settings (``sasl_enabled_mechanisms``, ``sasl_users``,
        as a broker's), making it SASL_PLAINTEXT or SASL_SSL."""
        self.node_id = node_id
        self.ssl_context = ssl_context
        self.security_config = security_config
        if isinstance(voters, Mapping):
            for v, (h, p) in voters.items():
                if v != node_id:
                    network.register(v, h, p)
        self.voters = sorted(voters)
        self.data_dir = os.fspath(data_dir)
        self.cluster_id = cluster_id
        self.network = network
        self.host, self.requested_port = host, port
        self.port = 0
        self.raft_config = raft_config
        self.controller_config = controller_config
        self.listener: Optional[Listener] = None
        self.core: Optional[ControllerCore] = None

    async def listen(self) -> int:
        """Bind the port and register it in the network (no Raft yet); the port."""
        if self.listener is None:
            self.listener = Listener(ssl_context=self.ssl_context)
            self.port = await self.listener.listen(self.host, self.requested_port)
            self.network.register(self.node_id, self.host, self.port)
        return self.port

    async def start(self) -> ControllerNode:
        """Listen (if not yet) and start the Raft replica and the controller, recovering the
        data dir left by an earlier run."""
        await self.listen()
        assert self.listener is not None
        if self.core is None:
            _ensure_meta_properties(self.data_dir, self.node_id, self.cluster_id)
            security = Security(self.security_config) if self.security_config is not None else None
            listener = self.listener
            transport = self.network.transport(self.node_id, after=listener.arm_timer)
            self.core = ControllerCore(self.node_id, self.voters, self.data_dir,
                                       cluster_id=self.cluster_id, transport=transport,
                                       raft_config=self.raft_config,
                                       controller_config=self.controller_config,
                                       addresses=self.network.addresses,
                                       security=security,
                                       security_protocol=(2 if security is not None and security.sasl else 0)
                                       + (1 if self.ssl_context is not None else 0))
            listener.core = self.core
            listener.arm_timer()
        return self

    async def stop(self, abrupt: bool = False) -> None:
        """Stop serving. Graceful: a leader hands over (EndQuorumEpoch) before the sockets
        close. ``abrupt``: as a killed process, sockets gone, nothing more written."""
        core, listener = self.core, self.listener
        self.core = self.listener = None
        if core is not None:
            # before any await: a stopped node handles nothing more (gracefully, a leader
            # first resigns and sends EndQuorumEpoch to the others)
            core.close(clean=not abrupt)
        if listener is not None:
            listener.core = None
            await listener.stop_listening()
        if abrupt:
            # a graceful stop keeps its own connections: its EndQuorumEpoch may be on them
            self.network.drop_connections(self.node_id)

    # ------------------------------------------------------------------ views
    @property
    def running(self) -> bool:
        return self.core is not None

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the listener."""
        return f"{self.host}:{self.port}"

    @property
    def replica(self) -> KRaftReplica:
        assert self.core is not None, f"controller {self.node_id} is not running"
        return self.core.replica

    @property
    def controller(self) -> QuorumController:
        assert self.core is not None, f"controller {self.node_id} is not running"
        return self.core.controller

    @property
    def is_leader(self) -> bool:
        """Running and the Raft leader with its controller active."""
        return self.core is not None and self.core.replica.is_leader \
            and self.core.controller.is_active


async def start_quorum(nodes: Iterable[ControllerNode]) -> None:
    """Bind every node's port first, then start the replicas: no voter asks a peer whose
    address is not yet known."""
    nodes = list(nodes)
    for n in nodes:
        await n.listen()
    for n in nodes:
        await n.start()
