"""An asyncio share consumer (KIP-932 share groups), Kafka's ``KafkaShareConsumer``.

The members of a share group read the partitions of their topics together: the broker hands
each fetched record to one member at a time, locked for the group's
``share.record.lock.duration.ms``; the member acknowledges it (ACCEPT: done, RELEASE: deliver
it again, to anyone, REJECT: never again). A record whose lock expires is delivered again; one
delivered ``share.delivery.count.limit`` times is archived instead::

    async with Cluster("127.0.0.1:9092") as cluster:
        consumer = await ShareConsumer(cluster, ["jobs"], group_id="workers").start()
        for record in await consumer.poll(timeout=1.0):
            ...                                  # implicit mode: accepted by the next poll
        await consumer.commit_sync()             # or now
        await consumer.close()

``acknowledgement_mode="explicit"`` (Kafka's ``share.acknowledgement.mode``) makes the
application acknowledge every record with :meth:`ShareConsumer.acknowledge` before the next
poll; in the implicit mode (the default) the next :meth:`~ShareConsumer.poll`,
:meth:`~ShareConsumer.commit_sync` or :meth:`~ShareConsumer.commit_async` accepts every record
the last poll returned (:meth:`~ShareConsumer.close` does not: the broker releases them). Acknowledgements ride on the next ShareFetch to the broker that delivered
the records; :meth:`~ShareConsumer.commit_sync` sends them at once (ShareAcknowledge) and
returns each partition's outcome.

Membership is the sans-I/O :class:`~kproto.client.share_membership.ShareConsumerMembership`
driven by a background task (ShareGroupHeartbeat); share sessions and acknowledgement batches
are the sans-I/O :mod:`kproto.client.share_session`.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, NamedTuple, Optional, Sequence

from kproto.client.cluster import METADATA_REFRESH_ERRORS, Cluster
from kproto.client.consumer import gather_fetches, run_membership
from kproto.client.membership import MemberState
from kproto.client.protocol import BrokerError, KafkaConnectionError
from kproto.client.share_membership import ShareConsumerMembership
from kproto.client.share_session import (SESSION_ERRORS, AcknowledgeType, Acknowledgements, ShareRecord,
                                         ShareSession, TopicIdPartition, acquired_records)
from kproto.error_codes import ErrorCode
from kproto.errors import KprotoError

__all__ = ["ShareConsumer", "ShareRecord", "AcknowledgeType", "AcknowledgementResult", "ACKNOWLEDGEMENT_MODES"]

ACKNOWLEDGEMENT_MODES = ("implicit", "explicit")
_log = logging.getLogger("kproto.client")
#: the key of a delivered record: (topic, partition, offset)
_RecordKey = tuple[str, int, int]


class AcknowledgementResult(NamedTuple):
    """What the broker answered to the acknowledgements of one partition: the ``offsets`` of
    the records they were for and ``error``, None when they took effect (otherwise the records
    come back once their locks expire, as Kafka's ``AcknowledgementCommitCallback`` reports)."""

    offsets: tuple[int, ...]
    error: Optional[BrokerError]


#: the outcome of an acknowledgement round, per ``(topic, partition)``
AcknowledgementResults = dict[tuple[str, int], AcknowledgementResult]


class ShareConsumer:
    """Asyncio member of share group ``group_id`` reading ``topics``.

    ``on_acknowledged`` (Kafka's ``AcknowledgementCommitCallback``) is called with the outcome
    of every acknowledgement round the consumer sends on its own (piggy-backed on ShareFetch,
    :meth:`commit_async`, :meth:`close`)."""

    def __init__(self, cluster: Cluster, topics: Sequence[str], *, group_id: str,
                 acknowledgement_mode: str = "implicit", max_poll_records: int = 500,
                 fetch_max_wait_ms: int = 500, fetch_min_bytes: int = 1, fetch_max_bytes: int = 52428800,
                 rack: Optional[str] = None,
                 on_acknowledged: Optional[Callable[[AcknowledgementResults], None]] = None) -> None:
        if acknowledgement_mode not in ACKNOWLEDGEMENT_MODES:
            raise ValueError("acknowledgement_mode must be 'implicit' or 'explicit'")
        self.cluster = cluster
        self.topics = list(topics)
        self.group_id = group_id
        self.explicit = acknowledgement_mode == "explicit"
        self.max_poll_records = max_poll_records
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.on_acknowledged = on_acknowledged
        self.membership = ShareConsumerMembership(group_id, topics=self.topics, rack_id=rack)
        #: the partitions assigned now, by name
        self.assignment: list[tuple[str, int]] = []
        #: one share session per broker
        self.sessions: dict[int, ShareSession] = {}
        #: the broker's record lock of the last ShareFetch answer (AcquisitionLockTimeoutMs)
        self.acquisition_lock_timeout_ms: Optional[int] = None
        # delivered records not acknowledged yet -> the broker that delivered them
        self._unacked: dict[_RecordKey, int] = {}
        # records acknowledged with RENEW, until the broker answers: (record, broker)
        self._renewing: dict[_RecordKey, tuple[ShareRecord, int]] = {}
        # records whose lock was renewed: the next poll hands them out again
        self._renewed: list[tuple[ShareRecord, int]] = []
        # acknowledgements waiting to be sent, per broker and partition
        self._pending: dict[int, dict[TopicIdPartition, Acknowledgements]] = {}
        self._names: dict[TopicIdPartition, tuple[str, int]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._member_task: Optional[asyncio.Task] = None
        self._member_error: Optional[BaseException] = None
        self._wake = asyncio.Event()
        self._closed = False

    @property
    def member_id(self) -> str:
        """This member's id in the group (made by the client, as Kafka's)."""
        return self.membership.member_id

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> "ShareConsumer":
        """Load the topics' metadata and join the group (in the background)."""
        await self.cluster.wait_for_leaders(self.topics)
        if self._member_task is None or self._member_task.done():
            self.membership.join()
            self._member_task = asyncio.get_running_loop().create_task(self._membership_loop())
        return self

    async def close(self) -> None:
        """Send the acknowledgements given, close every share session (ShareAcknowledge with
        epoch -1: the broker releases the records not acknowledged, in either mode, as with
        Kafka's consumer, which does not accept the last poll's records on close) and leave the
        group (ShareGroupHeartbeat with epoch -1)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._unacked.clear()
            self._renewed.clear()
            results = await asyncio.gather(*(self._close_session(node) for node in list(self.sessions)),
                                           return_exceptions=True)
            merged: AcknowledgementResults = {}
            for r in results:
                if isinstance(r, dict):
                    merged.update(r)
            self._callback(merged)
            await self._leave()
        finally:
            if self._member_task is not None:
                self._member_task.cancel()
                self._member_task = None

    async def __aenter__(self) -> "ShareConsumer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def wait_for_assignment(self, timeout: float = 30.0) -> list[tuple[str, int]]:
        """Wait until the member is STABLE with a non-empty assignment; returns it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.membership.state is not MemberState.STABLE or not self.assignment:
            if self._member_error is not None:
                raise self._member_error
            if loop.time() > deadline:
                raise asyncio.TimeoutError(f"share member of {self.group_id} has no assignment after {timeout} s "
                                           f"({self.membership.state.name})")
            await asyncio.sleep(0.02)
        return list(self.assignment)

    # -- acknowledgements ----------------------------------------------------------------------
    def acknowledge(self, record: ShareRecord, type: AcknowledgeType = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge a record the last poll returned: ACCEPT (processed), RELEASE (deliver it
        again) or REJECT (never deliver it again). Sent with the next poll or commit. Explicit
        acknowledgement mode only, as Kafka's consumer.

        RENEW asks the broker to restart the record's lock (the group's
        ``share.record.lock.duration.ms`` from now on) for work that takes longer: the next poll
        (or commit) sends the renewal, and once the broker renewed it a poll returns the record
        again, the same delivery, to be acknowledged once more. A poll that sends a renewal to a
        broker fetches nothing new from it (as Kafka's renewal requests)."""
        if not self.explicit:
            raise KprotoError("implicit acknowledgement mode: records are acknowledged by the next poll")
        if type not in (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT,
                        AcknowledgeType.RENEW):
            raise ValueError("acknowledge with ACCEPT, RELEASE, REJECT or RENEW")
        key = (record.topic, record.partition, record.offset)
        node = self._unacked.pop(key, None)
        if node is None:
            raise KprotoError(f"{record.topic}-{record.partition}@{record.offset} is not a record of the "
                              f"last poll waiting for an acknowledgement")
        tid = self.cluster.metadata.topic_id(record.topic)
        if type is AcknowledgeType.RENEW:
            self._renewing[key] = (record, node)
        self._queue(node, (tid, record.partition), record.offset, record.offset, int(type))

    def _queue(self, node: int, tp: TopicIdPartition, first: int, last: int, kind: int) -> None:
        self._pending.setdefault(node, {}).setdefault(tp, Acknowledgements()).add(first, last, kind)

    def _acknowledge_rest(self, kind: AcknowledgeType) -> None:
        """Acknowledge every record still waiting with ``kind`` (implicit mode's ACCEPT)."""
        md = self.cluster.metadata
        for (topic, partition, offset), node in sorted(self._unacked.items()):
            self._queue(node, (md.topic_id(topic), partition), offset, offset, int(kind))
        self._unacked.clear()

    async def commit_sync(self) -> AcknowledgementResults:
        """Send every pending acknowledgement now (ShareAcknowledge, to each broker that
        delivered the records) and return each partition's outcome: None when done, else the
        broker's error (see :class:`AcknowledgementResult`). In implicit mode the
        last poll's records are accepted first."""
        if not self.explicit:
            self._acknowledge_rest(AcknowledgeType.ACCEPT)
        results = await asyncio.gather(*(self._acknowledge(node) for node in list(self._pending)))
        merged: AcknowledgementResults = {}
        for r in results:
            merged.update(r)
        return merged

    def commit_async(self) -> "asyncio.Task[AcknowledgementResults]":
        """:meth:`commit_sync` in a task of its own; its outcome also goes to ``on_acknowledged``."""
        async def run() -> AcknowledgementResults:
            results = await self.commit_sync()
            self._callback(results)
            return results
        return asyncio.get_running_loop().create_task(run())

    def _callback(self, results: AcknowledgementResults) -> None:
        if results and self.on_acknowledged is not None:
            self.on_acknowledged(results)

    def _lock(self, node: int) -> asyncio.Lock:
        lock = self._locks.get(node)
        if lock is None:
            lock = self._locks[node] = asyncio.Lock()
        return lock

    def _take(self, node: int, only: Optional[set[TopicIdPartition]] = None,
              exclude: Optional[set[TopicIdPartition]] = None) -> dict[TopicIdPartition, Acknowledgements]:
        pending = self._pending.get(node, {})
        taken = {tp: a for tp, a in pending.items()
                 if (only is None or tp in only) and (exclude is None or tp not in exclude)}
        for tp in taken:
            del pending[tp]
        if not pending:
            self._pending.pop(node, None)
        return taken

    def _failed(self, acks: dict[TopicIdPartition, Acknowledgements], code: int, what: str) -> AcknowledgementResults:
        return self._settled({self._name(tp): AcknowledgementResult(a.offsets(), BrokerError(code, what))
                              for tp, a in acks.items()})

    def _settled(self, results: AcknowledgementResults) -> AcknowledgementResults:
        """Note the outcome of the renewals among ``results``: a renewed record is handed out
        again by the next poll, one whose renewal failed is not (the broker delivers it again
        once its lock expires). Returns ``results``."""
        for (topic, partition), (offsets, error) in results.items():
            for offset in offsets:
                held = self._renewing.pop((topic, partition, offset), None)
                if held is not None and error is None and not self._closed:
                    self._renewed.append(held)
        return results

    def _name(self, tp: TopicIdPartition) -> tuple[str, int]:
        name = self._names.get(tp)
        if name is None:
            name = (self.cluster.metadata.topic_names().get(tp[0], str(tp[0])), tp[1])
        return name

    async def _acknowledge(self, node: int, only: Optional[set[TopicIdPartition]] = None) -> AcknowledgementResults:
        """ShareAcknowledge of ``node``'s pending acknowledgements (of ``only`` these partitions)."""
        async with self._lock(node):
            acks = self._take(node, only)
            if not acks:
                return {}
            session = self.sessions.setdefault(node, ShareSession(node))
            if session.is_new:
                # the session these records came from is gone: the broker released them
                # (or will when their locks expire); there is no session to acknowledge in
                return self._failed(acks, ErrorCode.SHARE_SESSION_NOT_FOUND, "ShareAcknowledge")
            req = session.acknowledge_request(self.group_id, self.member_id, acks)
            return await self._send_acknowledge(node, session, req, acks)

    async def _send_acknowledge(self, node: int, session: ShareSession, req: Any,
                                acks: dict[TopicIdPartition, Acknowledgements]) -> AcknowledgementResults:
        try:
            conn = await self.cluster.connection(node)
            resp = await conn.request(req)
        except KafkaConnectionError as e:
            session.reset()
            _log.info("ShareAcknowledge to node %d failed: %s", node, e)
            return self._failed(acks, ErrorCode.NETWORK_EXCEPTION, "ShareAcknowledge")
        if req.share_session_epoch >= 0:
            session.on_response(resp.error_code)
        if resp.error_code:
            return self._failed(acks, resp.error_code, "ShareAcknowledge")
        out: AcknowledgementResults = {}
        for t in resp.responses:
            for pd in t.partitions:
                tp = (t.topic_id, pd.partition_index)
                if tp in acks:
                    out[self._name(tp)] = AcknowledgementResult(acks[tp].offsets(), BrokerError(
                        pd.error_code, "ShareAcknowledge", pd.error_message) if pd.error_code else None)
        return self._settled(out)

    async def _close_session(self, node: int) -> AcknowledgementResults:
        async with self._lock(node):
            session = self.sessions.get(node)
            acks = self._take(node)
            if session is None or session.is_new:
                return self._failed(acks, ErrorCode.SHARE_SESSION_NOT_FOUND, "ShareAcknowledge") if acks else {}
            req = session.acknowledge_request(self.group_id, self.member_id, acks, final=True)
            return await self._send_acknowledge(node, session, req, acks)

    # -- fetching -----------------------------------------------------------------------------
    async def poll(self, timeout: float = 1.0) -> list[ShareRecord]:
        """Acknowledge the last poll's records (implicit mode; explicit mode: every one must be
        acknowledged already), then one ShareFetch to each leader of the assigned partitions,
        acknowledgements piggy-backed; returns the records whose locks were renewed since (see
        :meth:`acknowledge`), then those acquired, each with its delivery count."""
        if self._member_error is not None:
            raise self._member_error
        if self._closed:
            raise KprotoError("the share consumer is closed")
        if self.explicit and self._unacked:
            raise KprotoError(f"{len(self._unacked)} records of the last poll are not acknowledged "
                              f"(explicit acknowledgement mode)")
        self._acknowledge_rest(AcknowledgeType.ACCEPT)
        md = self.cluster.metadata
        wanted: dict[int, set[TopicIdPartition]] = {}
        for t, p in self.assignment:
            leader = md.leader(t, p)
            if leader is not None:
                tid = md.topic_id(t)
                self._names[(tid, p)] = (t, p)
                wanted.setdefault(leader, set()).add((tid, p))
        nodes = set(wanted) | set(self._pending) | {n for n, s in self.sessions.items() if s.partitions}
        if not nodes:
            await asyncio.sleep(min(timeout, 0.1))
            return self._take_renewed()
        records, refresh = await gather_fetches(self._poll_node(n, wanted.get(n, set()), timeout) for n in nodes)
        if refresh:
            await self.cluster.refresh_metadata(sorted(set(self.topics)))
        records = self._take_renewed() + records
        if not records and not any(wanted.values()):
            await asyncio.sleep(min(timeout, 0.1))
        return records

    def _take_renewed(self) -> list[ShareRecord]:
        """The records renewed since the last poll, waiting for an acknowledgement again."""
        renewed, self._renewed = self._renewed, []
        for r, node in renewed:
            self._unacked[(r.topic, r.partition, r.offset)] = node
        return [r for r, _ in renewed]

    async def _poll_node(self, node: int, wanted: set[TopicIdPartition], timeout: float
                         ) -> tuple[list[ShareRecord], bool]:
        session = self.sessions.setdefault(node, ShareSession(node))
        # acknowledgements of partitions not fetched from here (any more), and any on a session
        # that is not open yet, go on their own
        if session.is_new:
            acked = await self._acknowledge(node)
        else:
            acked = await self._acknowledge(node, only=set(self._pending.get(node, {})) - wanted)
        self._callback(acked)
        if not wanted:
            if session.partitions and not any(n == node for n in self._unacked.values()):
                # nothing to fetch here: close the session, which forgets its partitions
                acked = await self._close_session(node)
                self._callback(acked)
            return [], False
        async with self._lock(node):
            acks = {} if session.is_new else self._take(node, only=wanted)
            req = session.fetch_request(self.group_id, self.member_id, wanted, acks,
                                        max_wait_ms=min(self.fetch_max_wait_ms, int(timeout * 1000)),
                                        min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
                                        max_records=self.max_poll_records)
            try:
                conn = await self.cluster.connection(node)
                resp = await conn.request(req, timeout=timeout + conn.request_timeout)
            except KafkaConnectionError:
                session.reset()
                self._callback(self._failed(acks, ErrorCode.NETWORK_EXCEPTION, "ShareFetch"))
                raise
            ok = session.on_response(resp.error_code)
        if not ok:
            # the session errors open a new session with the next poll; the acknowledgements
            # sent with this request did not take effect
            self._callback(self._failed(acks, resp.error_code, "ShareFetch"))
            if resp.error_code not in METADATA_REFRESH_ERRORS | SESSION_ERRORS:
                _log.warning("ShareFetch to node %d: %s", node, BrokerError(resp.error_code, "", resp.error_message))
            return [], resp.error_code in METADATA_REFRESH_ERRORS
        if getattr(resp, "acquisition_lock_timeout_ms", 0) > 0:
            self.acquisition_lock_timeout_ms = resp.acquisition_lock_timeout_ms
        records: list[ShareRecord] = []
        refresh = False
        acked_now: AcknowledgementResults = {}
        for t in resp.responses:
            for pd in t.partitions:
                tp = (t.topic_id, pd.partition_index)
                name = self._names.get(tp)
                if name is None:
                    continue
                if tp in acks:
                    acked_now[name] = AcknowledgementResult(acks[tp].offsets(), BrokerError(
                        pd.acknowledge_error_code, "ShareFetch", pd.acknowledge_error_message)
                        if pd.acknowledge_error_code else None)
                if pd.error_code in METADATA_REFRESH_ERRORS:
                    refresh = True
                    continue
                if pd.error_code:
                    _log.warning("ShareFetch(%s-%d): %s", name[0], name[1],
                                 BrokerError(pd.error_code, "", pd.error_message))
                    continue
                got, gaps = acquired_records(name[0], name[1], pd.records, pd.acquired_records)
                for r in got:
                    self._unacked[(r.topic, r.partition, r.offset)] = node
                for first, last in gaps:
                    self._queue(node, tp, first, last, int(AcknowledgeType.GAP))
                records.extend(got)
        self._callback(self._settled(acked_now))
        return records, refresh

    # -- membership ----------------------------------------------------------------------------
    async def _membership_loop(self) -> None:
        """Drive :attr:`membership` (the consumer's :func:`run_membership`) until the member
        left or failed."""
        m = self.membership

        def fenced() -> None:
            self.assignment = []

        error = await run_membership(m, self._wake, f"ShareGroupHeartbeat({self.group_id})",
                                     lambda: self._reconcile(m), lambda: self._heartbeat_once(m), fenced)
        if error is not None:
            self._member_error = error  # surfaced to the application by poll

    async def _heartbeat_once(self, m: ShareConsumerMembership) -> None:
        loop = asyncio.get_running_loop()
        try:
            conn = await self.cluster.coordinator(self.group_id)
            req = m.heartbeat_request(loop.time())
            resp = await conn.request(req, timeout=conn.request_timeout)
        except (KafkaConnectionError, BrokerError) as e:
            _log.info("share heartbeat of group %s failed: %s", self.group_id, e)
            self.cluster.forget_coordinator(self.group_id)
            m.on_heartbeat_failure(loop.time())
            return
        if resp.error_code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
            self.cluster.forget_coordinator(self.group_id)
        m.on_heartbeat_response(resp, loop.time())

    async def _reconcile(self, m: ShareConsumerMembership) -> None:
        """Take the target assignment: topic ids named from metadata (refreshed when one is
        unknown). Nothing is committed on revocation: the next poll forgets the partitions and
        acknowledges what this member holds of them."""
        names = self.cluster.metadata.topic_names()
        if m.unresolved(names):
            try:
                await self.cluster.refresh_metadata(None)
            except (BrokerError, KafkaConnectionError) as e:
                _log.info("metadata refresh for share group %s failed: %s", self.group_id, e)
                return
            names = self.cluster.metadata.topic_names()
        plan = m.reconcile(names)
        if plan is None:
            return
        self.assignment = sorted(plan.assigned)
        if m.reconciled(plan):
            _log.info("share group %s member %s epoch %d: revoked %s, added %s", self.group_id, m.member_id,
                      plan.epoch, sorted(plan.revoked), sorted(plan.added))

    async def _leave(self) -> None:
        m = self.membership
        if m.state in (MemberState.UNSUBSCRIBED, MemberState.FATAL, MemberState.FENCED) \
                or self._member_task is None or self._member_task.done():
            return
        m.leave()
        self.assignment = []
        m.left_prepared()
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._member_task), self.cluster.request_timeout)
        except asyncio.TimeoutError:
            pass
