"""Share groups (KIP-932) on a broker of a cluster, placed as Apache Kafka places them.

* The share-group coordinator (membership, assignment, the offsets admin APIs) is the group
  coordinator: the leader of the group's ``__consumer_offsets`` partition. It assigns a
  partition once its share coordinator has initialized the partition's state
  (:class:`ClusterShareGroupCoordinator`); a lag is counted from the partition leader's high
  watermark (:func:`high_watermarks`).
* A share-partition's in-flight records live on the leader of its data partition, which serves
  ShareFetch and ShareAcknowledge (:class:`ClusterSharePartitionManager`).
* Its durable state lives with the share coordinator, the leader of the ``__share_group_state``
  partition its key ``group:topicId:partition`` hashes to (FindCoordinator key type 2). The
  other brokers reach it through :class:`RemoteSharePersister` with the inter-broker
  Initialize/Read/Write/DeleteShareGroupState RPCs (a call in place when it is this broker);
  it answers a change once its ``__share_group_state`` records are replicated
  (:func:`serve_state_rpc`), and replays them when it becomes the partition's leader.

A new leader of a data partition reads its share-partitions' state from the share coordinator
at their first fetch (:class:`~kproto.broker.share_fetch.StateLoading` until it is there):
records the old leader handed out but were not acknowledged are delivered again, acknowledged
ones are not. A ShareFetch or ShareAcknowledge is answered once the state changes it made are
written to the share coordinator.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Optional

from kproto.broker.coordinators.offsets_topic import partition_for
from kproto.broker.coordinators.share_group import ShareGroupCoordinator
from kproto.broker.core import error_response
from kproto.broker.coordinators.share_state import (SHARE_STATE_TOPIC, ShareState, ShareStateCoordinator,
                                                    merge_batches, share_key)
from kproto.broker.log import BrokerError
from kproto.broker.share_fetch import SharePartitionManager, StateLoading
from kproto.broker.timer import CallbackTask
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey

#: the cluster broker's core (``kproto.broker.cluster.broker.ClusterBrokerCore``), which builds
#: this module's parts: not imported here, not even for type checking, so that neither module
#: needs the other first
ClusterCore = Any

__all__ = ["RemoteSharePersister", "ClusterSharePartitionManager", "ClusterShareGroupCoordinator",
           "serve_state_rpc", "STATE_RPCS", "share_offsets_handler",
           "answer_when_flushed", "high_watermarks"]

log = logging.getLogger("kproto.broker.share")

Key = tuple[str, Uuid, int]
#: the persister's RPCs and the versions a broker sends them at (Kafka 4.4's)
STATE_RPCS: dict[int, int] = {ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0, ApiKey.READ_SHARE_GROUP_STATE: 0,
                              ApiKey.WRITE_SHARE_GROUP_STATE: 1, ApiKey.DELETE_SHARE_GROUP_STATE: 0,
                              ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 1}
#: answers after which the share coordinator is looked up again and asked once more
_RETRIABLE = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS,
                        E.REQUEST_TIMED_OUT, E.NETWORK_EXCEPTION, E.NOT_ENOUGH_REPLICAS,
                        E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION})
_RETRY_MS = 100
_LIST_OFFSETS_VERSION = 7
_GIVE_UP_MS = 30_000


def _first_partition(resp: Any) -> Any:
    return resp.results[0].partitions[0] if resp.results and resp.results[0].partitions else None


class _Op:
    """One request to a key's share coordinator, and what is done with its partition answer."""

    __slots__ = ("api_key", "body", "then", "seq", "since")

    def __init__(self, api_key: int, body: Any, then: Optional[Callable[[Optional[Any]], None]], seq: int) -> None:
        self.api_key, self.body, self.then, self.seq = api_key, body, then, seq
        self.since = -1


