"""ShareFetch and ShareAcknowledge (KIP-932, Kafka's ``SharePartitionManager``): share sessions and
the share-partitions of every share group on this broker, sans-I/O.

A member's share session (keyed by group and member id, bound to its connection as in Kafka 4.x)
holds the partitions it fetches; its epoch is 0 to open it, then counts up by one per request, and
-1 closes it (acknowledging without fetching). Closing the session, its connection or leaving the
group releases what the member still holds. A fetch first applies the request's
acknowledgements, then acquires records for the member from each partition of the session; with
nothing to hand out it waits (up to ``max_wait_ms``) in the broker's fetch purgatory, where an
append to one of the partitions wakes it.

Share-partitions are created at their first fetch from the persisted state (its start offset,
or where ``share.auto.offset.reset`` says when there is none: ``latest`` the high watermark,
``earliest`` the log start); every change is written through the persister.

A record a member rejects, or that reaches the delivery count limit, is archived; when the
group names a dead-letter queue topic (``errors.deadletterqueue.topic.name``, starting with
``dlq.``, an existing topic whose ``errors.deadletterqueue.group.enable`` is true) a record
goes there too, as Kafka 4.4 writes it (KIP-1191): into the partition of the same number,
``__dlq.errors.*`` headers naming the topic, partition, offset, group, delivery count and why,
and the original key and value when ``errors.deadletterqueue.copy.record.enable``.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Mapping, Optional, Protocol

from kproto.broker.context import BrokerContext
from kproto.broker.log import BrokerError
from kproto.broker.purgatory import DelayedOperation
from kproto.broker.share_partition import RENEW, AcknowledgeError, Dead, SharePartition, ShareLimits
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.errors import DecodeError
from kproto.records import RecordBatch
from kproto.records.builder import RecordBatchBuilder
from kproto.records.reader import BatchReader
from kproto.schemas.api_keys import ApiKey

__all__ = ["SharePartitionManager", "ShareSession", "ShareStore", "ShareGroups", "StateLoading"]

Respond = Callable[[Any], None]
TP = tuple[Uuid, int]
_log = logging.getLogger("kproto.broker.share")
#: Kafka's default ``errors.deadletterqueue.topic.name.prefix``: what a dead-letter queue topic's name starts with
DLQ_TOPIC_PREFIX = "dlq."
_INITIAL, _FINAL = 0, -1
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def _duration_ms(text: str) -> int:
    """An ISO 8601 duration ``PnDTnHnMn.nS`` in milliseconds (Java's ``Duration.parse`` form)."""
    m = _DURATION.fullmatch(text.strip().upper())
    if m is None:
        return 0
    d, h, mi, sec = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + sec * 1000)
_INT32_MAX = 2**31 - 1


def _renewing(req: Any) -> bool:
    """Whether a ShareFetch or ShareAcknowledge renews locks (``IsRenewAck``, v2)."""
    return req.version >= 2 and bool(req.body.is_renew_ack)


class StateLoading(BrokerError):
    """A share-partition whose persisted state is still being read from another broker (the
    share coordinator of a cluster): no records are handed out for it until it is there."""

    def __init__(self) -> None:
        super().__init__(E.INVALID_RECORD_STATE, "The share-partition's state is being loaded.")


class ShareStore(Protocol):
    """What the manager uses of the persister (:mod:`kproto.broker.coordinators.share_state`)."""

    def read(self, key: tuple[str, Uuid, int]) -> Any: ...

    def initialize(self, key: tuple[str, Uuid, int], state_epoch: int, start_offset: int) -> None: ...

    def write(self, key: tuple[str, Uuid, int], state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: list[tuple[int, int, int, int]]) -> tuple[int, Optional[str]]: ...


class ShareGroups(Protocol):
    """What the manager uses of the share group coordinator
    (:mod:`kproto.broker.coordinators.share_group`): the groups (with their ``members``), and
    the hook its membership events go to."""

    events: Any

    @property
    def groups(self) -> Mapping[str, Any]: ...


@dataclass
class ShareSession:
    """One member's share session: the partitions it fetches and the epoch it must send next."""

    group_id: str
    member_id: str
    channel: Any
    epoch: int = 1
    partitions: dict[TP, None] = field(default_factory=dict)


class _DelayedShareFetch(DelayedOperation):
    """A ShareFetch with nothing to hand out yet: completes when a partition has records to
    acquire, or at ``max_wait_ms``."""

    def __init__(self, mgr: SharePartitionManager, session: ShareSession, req: Any, acks: dict[TP, tuple[int, Optional[str]]],
                 max_wait_ms: int) -> None:
        super().__init__(max_wait_ms)
        self.mgr, self.session, self.req, self.acks = mgr, session, req, acks

    def try_complete(self) -> bool:
        if self.mgr.acquirable(self.session):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.mgr.answer_fetch(self.session, self.req, self.acks, set())


class SharePartitionManager:
    """Share sessions and share-partitions; handles ShareFetch and ShareAcknowledge."""

    def __init__(self, core: BrokerContext, persister: ShareStore, groups: ShareGroups) -> None:
        self.core, self.persister, self.groups = core, persister, groups
        self.partitions: dict[tuple[str, Uuid, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        groups.events = self

    # ------------------------------------------------------------------ settings
    def limits(self, group_id: str) -> ShareLimits:
        """The group's lock duration, delivery count limit and record locks (its group configs,
        else the broker's)."""
        v = self.core.group_configs.value
        return ShareLimits(int(v(group_id, "share.record.lock.duration.ms")),
                           int(v(group_id, "share.delivery.count.limit")),
                           int(v(group_id, "share.partition.max.record.locks")))

    def _names(self) -> dict[Uuid, str]:
        return {tid: n for n, (tid, _, _) in self.core.known_topics().items()}

    # ------------------------------------------------------------------ share-partitions
    def _partition(self, gid: str, tid: Uuid, topic: str, p: int) -> tuple[SharePartition, bool]:
        """The share-partition (and whether it was created now), :class:`BrokerError` when the
        partition is not here."""
        key = (gid, tid, p)
        sp = self.partitions.get(key)
        if sp is not None:
            return sp, False
        lg, state = self._state(key, topic)
        start = state.start_offset
        if start < 0:
            start = self._reset_offset(gid, lg)
        start = max(start, lg.log_start_offset)
        sp = SharePartition(gid, topic, p, start, self.core.timer, lambda: self.limits(gid), self._changed,
                            batches=state.batches, topic_id=tid, on_dead=self._dead_letter)
        self.partitions[key] = sp
        return sp, True

    def _state(self, key: tuple[str, Uuid, int], topic: str) -> tuple[Any, Any]:
        """The log and the persisted state a new share-partition starts from (the state
        initialized when there is none); :class:`BrokerError` when it cannot be made here,
        :class:`StateLoading` while the state is on its way."""
        if key[0] not in self.groups.groups:
            # no share group of that id: its share-partition state cannot be initialized
            raise BrokerError(E.UNKNOWN_SERVER_ERROR)
        lg = self.core.logs.get(topic, key[2])
        if lg is None:
            raise BrokerError(E.UNKNOWN_TOPIC_OR_PARTITION)
        state = self.persister.read(key)
        if state is None:
            self.persister.initialize(key, 0, -1)
            state = self.persister.read(key)
            assert state is not None
        return lg, state

    def loading(self, key: tuple[str, Uuid, int]) -> bool:
        """Whether the share-partition's state is being read (see :class:`StateLoading`)."""
        return False

    def _reset_offset(self, gid: str, lg: Any) -> int:
        """Where a share-partition without a state starts (``share.auto.offset.reset``):
        ``earliest`` the log start, ``latest`` the high watermark, ``by_duration:<ISO 8601
        duration>`` the first record at most that old (the high watermark if none is)."""
        reset = self.core.group_configs.value(gid, "share.auto.offset.reset")
        if reset == "earliest":
            return int(lg.log_start_offset)
        if reset.startswith("by_duration:"):
            found = lg.offset_for_timestamp(self.core.wall_ms() - _duration_ms(reset[len("by_duration:"):]))
            return int(found[0]) if found is not None else int(lg.high_watermark)
        return int(lg.high_watermark)

    def _read_committed(self, gid: str) -> bool:
        return self.core.group_configs.value(gid, "share.isolation.level") == "read_committed"

    def _fetch_end(self, gid: str, lg: Any) -> int:
        """Where a share fetch of the group stops: the last stable offset under
        ``share.isolation.level=read_committed``, else the high watermark."""
        return int(lg.last_stable_offset if self._read_committed(gid) else lg.high_watermark)

    def _changed(self, sp: SharePartition) -> None:
        tid: Uuid = sp.topic_id
        key = (sp.group_id, tid, sp.partition)
        state = self.persister.read(key)
        epoch = state.state_epoch if state is not None else 0
        lg = self.core.logs.get(sp.topic, sp.partition)
        leader_epoch = lg.leader_epoch if lg is not None else -1
        if state is None:
            self.persister.initialize(key, 0, sp.start_offset)
        self.persister.write(key, epoch, leader_epoch, sp.start_offset, sp.delivery_complete_count, sp.batches())

    # ------------------------------------------------------------------ dead-letter queue
    def _dead_letter(self, sp: SharePartition, dead: list[Dead]) -> None:
        """Write the records ``sp`` archived (rejected, or at the delivery count limit) to the
        group's dead-letter queue topic, if it has a usable one (else they are only archived,
        as Kafka does after logging why)."""
        gid = sp.group_id
        value = self.core.group_configs.value
        name = value(gid, "errors.deadletterqueue.topic.name")
        if not name:
            return
        topic = self.core.logs.topics.get(name)
        if not name.startswith(DLQ_TOPIC_PREFIX) or topic is None or \
                topic.configs.get("errors.deadletterqueue.group.enable", "false").lower() != "true":
            _log.warning("share group %s: %d records archived without a dead-letter copy: %r is not a "
                         "dead-letter queue topic", gid, len(dead), name)
            return
        index = sp.partition % len(topic.partitions)
        lg = topic.partitions[index]
        if lg is None or not self.core.leads(name, index):
            # in a cluster the DLQ partition may be led elsewhere: kproto writes only to a
            # partition this broker leads (Kafka's broker writes to the leader over the network)
            _log.warning("share group %s: %d records archived without a dead-letter copy: %s-%d is not "
                         "led by this broker", gid, len(dead), name, index)
            return
        dead = sorted(dead)
        copies = self._originals(sp, [off for off, _, _ in dead]) \
            if value(gid, "errors.deadletterqueue.copy.record.enable").lower() == "true" else {}
        now = self.core.wall_ms()
        b = RecordBatchBuilder(base_offset=lg.log_end_offset)
        for off, count, why in dead:
            key, val = copies.get(off, (None, None))
            b.append(now, key, val, headers=[
                ("__dlq.errors.topic", sp.topic.encode()), ("__dlq.errors.partition", str(sp.partition).encode()),
                ("__dlq.errors.offset", str(off).encode()), ("__dlq.errors.group", gid.encode()),
                ("__dlq.errors.delivery.count", str(count).encode()), ("__dlq.errors.message", why.encode())])
        lg.append_internal(b.build())
        self.core.appended_internal(lg)

    def _originals(self, sp: SharePartition, offsets: list[int]) -> dict[int, tuple[Optional[bytes], Optional[bytes]]]:
        """The key and value of the records at ``offsets`` (those still in the log)."""
        lg = self.core.logs.get(sp.topic, sp.partition)
        wanted, out = set(offsets), {}
        at = min(offsets)
        try:
            while lg is not None and at <= max(offsets):
                raw = lg.read(at, 1 << 20, True)
                last = at - 1
                for b in BatchReader(raw):
                    if isinstance(b, RecordBatch) and not b.is_control:
                        for r in b.records():
                            if r.offset in wanted:
                                out[r.offset] = (r.key, r.value)
                    last = b.last_offset
                if last < at:
                    break
                at = last + 1
        except (BrokerError, DecodeError):
            pass  # what cannot be read goes with its headers only, as in Kafka
        return out

    # ------------------------------------------------------------------ events from the coordinator
    def member_left(self, group_id: str, member_id: str) -> None:
        self._close_session(self.sessions.get((group_id, member_id)))
        for (gid, _, _), sp in list(self.partitions.items()):
            if gid == group_id:
                sp.release_member(member_id)
        group = self.groups.groups.get(group_id)
        if group is not None and not group.members:
            self._drop_group(group_id)  # an empty group's share-partitions are read back when next fetched

    def group_deleted(self, group_id: str) -> None:
        self._drop_group(group_id)

    def reset_partition(self, group_id: str, topic_id: Uuid, partition: int) -> None:
        sp = self.partitions.pop((group_id, topic_id, partition), None)
        if sp is not None:
            sp.close()

    def _drop_group(self, group_id: str) -> None:
        for key in [k for k in self.partitions if k[0] == group_id]:
            self.partitions.pop(key).close()

    def connection_closed(self, channel: Any) -> None:
        """A connection went: the share sessions on it end, their records are released."""
        for s in [s for s in self.sessions.values() if s.channel is channel]:
            self._close_session(s)

    def _close_session(self, s: Optional[ShareSession]) -> None:
        if s is None or self.sessions.get((s.group_id, s.member_id)) is not s:
            return
        del self.sessions[(s.group_id, s.member_id)]
        for (gid, _, _), sp in list(self.partitions.items()):
            if gid == s.group_id:
                sp.release_member(s.member_id)

    # ------------------------------------------------------------------ sessions
    def _session(self, channel: Any, gid: str, mid: str, epoch: int) -> ShareSession:
        """The session a request of ``epoch`` belongs to; :class:`BrokerError` with
        SHARE_SESSION_NOT_FOUND or INVALID_SHARE_SESSION_EPOCH."""
        s = self.sessions.get((gid, mid))
        if epoch == _INITIAL:
            if s is not None:
                self._close_session(s)
            s = self.sessions[(gid, mid)] = ShareSession(gid, mid, channel)
            return s
        if s is None:
            raise BrokerError(E.SHARE_SESSION_NOT_FOUND)
        if epoch != _FINAL:
            if epoch != s.epoch:
                raise BrokerError(E.INVALID_SHARE_SESSION_EPOCH)
            s.epoch = 1 if s.epoch == _INT32_MAX else s.epoch + 1
        return s

    def _session_request_error(self, req: Any, opening_error: Optional[int]) -> tuple[Optional[ShareSession], int]:
        """The session a ShareFetch or ShareAcknowledge ``req`` belongs to, or (None, the error
        code refusing it): INVALID_REQUEST without a group or member id, ``opening_error`` for
        a request that may not open a session (epoch 0), else :meth:`_session`'s error."""
        body = req.body
        gid, mid, epoch = body.group_id or "", body.member_id or "", body.share_session_epoch
        if not gid or not mid:
            return None, E.INVALID_REQUEST
        if epoch == _INITIAL and opening_error is not None:
            return None, opening_error
        try:
            return self._session(req.channel, gid, mid, epoch), E.NONE
        except BrokerError as exc:
            return None, exc.code

    def _acknowledge(self, gid: str, mid: str, topics: Any, names: dict[Uuid, str],
                     renew: bool) -> dict[TP, tuple[int, Optional[str]]]:
        """Apply each partition's acknowledgement batches: (error code, message) per partition.
        RENEW is refused (INVALID_REQUEST) unless the request says it renews (``IsRenewAck``),
        and (INVALID_RECORD_STATE) when the group's ``share.renew.acknowledge.enable`` is off."""
        out: dict[TP, tuple[int, Optional[str]]] = {}
        renew_enabled = self.core.group_configs.value(gid, "share.renew.acknowledge.enable").lower() == "true"
        for t in topics:
            name = names.get(t.topic_id)
            for p in t.partitions:
                batches = p.acknowledgement_batches
                if not batches:
                    continue
                tp = (t.topic_id, p.partition_index)
                if name is None:
                    out[tp] = (E.UNKNOWN_TOPIC_ID, None)
                    continue
                if any(RENEW in b.acknowledge_types for b in batches):
                    if not renew:
                        out[tp] = (E.INVALID_REQUEST, None)
                        continue
                    if not renew_enabled:
                        out[tp] = (E.INVALID_RECORD_STATE, "Renewing acquisition locks is not enabled for the group.")
                        continue
                try:
                    sp, _ = self._partition(gid, t.topic_id, name, p.partition_index)
                    sp.acknowledge(mid, [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                         for b in batches])
                    out[tp] = (E.NONE, None)
                except AcknowledgeError as exc:
                    out[tp] = (exc.code, exc.message)
                except BrokerError as exc:
                    out[tp] = (exc.code, None)
        return out

    # ------------------------------------------------------------------ ShareFetch
    def fetch(self, req: Any) -> None:
        """ShareFetch (``req``: the core's request, with channel, body, version and respond)."""
        cls = response_codec(ApiKey.SHARE_FETCH).cls
        body = req.body
        renew = _renewing(req)
        if renew and (body.max_wait_ms or body.min_bytes or body.max_bytes or body.max_records):
            # a renewal fetches nothing: Kafka refuses one asking for records
            req.respond(cls(error_code=E.INVALID_REQUEST, responses=[], node_endpoints=[]))
            return
        has_acks = any(p.acknowledgement_batches for t in body.topics for p in t.partitions)
        session, error = self._session_request_error(req, E.INVALID_REQUEST if has_acks else None)
        if session is None:
            req.respond(cls(error_code=error, responses=[], node_endpoints=[]))
            return
        gid, mid, epoch = session.group_id, session.member_id, body.share_session_epoch
        names = self._names()
        acks = self._acknowledge(gid, mid, body.topics, names, renew)
        if epoch == _FINAL or renew:
            if epoch == _FINAL:
                self._close_session(session)
            else:  # the session's partitions change as in any fetch; nothing is acquired
                self._update_session(session, body)
            req.respond(self._response(cls, acks, {}, acquisition=self.limits(gid).lock_duration_ms))
            return
        self._update_session(session, body)
        created: set[TP] = set()
        for tid, p in session.partitions:
            name = names.get(tid)
            if name is not None:
                try:
                    if self._partition(gid, tid, name, p)[1]:
                        created.add((tid, p))
                except BrokerError:
                    pass
        if not created and body.max_wait_ms > 0 and body.min_bytes > 0 and not self.acquirable(session):
            op = _DelayedShareFetch(self, session, req, acks, body.max_wait_ms)
            keys: list[Hashable] = [(names[t], p) for t, p in session.partitions if t in names]
            self.core.fetch_purgatory.try_complete_else_watch(op, keys)
            return
        self.answer_fetch(session, req, acks, created)

    @staticmethod
    def _update_session(session: ShareSession, body: Any) -> None:
        """The request's partitions join the session, its forgotten ones leave it."""
        for t in body.forgotten_topics_data:
            for p in t.partitions:
                session.partitions.pop((t.topic_id, p), None)
        for t in body.topics:
            for p in t.partitions:
                session.partitions[(t.topic_id, p.partition_index)] = None

    def acquirable(self, session: ShareSession) -> bool:
        """Whether a partition of the session has records to hand out now (or an error to tell)."""
        names = self._names()
        for tid, p in session.partitions:
            name = names.get(tid)
            if name is None:
                return True
            sp = self.partitions.get((session.group_id, tid, p))
            lg = self.core.logs.get(name, p)
            if sp is None and self.loading((session.group_id, tid, p)):
                continue
            if sp is None or lg is None or sp.can_acquire(self._fetch_end(session.group_id, lg)):
                return True
        return False

    def answer_fetch(self, session: ShareSession, req: Any, acks: dict[TP, tuple[int, Optional[str]]],
                     created: set[TP]) -> None:
        cls = response_codec(ApiKey.SHARE_FETCH).cls
        body = req.body
        names = self._names()
        budget = max(body.max_bytes, 0)
        max_records = body.max_records if req.version >= 1 else 500
        strict = req.version >= 2 and body.share_acquire_mode == 1
        data: dict[TP, tuple[int, bytes, list[tuple[int, int, int]]]] = {}
        if self.sessions.get((session.group_id, session.member_id)) is session:
            for tid, p in session.partitions:
                name = names.get(tid)
                if name is None:
                    data[(tid, p)] = (E.UNKNOWN_TOPIC_ID, b"", [])
                    continue
                try:
                    sp, new = self._partition(session.group_id, tid, name, p)
                    if new:  # (its state was read meanwhile)
                        created.add((tid, p))
                    lg = self.core.logs.get(name, p)
                    if lg is None:
                        raise BrokerError(E.UNKNOWN_TOPIC_OR_PARTITION)
                except StateLoading:
                    continue  # answered once its state is read
                except BrokerError as exc:
                    data[(tid, p)] = (exc.code, b"", [])
                    continue
                got: list[tuple[int, int, int]] = []
                records = b""
                sp.skip_to(lg.log_start_offset)
                end = self._fetch_end(session.group_id, lg)
                if max_records > 0 and sp.can_acquire(end):
                    raw = lg.read(sp.next_fetch_offset(), budget, True, end)
                    # read_committed: an aborted transaction's records are never delivered
                    aborted = lg.aborted if self._read_committed(session.group_id) else []
                    spans = []
                    try:
                        for b in BatchReader(raw):
                            if isinstance(b, RecordBatch):
                                skip = b.is_control or (b.is_transactional and any(
                                    pid == b.producer_id and first <= b.base_offset <= last
                                    for pid, first, last in aborted))
                                spans.append((b.base_offset, b.last_offset, skip, b.position, b.size_in_bytes))
                    except DecodeError:
                        pass
                    got = sp.acquire(session.member_id, [(a, z, c) for a, z, c, _, _ in spans],
                                     max_records, record_limit=strict,
                                     batch_size=body.batch_size if req.version >= 1 else None)
                    if got:
                        lo, hi = got[0][0], got[-1][1]
                        keep = [(pos, size) for a, z, _, pos, size in spans if z >= lo and a <= hi]
                        records = bytes(raw[keep[0][0]:keep[-1][0] + keep[-1][1]])
                        budget = max(0, budget - len(records))
                        max_records -= sum(z - a + 1 for a, z, _ in got)
                if got or (tid, p) in created:
                    data[(tid, p)] = (E.NONE, records, got)
        req.respond(self._response(cls, acks, data, acquisition=self.limits(session.group_id).lock_duration_ms))

    @staticmethod
    def _response(cls: Any, acks: dict[TP, tuple[int, Optional[str]]],
                  data: dict[TP, tuple[int, bytes, list[tuple[int, int, int]]]], acquisition: int) -> Any:
        order: dict[Uuid, list[int]] = {}
        for tid, p in list(acks) + list(data):
            ps = order.setdefault(tid, [])
            if p not in ps:
                ps.append(p)
        topics = []
        for tid, ps in order.items():
            parts = []
            for p in ps:
                code, records, got = data.get((tid, p), (E.NONE, b"", []))
                ack_code, ack_msg = acks.get((tid, p), (E.NONE, None))
                parts.append(cls.PartitionData(
                    partition_index=p, error_code=code, error_message=None, acknowledge_error_code=ack_code,
                    acknowledge_error_message=ack_msg, current_leader=cls.LeaderIdAndEpoch(leader_id=0, leader_epoch=0),
                    records=records, acquired_records=[
                        cls.AcquiredRecords(first_offset=a, last_offset=z, delivery_count=c) for a, z, c in got]))
            topics.append(cls.ShareFetchableTopicResponse(topic_id=tid, partitions=parts))
        return cls(error_code=E.NONE, acquisition_lock_timeout_ms=acquisition, responses=topics, node_endpoints=[])

    # ------------------------------------------------------------------ ShareAcknowledge
    def acknowledge(self, req: Any) -> None:
        cls = response_codec(ApiKey.SHARE_ACKNOWLEDGE).cls
        body = req.body
        session, error = self._session_request_error(req, E.INVALID_SHARE_SESSION_EPOCH)
        if session is None:
            req.respond(cls(error_code=error, responses=[], node_endpoints=[]))
            return
        gid, mid, epoch = session.group_id, session.member_id, body.share_session_epoch
        acks = self._acknowledge(gid, mid, body.topics, self._names(), _renewing(req))
        if epoch == _FINAL:
            self._close_session(session)
        order: dict[Uuid, list[Any]] = {}
        for (tid, p), (code, msg) in acks.items():
            order.setdefault(tid, []).append(cls.PartitionData(
                partition_index=p, error_code=code, error_message=msg,
                current_leader=cls.LeaderIdAndEpoch(leader_id=0, leader_epoch=0)))
        req.respond(cls(error_code=E.NONE, acquisition_lock_timeout_ms=self.limits(gid).lock_duration_ms,
                        node_endpoints=[], responses=[
            cls.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=ps) for tid, ps in order.items()]))

    def shutdown(self) -> None:
        for sp in self.partitions.values():
            sp.close()