class RemoteSharePersister:
    """The persister of a broker of a cluster (the interface of
    :class:`~kproto.broker.coordinators.share_state.ShareStateCoordinator` that the
    share-partitions and the share-group coordinator use): states are kept here as they were
    last read or written, every change is sent to the key's share coordinator in order (one
    request in flight per key; consecutive writes of a key folded into the newest, which
    carries the whole in-flight window), retried while the coordinator moves."""

    def __init__(self, core: ClusterCore) -> None:
        self.core = core
        self.states: dict[Key, ShareState] = {}
        self._queues: dict[Key, list[_Op]] = {}
        self._busy: set[Key] = set()
        self._seq = 0
        self._done: dict[Key, int] = {}
        self._barriers: list[tuple[dict[Key, int], Callable[[], None]]] = []
        self._loading: set[Key] = set()

    # ------------------------------------------------------------------ ShareStore
    def read(self, key: Key) -> Optional[ShareState]:
        return self.states.get(key)

    def initialize(self, key: Key, state_epoch: int, start_offset: int) -> None:
        now = self.core.wall_ms()
        self.states[key] = ShareState(state_epoch=state_epoch, leader_epoch=0, start_offset=start_offset,
                                      create_ms=now, write_ms=now)
        cls = request_codec(ApiKey.INITIALIZE_SHARE_GROUP_STATE).cls
        self._enqueue(key, ApiKey.INITIALIZE_SHARE_GROUP_STATE, cls(group_id=key[0], topics=[
            cls.InitializeStateData(topic_id=key[1], partitions=[
                cls.PartitionData(partition=key[2], state_epoch=state_epoch, start_offset=start_offset)])]))

    def write(self, key: Key, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: list[tuple[int, int, int, int]]) -> tuple[int, Optional[str]]:
        s = self.states.get(key)
        if s is not None:
            s.leader_epoch, s.delivery_complete_count = leader_epoch, delivery_complete_count
            if start_offset >= 0:
                s.start_offset = start_offset
            s.batches = merge_batches(s.batches, batches, s.start_offset)
        cls = request_codec(ApiKey.WRITE_SHARE_GROUP_STATE).cls
        body = cls(group_id=key[0], topics=[cls.WriteStateData(topic_id=key[1], partitions=[cls.PartitionData(
            partition=key[2], state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
            delivery_complete_count=delivery_complete_count, state_batches=[
                cls.StateBatch(first_offset=a, last_offset=b, delivery_state=st, delivery_count=c)
                for a, b, st, c in batches])])])
        queue = self._queues.get(key)
        if queue and queue[-1].api_key == ApiKey.WRITE_SHARE_GROUP_STATE and (
                key not in self._busy or len(queue) > 1):
            queue[-1].body = body  # not sent yet: the newer write supersedes it
            self._seq += 1
            queue[-1].seq = self._seq
        else:
            self._enqueue(key, ApiKey.WRITE_SHARE_GROUP_STATE, body)
        return E.NONE, None

    def delete(self, key: Key) -> None:
        self.states.pop(key, None)
        cls = request_codec(ApiKey.DELETE_SHARE_GROUP_STATE).cls
        self._enqueue(key, ApiKey.DELETE_SHARE_GROUP_STATE, cls(group_id=key[0], topics=[
            cls.DeleteStateData(topic_id=key[1], partitions=[cls.PartitionData(partition=key[2])])]))

    # ------------------------------------------------------------------ reads
    def load(self, key: Key, leader_epoch: int, then: Callable[[int], None]) -> None:
        """Read ``key``'s whole state from its share coordinator (ReadShareGroupState, which
        records ``leader_epoch`` as the newest leader's) into :attr:`states`; ``then(error)``."""
        cls = request_codec(ApiKey.READ_SHARE_GROUP_STATE).cls
        self._loading.add(key)

        def answered(p: Optional[Any]) -> None:
            self._loading.discard(key)
            code = E.REQUEST_TIMED_OUT if p is None else p.error_code
            if p is not None and not code:
                self.states[key] = ShareState(
                    state_epoch=p.state_epoch, leader_epoch=leader_epoch, start_offset=p.start_offset,
                    batches=[(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                             for b in p.state_batches])
            then(code)

        self._enqueue(key, ApiKey.READ_SHARE_GROUP_STATE, cls(group_id=key[0], topics=[
            cls.ReadStateData(topic_id=key[1], partitions=[cls.PartitionData(partition=key[2],
                                                                              leader_epoch=leader_epoch)])]),
            answered)

    def is_loading(self, key: Key) -> bool:
        return key in self._loading

    def load_summaries(self, keys: list[Key], then: Callable[[], None]) -> None:
        """Refresh the start offset, epochs and done count of ``keys`` from their share
        coordinators (ReadShareGroupStateSummary), then ``then()``; a key without a state
        is dropped from :attr:`states`."""
        pending = [len(keys)]
        if not keys:
            then()
            return
        cls = request_codec(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY).cls

        def one(key: Key) -> Callable[[Optional[Any]], None]:
            def answered(p: Optional[Any]) -> None:
                if p is not None and not p.error_code:
                    if p.leader_epoch < 0 and p.start_offset < 0:
                        self.states.pop(key, None)  # no state (an initialized one has leader epoch 0)
                    else:
                        s = self.states.get(key) or ShareState()
                        s.state_epoch, s.leader_epoch = p.state_epoch, p.leader_epoch
                        s.start_offset, s.delivery_complete_count = p.start_offset, p.delivery_complete_count
                        self.states[key] = s
                pending[0] -= 1
                if pending[0] == 0:
                    then()
            return answered

        for key in keys:
            self._enqueue(key, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, cls(group_id=key[0], topics=[
                cls.ReadStateSummaryData(topic_id=key[1], partitions=[
                    cls.PartitionData(partition=key[2], leader_epoch=-1)])]), one(key))

    def forget(self, topic_id: Uuid, partition: int) -> None:
        """Drop what is kept of the partition's states (its leadership changed: they are read
        again from the share coordinator)."""
        for key in [k for k in self.states if k[1] == topic_id and k[2] == partition]:
            del self.states[key]

    def forget_group(self, group_id: str) -> None:
        """Drop what is kept of the group's states."""
        for key in [k for k in self.states if k[0] == group_id]:
            del self.states[key]

    # ------------------------------------------------------------------ ordering
    def when_flushed(self, then: Callable[[], None], keys: Optional[Iterable[Key]] = None) -> None:
        """``then()`` once every change asked for so far (of ``keys``, if given) was answered
        by its share coordinator."""
        only = None if keys is None else set(keys)
        wanted = {k: q[-1].seq for k, q in self._queues.items() if q and (only is None or k in only)}
        if not wanted:
            then()
            return
        self._barriers.append((wanted, then))

    def _enqueue(self, key: Key, api_key: int, body: Any,
                 then: Optional[Callable[[Optional[Any]], None]] = None) -> None:
        self._seq += 1
        self._queues.setdefault(key, []).append(_Op(api_key, body, then, self._seq))
        self._pump(key)

    def _pump(self, key: Key) -> None:
        queue = self._queues.get(key)
        if not queue or key in self._busy or self.core.detached:
            return
        self._busy.add(key)
        op = queue[0]
        now = self.core.clock.now_ms()
        if op.since < 0:
            op.since = now

        def answered(resp: Optional[Any]) -> None:
            if self.core.detached:
                return
            p = _first_partition(resp) if resp is not None else None
            code = E.REQUEST_TIMED_OUT if p is None else p.error_code
            if code in _RETRIABLE and self.core.clock.now_ms() - op.since < _GIVE_UP_MS:
                self.core.timer.add(CallbackTask(_RETRY_MS, lambda: self._retry(key)))
                return
            if code and op.then is None:
                log.warning("share state %s of %s: %s", ApiKey(op.api_key).name, share_key(*key), E(code).name)
            queue.pop(0)
            self._busy.discard(key)
            if not queue:
                del self._queues[key]
            self._done[key] = op.seq
            if op.then is not None:
                op.then(p)
            self._settle()
            self._pump(key)

        node = self.coordinator(key)
        if node is None:
            answered(None)
        elif node == self.core.node_id:
            serve_state_rpc(self.core, op.api_key, STATE_RPCS[op.api_key], op.body, answered)
        else:
            self.core.transport.send(node, op.api_key, STATE_RPCS[op.api_key], op.body, answered,
                                     self.core.replicas.config.request_timeout_ms)

    def _retry(self, key: Key) -> None:
        self._busy.discard(key)
        self._pump(key)

    def _settle(self) -> None:
        left = []
        for wanted, then in self._barriers:
            if all(self._done.get(k, 0) >= seq for k, seq in wanted.items()):
                then()
            else:
                left.append((wanted, then))
        self._barriers = left

    def coordinator(self, key: Key) -> Optional[int]:
        """The share coordinator of ``key``: the leader of its ``__share_group_state``
        partition (None: none yet; the topic is asked for when it does not exist)."""
        info = self.core.image.topics.get(SHARE_STATE_TOPIC)
        if info is None:
            self.core.create_share_state_topic()
            return None
        p = info.partitions.get(partition_for(share_key(*key), len(info.partitions)))
        return p.leader if p is not None and p.leader >= 0 else None


def serve_state_rpc(core: ClusterCore, api_key: int, version: int, body: Any,
                    respond: Callable[[Any], None]) -> None:
    """The share coordinator's side of a persister RPC: NOT_COORDINATOR unless this broker
    leads the ``__share_group_state`` partition of every key named; a change answered once
    its records are replicated (NOT_COORDINATOR when the leadership was lost meanwhile)."""
    state: ShareStateCoordinator = core.share_state
    info = core.image.topics.get(SHARE_STATE_TOPIC)
    n = len(info.partitions) if info is not None else 0
    parts = {partition_for(share_key(body.group_id, t.topic_id, p.partition), n)
             for t in body.topics for p in t.partitions} if n else set()

    def refuse(code: int) -> None:
        respond(error_response(api_key, version, body, code))

    if not n or not all(core.leads(SHARE_STATE_TOPIC, q) for q in parts):
        refuse(E.NOT_COORDINATOR)
        return
    handlers: dict[int, Callable[[Any, int, Callable[[Any], None]], None]] = {ApiKey.INITIALIZE_SHARE_GROUP_STATE: state.initialize_rpc, ApiKey.READ_SHARE_GROUP_STATE: state.read_rpc,
                ApiKey.WRITE_SHARE_GROUP_STATE: state.write_rpc, ApiKey.DELETE_SHARE_GROUP_STATE: state.delete_rpc,
                ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: state.summary_rpc}
    if api_key in (ApiKey.READ_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY):
        handlers[api_key](body, version, respond)
        return

    def written(resp: Any) -> None:
        waits = []
        for q in parts:
            lg = core.logs.get(SHARE_STATE_TOPIC, q)
            if lg is not None and lg.log_end_offset > 0:
                waits.append((lg, lg.log_end_offset - 1))
        pending, failed = [len(waits)], [0]
        if not waits:
            respond(resp)
            return

        def then(err: int) -> None:
            if err:
                failed[0] = err
            pending[0] -= 1
            if pending[0] == 0:
                if failed[0]:
                    refuse(E.NOT_COORDINATOR if failed[0] == E.NOT_COORDINATOR else E.REQUEST_TIMED_OUT)
                else:
                    respond(resp)

        for lg, offset in waits:
            core.when_replicated(lg, offset, then, core.replicas.config.request_timeout_ms)

    handlers[api_key](body, version, written)


class ClusterShareGroupCoordinator(ShareGroupCoordinator):
    """The share-group coordinator of a cluster's broker: as Kafka's, it assigns a newly
    subscribed partition only once its share coordinator has initialized the partition's
    state (the leader would otherwise find none, or the initialization could overwrite the
    progress of an earlier start)."""

    def __init__(self, core: ClusterCore, persister: RemoteSharePersister, is_other_group: Any,
                 offsets: Any) -> None:
        super().__init__(core, persister, is_other_group, offsets)  # type: ignore[arg-type]
        self.remote = persister
        self._initializing: set[str] = set()

    def _initialize(self, gid: str) -> None:
        group = self.groups.get(gid)
        if group is None or gid in self._initializing:
            return
        todo = [(gid, tid, p) for tid, p in self._uninitialized(group)]
        if not todo:
            return
        for key in todo:
            if self.remote.read(key) is None:
                self.remote.initialize(key, 0, -1)
        self._initializing.add(gid)

        def written() -> None:
            self._initializing.discard(gid)
            super(ClusterShareGroupCoordinator, self)._initialize(gid)  # the states are there: assignable
        self.remote.when_flushed(written, todo)


class ClusterSharePartitionManager(SharePartitionManager):
    """ShareFetch and ShareAcknowledge on a broker of a cluster: only for the partitions it
    leads (NOT_LEADER_OR_FOLLOWER otherwise), the share-partitions' state read from and
    written to their share coordinators through a :class:`RemoteSharePersister`, answers
    held until the changes they made are written."""

    persister: RemoteSharePersister

    def __init__(self, core: ClusterCore, persister: RemoteSharePersister, groups: Any) -> None:
        super().__init__(core, persister, groups)
        self.cluster = core
        #: share-partitions whose state read found none: the error their next fetch answers
        self._failed: dict[Key, int] = {}

    def _state(self, key: Key, topic: str) -> tuple[Any, Any]:
        gid, tid, p = key
        if not self.cluster.leads(topic, p):
            raise BrokerError(E.NOT_LEADER_OR_FOLLOWER)
        lg = self.core.logs.get(topic, p)
        if lg is None:
            raise BrokerError(E.UNKNOWN_TOPIC_OR_PARTITION)
        state = self.persister.read(key)
        if state is not None:
            return lg, state
        failed = self._failed.pop(key, None)
        if failed is not None:
            raise BrokerError(failed)
        if not self.persister.is_loading(key):
            epoch = lg.leader_epoch

            def loaded(code: int) -> None:
                if code == E.INVALID_REQUEST:
                    # never initialized: the group coordinator initializes a share-partition's
                    # state before it assigns it (no share group, or not yet); the waiting fetch
                    # answers the error, the next one reads again
                    self._failed[key] = E.UNKNOWN_SERVER_ERROR
                self.core.fetch_purgatory.check_and_complete((topic, p))

            self.persister.load(key, epoch, loaded)
        raise StateLoading()

    def loading(self, key: Key) -> bool:
        return self.persister.is_loading(key)

    def leadership_changed(self, topic_id: Uuid, partition: int) -> None:
        """The partition got a new leader (this broker or another): its share-partitions here
        go, with their sessions' hold on them; a new term starts from the persisted state."""
        for key in [k for k in self.partitions if k[1] == topic_id and k[2] == partition]:
            self.partitions.pop(key).close()
        self.persister.forget(topic_id, partition)

    def _close_session(self, s: Any) -> None:
        super()._close_session(s)
        if s is not None and not any(k[0] == s.group_id for k in self.sessions):
            # the group's last session here: its share-partitions go (their state was written);
            # its next fetch reads the state again, as the group coordinator may have changed it
            # meanwhile (AlterShareGroupOffsets, DeleteShareGroupOffsets: an empty group's)
            self._drop_group(s.group_id)
            self.persister.forget_group(s.group_id)

    def fetch(self, req: Any) -> None:
        answer_when_flushed(self.persister, req)
        super().fetch(req)

    def acknowledge(self, req: Any) -> None:
        answer_when_flushed(self.persister, req)
        super().acknowledge(req)


def answer_when_flushed(persister: RemoteSharePersister, req: Any) -> None:
    """Hold ``req``'s answer until the state changes asked for before it are written."""
    respond = req.respond

    def later(body: Any, api_version: Optional[int] = None) -> None:
        persister.when_flushed(lambda: respond(body, api_version))
    req.respond = later


def share_offsets_handler(core: ClusterCore, inner: Callable[[Any], None]) -> Callable[[Any], None]:
    """The share-group coordinator's offsets admin APIs on a cluster: the states they read
    (DescribeShareGroupOffsets, AlterShareGroupOffsets) are first read from their share
    coordinators, the answer waits for the states they change."""
    def handle(req: Any) -> None:
        body, topics = req.body, core.known_topics()
        keys: list[Key] = []
        if req.api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
            for g in body.groups:
                group = core.share_groups.groups.get(g.group_id)
                if g.topics is None:
                    keys += [(g.group_id, tid, p) for tid, ps in (group.initialized.items() if group else ())
                             for p in sorted(ps)]
                else:
                    keys += [(g.group_id, topics[t.topic_name][0], p) for t in g.topics
                             if t.topic_name in topics for p in t.partitions]
        elif req.api_key == ApiKey.ALTER_SHARE_GROUP_OFFSETS:
            keys = [(body.group_id, topics[t.topic_name][0], p.partition_index) for t in body.topics
                    if t.topic_name in topics for p in t.partitions]

        def run() -> None:
            answer_when_flushed(core.share_persister, req)
            if req.api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
                names = {tid: n for n, (tid, _, _) in topics.items()}
                tps = sorted({(names[tid], p) for _, tid, p in keys if tid in names})

                def described(hws: dict[tuple[str, int], int]) -> None:
                    with_lags(core, req, hws)
                    inner(req)
                high_watermarks(core, tps, described)
                return
            inner(req)
        core.share_persister.load_summaries(keys, run)
    return handle


def high_watermarks(core: ClusterCore, tps: list[tuple[str, int]],
                    then: Callable[[dict[tuple[str, int], int]], None]) -> None:
    """The high watermarks of ``tps`` as their leaders have them (ListOffsets latest, as
    Kafka's group coordinator asks them for a share group's lag); a partition whose leader
    does not answer is left out."""
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for t, p in tps:
        info = core.image.partition(t, p)
        if info is not None and info.leader >= 0:
            by_leader.setdefault(info.leader, []).append((t, p))
    out: dict[tuple[str, int], int] = {}
    pending = [len(by_leader)]
    if not by_leader:
        then(out)
        return

    def settled() -> None:
        pending[0] -= 1
        if pending[0] == 0:
            then(out)

    cls = request_codec(ApiKey.LIST_OFFSETS).cls
    for leader, mine in by_leader.items():
        if leader == core.node_id:
            for t, p in mine:
                lg = core.logs.get(t, p)
                if lg is not None:
                    out[(t, p)] = lg.high_watermark
            settled()
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in mine:
            by_topic.setdefault(t, []).append(p)
        body = cls(replica_id=-1, isolation_level=0, timeout_ms=core.replicas.config.request_timeout_ms, topics=[
            cls.ListOffsetsTopic(name=t, partitions=[cls.ListOffsetsPartition(
                partition_index=p, current_leader_epoch=-1, timestamp=-1) for p in ps]) for t, ps in by_topic.items()])

        def answered(resp: Optional[Any]) -> None:
            for t in resp.topics if resp is not None else ():
                for r in t.partitions:
                    if not r.error_code:
                        out[(t.name, r.partition_index)] = r.offset
            settled()
        core.transport.send(leader, ApiKey.LIST_OFFSETS, _LIST_OFFSETS_VERSION, body, answered,
                            core.replicas.config.request_timeout_ms)


def with_lags(core: ClusterCore, req: Any, hws: dict[tuple[str, int], int]) -> None:
    """DescribeShareGroupOffsets' lags from the leaders' high watermarks ``hws`` (the group
    coordinator need not host the partitions): the answer's lag of each partition with a
    state is the records after the start offset not yet done."""
    respond = req.respond
    states = core.share_persister.states

    def lagged(body: Any, api_version: Optional[int] = None) -> None:
        for g in getattr(body, "groups", ()):
            for t in g.topics:
                for p in t.partitions:
                    s = states.get((g.group_id, t.topic_id, p.partition_index))
                    hw = hws.get((t.topic_name, p.partition_index))
                    if s is not None and hw is not None and p.start_offset >= 0:
                        p.lag = max(0, hw - p.start_offset - s.delivery_complete_count)
        respond(body, api_version)
    req.respond = lagged
