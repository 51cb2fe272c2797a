"""What a ``__cluster_metadata`` partition tells about a KRaft cluster, told in order: quorum
leader elections, controllers registered and unregistered, brokers registered, fenced, unfenced,
shut down and unregistered, topics
created and deleted, each partition's leader, leader epoch and ISR over time, config changes,
producer id blocks, and where the cluster ended up.

:class:`MetadataStory` is sans-I/O: it is fed records (or whole batches) in log order and
replays them into a :class:`~kproto.storage.metadata_image.MetadataImage`, so that every state
(a PartitionChangeRecord's absent fields, a stale fencing record) follows Kafka's own replay
rules; each event is what changed in the image. :func:`read_metadata_story` reads a partition
folder (or the log dir holding ``__cluster_metadata-0``), starting from a metadata snapshot
when the log no longer begins at offset 0.

    story = read_metadata_story("/var/lib/kafka/meta")
    for e in story.events: print(e["offset"], e["kind"], e)
    story.summary()["partitions"]["orders-0"]["elections"]
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from kproto.errors import DecodeError
from kproto.problems import Problems
from kproto.records.batch import RecordBatch

if TYPE_CHECKING:
    from kproto.storage.metadata_image import BrokerInfo, MetadataImage, PartitionInfo
    from kproto.records.control import ControlRecord

__all__ = ["METADATA_PARTITION", "MetadataStory", "read_metadata_story", "EVENT_KINDS"]

METADATA_PARTITION = "__cluster_metadata-0"

#: Every ``kind`` an event can have, and what it carries besides ``offset``, ``timestamp`` and
#: ``epoch`` (the leader epoch of the record's batch).
EVENT_KINDS = {
    "quorum_leader": "leader, voters, granted_voters (a LeaderChangeMessage control record)",
    "feature": "name, level (0: the feature is removed)",
    "controller_registered": "controller, incarnation_id, listeners (name://host:port)",
    "controller_unregistered": "controller (an UnregisterControllerRecord, Kafka 4.4)",
    "broker_registered": "broker, broker_epoch, listeners (name://host:port), rack, fenced",
    "broker_fenced": "broker, broker_epoch",
    "broker_unfenced": "broker, broker_epoch",
    "broker_controlled_shutdown": "broker, broker_epoch",
    "broker_unregistered": "broker, broker_epoch",
    "topic_created": "topic, topic_id, partitions, replication_factor (of the topic's "
                     "PartitionRecords that follow the TopicRecord in its batch, its "
                     "ConfigRecords aside, as Kafka writes a new topic)",
    "topic_deleted": "topic, topic_id, partitions",
    "partition_created": "topic, partition, replicas, isr, leader, leader_epoch",
    "partition_changed": "topic, partition, leader, leader_epoch, isr, replicas, previous "
                         "(leader, leader_epoch, isr, replicas before), election (a new leader "
                         "epoch), isr_removed, isr_added",
    "partition_change_ignored": "topic_id, partition (no such partition: replay skips it)",
    "config": "resource_type (topic, broker, ... or the id), resource, name, value (None: "
              "deleted)",
    "producer_ids": "broker, broker_epoch, next_producer_id",
    "acl_added": "acl_id, resource_type, resource, pattern_type, principal, host, operation, "
                 "permission_type (Kafka's ids, as the AccessControlEntryRecord has them)",
    "acl_removed": "acl_id, and the fields of acl_added when the ACL was known",
    "scram_credential": "user, mechanism (SCRAM-SHA-256 or SCRAM-SHA-512), iterations (None: "
                        "the credential removed); never the keys",
}

_SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


def _acl_facts(a: Any) -> dict[str, Any]:
    return {"resource_type": a.resource_type, "resource": a.resource_name,
            "pattern_type": a.pattern_type, "principal": a.principal, "host": a.host,
            "operation": a.operation,
            # a record's permission_type, an image AclEntry's permission
            "permission_type": getattr(a, "permission_type", getattr(a, "permission", None))}

# Kafka's ConfigResource.Type ids
_RESOURCE_TYPES = {2: "topic", 4: "broker", 8: "broker_logger", 16: "client_metrics",
                   32: "group"}


def _listener(e: Any) -> str:
    return f"{e.name}://{e.host}:{e.port}"


def _broker_facts(b: BrokerInfo | None) -> tuple | None:
    return None if b is None else (b.epoch, b.incarnation_id, b.fenced, b.in_controlled_shutdown)


def _partition_facts(p: PartitionInfo) -> dict[str, Any]:
    return {"leader": p.leader, "leader_epoch": p.leader_epoch, "isr": list(p.isr),
            "replicas": list(p.replicas)}


def _new_image() -> MetadataImage:
    from kproto.storage.metadata_image import MetadataImage

    return MetadataImage()


@dataclass
class MetadataStory:
    """The events of a ``__cluster_metadata`` log and the cluster it leaves behind (sans-I/O).

    ``events``: dicts with ``offset``, ``timestamp``, ``epoch``, ``kind`` (see
    :data:`EVENT_KINDS`) and the kind's fields. ``records``: how many records of each type were
    read (control records by their control type, ``LEADER_CHANGE``). ``snapshot``: the end
    offset of the metadata snapshot the story starts from, if any."""

    events: list[dict[str, Any]] = field(default_factory=list)
    records: dict[str, int] = field(default_factory=dict)
    offsets: list[int] | None = None
    snapshot: int | None = None
    image: MetadataImage = field(default_factory=_new_image)
    #: quorum (leader, epoch) after the last LeaderChangeMessage
    quorum: tuple[int, int] | None = None
    #: the topic_created event whose PartitionRecords may still come
    _creating: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ feeding
    def _event(self, offset: int, timestamp: int, epoch: int, kind: str, **facts: Any) -> None:
        self.events.append({"offset": offset, "timestamp": timestamp, "epoch": epoch,
                            "kind": kind, **facts})

    def _count(self, name: str, offset: int) -> None:
        self.records[name] = self.records.get(name, 0) + 1
        self.offsets = [offset, offset + 1] if self.offsets is None else \
            [self.offsets[0], offset + 1]

    def add_control(self, offset: int, timestamp: int, epoch: int, rec: ControlRecord) -> None:
        """A control record of the log (LeaderChangeMessage: a quorum leader was elected)."""
        self._count(rec.type, offset)
        self._creating = None
        if rec.type == "LEADER_CHANGE":
            self.quorum = (rec.fields["leader_id"], epoch)
            self._event(offset, timestamp, epoch, "quorum_leader", leader=rec.fields["leader_id"],
                        voters=rec.fields["voters"], granted_voters=rec.fields["granted_voters"])

    def add_record(self, offset: int, timestamp: int, epoch: int, record_type: int,
                   version: int, rec: Any) -> None:
        """One metadata record (as :func:`kproto.storage.metadata_image.decode_metadata_record` gives
        it), replayed into :attr:`image`; what it changed becomes events."""
        from kproto.storage.metadata_image import RecordType as T

        self._count(type(rec).__name__, offset)
        img = self.image
        at = (offset, timestamp, epoch)
        creating, self._creating = self._creating, None
        if record_type in (T.REGISTER_BROKER, T.UNREGISTER_BROKER, T.FENCE_BROKER,
                           T.UNFENCE_BROKER, T.BROKER_REGISTRATION_CHANGE):
            bid = rec.broker_id if hasattr(rec, "broker_id") else rec.id
            before = _broker_facts(img.brokers.get(bid))
            img.replay(record_type, version, rec, offset)
            self._broker_events(at, bid, before, record_type == T.REGISTER_BROKER)
        elif record_type == T.PARTITION_CHANGE:
            t = img.topics_by_id.get(rec.topic_id)
            old = None if t is None else t.partitions.get(rec.partition_id)
            img.replay(record_type, version, rec, offset)
            if t is None or old is None:
                self._event(*at, "partition_change_ignored", topic_id=str(rec.topic_id),
                            partition=rec.partition_id)
            else:
                self._partition_changed(at, old, t.partitions[rec.partition_id])
        elif record_type == T.REMOVE_ACCESS_CONTROL_ENTRY:
            known = img.acls.get(rec.id)
            img.replay(record_type, version, rec, offset)
            self._event(*at, "acl_removed", acl_id=str(rec.id),
                        **(_acl_facts(known) if known is not None else {}))
        elif record_type == T.REMOVE_TOPIC:
            t = img.topics_by_id.get(rec.topic_id)
            img.replay(record_type, version, rec, offset)
            if t is not None:
                self._event(*at, "topic_deleted", topic=t.name, topic_id=str(t.topic_id),
                            partitions=len(t.partitions))
        else:
            img.replay(record_type, version, rec, offset)
            self._plain_record(at, record_type, rec, creating)

    def _plain_record(self, at: tuple[int, int, int], record_type: int, rec: Any,
                      creating: dict[str, Any] | None) -> None:
        """Events of the records whose effect the record itself says."""
        from kproto.storage.metadata_image import RecordType as T

        if record_type == T.TOPIC:
            self._creating = {"topic": rec.name, "topic_id": str(rec.topic_id), "partitions": 0,
                              "replication_factor": None}
            self._event(*at, "topic_created", **self._creating)
            self._creating = self.events[-1]
        elif record_type == T.PARTITION:
            t = self.image.topics_by_id.get(rec.topic_id)
            if t is None:
                return  # the image drops a partition of an unknown topic: so does the story
            p = t.partitions[rec.partition_id]
            self._event(*at, "partition_created", topic=t.name, partition=p.partition,
                        **_partition_facts(p))
            if creating is not None and creating["topic_id"] == str(t.topic_id):
                creating["partitions"] += 1
                rf = creating["replication_factor"]
                creating["replication_factor"] = max(rf or 0, len(p.replicas))
                self._creating = creating
        elif record_type == T.CONFIG:
            self._creating = creating  # a new topic's configs come between it and its partitions
            self._event(*at, "config",
                        resource_type=_RESOURCE_TYPES.get(rec.resource_type, rec.resource_type),
                        resource=rec.resource_name, name=rec.name, value=rec.value)
        elif record_type == T.FEATURE_LEVEL:
            self._event(*at, "feature", name=rec.name, level=rec.feature_level)
        elif record_type == T.PRODUCER_IDS:
            self._event(*at, "producer_ids", broker=rec.broker_id, broker_epoch=rec.broker_epoch,
                        next_producer_id=rec.next_producer_id)
        elif record_type == T.REGISTER_CONTROLLER:
            self._event(*at, "controller_registered", controller=rec.controller_id,
                        incarnation_id=str(rec.incarnation_id),
                        listeners=[_listener(e) for e in rec.end_points])
        elif record_type == T.UNREGISTER_CONTROLLER:
            self._event(*at, "controller_unregistered", controller=rec.controller_id)
        elif record_type == T.ACCESS_CONTROL_ENTRY:
            self._event(*at, "acl_added", acl_id=str(rec.id), **_acl_facts(rec))
        elif record_type in (T.USER_SCRAM_CREDENTIAL, T.REMOVE_USER_SCRAM_CREDENTIAL):
            self._event(*at, "scram_credential", user=rec.name,
                        mechanism=_SCRAM_MECHANISMS.get(rec.mechanism, rec.mechanism),
                        iterations=getattr(rec, "iterations", None))

    def _broker_events(self, at: tuple[int, int, int], bid: int, before: tuple | None,
                       registered: bool) -> None:
        b = self.image.brokers.get(bid)
        if b is None:
            if before is not None:
                self._event(*at, "broker_unregistered", broker=bid, broker_epoch=before[0])
            return
        if registered:
            # a new registration replaces the old one, without an unregistration of its own
            self._event(*at, "broker_registered", broker=bid, broker_epoch=b.epoch,
                        listeners=[_listener(e) for e in b.listeners], rack=b.rack,
                        fenced=b.fenced)
            return
        after = _broker_facts(b)
        if before is None or before == after:
            return  # a stale record (an older registration's epoch) or no change
        if b.fenced != before[2]:
            self._event(*at, "broker_fenced" if b.fenced else "broker_unfenced", broker=bid,
                        broker_epoch=b.epoch)
        if b.in_controlled_shutdown and not before[3]:
            self._event(*at, "broker_controlled_shutdown", broker=bid, broker_epoch=b.epoch)

    def _partition_changed(self, at: tuple[int, int, int], old: PartitionInfo,
                           new: PartitionInfo) -> None:
        self._event(*at, "partition_changed", topic=new.topic, partition=new.partition,
                    **_partition_facts(new), previous=_partition_facts(old),
                    election=new.leader_epoch != old.leader_epoch,
                    isr_removed=[r for r in old.isr if r not in new.isr],
                    isr_added=[r for r in new.isr if r not in old.isr])

    def add_batch(self, batch: RecordBatch, problems: Problems | None = None,
                  start: int = 0) -> None:
        """Every record of a ``__cluster_metadata`` batch at or after offset ``start``. A record
        that does not decode is reported in ``problems`` (kind ``record``) and left out."""
        from kproto.storage.metadata_image import decode_metadata_record
        from kproto.records.control import decode_control

        epoch = batch.partition_leader_epoch
        self._creating = None  # a topic is created in one batch
        try:
            for r in batch.records():
                if r.offset < start:
                    continue
                try:
                    if batch.is_control:
                        self.add_control(r.offset, r.timestamp, epoch, decode_control(r.key, r.value))
                    elif r.value is None:
                        raise DecodeError("null value", what="__cluster_metadata record")
                    else:
                        self.add_record(r.offset, r.timestamp, epoch,
                                        *decode_metadata_record(r.value))
                except DecodeError as exc:
                    if problems is not None:
                        problems.report("record", f"offset {r.offset}: {exc}",
                                        position=batch.position)
        except DecodeError as exc:  # the batch's records themselves do not decode
            if problems is not None:
                problems.report("record", exc.reason, position=batch.position)

    def load_snapshot(self, end_offset: int, data: bytes, problems: Problems | None = None
                      ) -> None:
        """Start from a metadata snapshot (the file's bytes): its records set the state, they
        are no events."""
        from kproto.storage.partition import scan_batches

        story = MetadataStory(image=self.image)
        for batch in scan_batches(data, problems=problems):
            if isinstance(batch, RecordBatch) and not batch.is_control:
                story.add_batch(batch, problems)
        self.snapshot = end_offset

    # ------------------------------------------------------------------ reading
    def brokers(self) -> dict[int, dict[str, Any]]:
        """Every registered broker now: epoch, listeners, rack, fenced, in controlled shutdown."""
        return {i: {"broker_epoch": b.epoch, "listeners": [_listener(e) for e in b.listeners],
                    "rack": b.rack, "fenced": b.fenced,
                    "in_controlled_shutdown": b.in_controlled_shutdown}
                for i, b in sorted(self.image.brokers.items())}

    def partitions(self) -> dict[str, dict[str, Any]]:
        """``topic-partition`` -> its state now and the counts of what happened to it:
        ``elections`` (leader epoch bumps), ``leader_changes`` (a different leader),
        ``isr_shrinks``, ``isr_expansions``, ``changes`` (PartitionChangeRecords)."""
        out: dict[str, dict[str, Any]] = {}
        for p in sorted(self.image.all_partitions(), key=lambda p: (p.topic, p.partition)):
            out[f"{p.topic}-{p.partition}"] = {**_partition_facts(p), "changes": 0,
                                               "elections": 0, "leader_changes": 0,
                                               "isr_shrinks": 0, "isr_expansions": 0}
        for e in self.events:
            if e["kind"] != "partition_changed":
                continue
            s = out.get(f"{e['topic']}-{e['partition']}")
            if s is None:
                continue  # deleted since
            s["changes"] += 1
            s["elections"] += e["election"]
            s["leader_changes"] += e["leader"] != e["previous"]["leader"]
            s["isr_shrinks"] += bool(e["isr_removed"])
            s["isr_expansions"] += bool(e["isr_added"])
        return out

    def summary(self) -> dict[str, Any]:
        """Counts of the events by kind, the quorum, the brokers and partitions now."""
        kinds: dict[str, int] = {}
        for e in self.events:
            kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
        leader, epoch = self.quorum if self.quorum else (None, None)
        return {"offsets": self.offsets, "snapshot": self.snapshot, "records": dict(self.records),
                "events": kinds, "quorum_leader": leader, "quorum_epoch": epoch,
                "features": dict(self.image.features),
                "next_producer_id": self.image.next_producer_id,
                "brokers": self.brokers(), "partitions": self.partitions()}

    def to_json(self) -> dict[str, Any]:
        """:meth:`summary` and the ``timeline`` (every event), JSON-ready."""
        doc = self.summary()
        doc["brokers"] = {str(i): b for i, b in doc["brokers"].items()}
        return {**doc, "timeline": self.events}


def _metadata_partition(path: str) -> str:
    path = os.path.normpath(path)
    if os.path.basename(path) != METADATA_PARTITION and \
            os.path.isdir(os.path.join(path, METADATA_PARTITION)):
        return os.path.join(path, METADATA_PARTITION)
    return path


def read_metadata_story(path: str, problems: Problems | None = None,
                        partition: Any = None) -> MetadataStory:
    """The story of a ``__cluster_metadata-0`` folder, or of the log dir holding one (``partition``:
    an already opened :class:`~kproto.storage.partition.Partition` of it). When the log no
    longer starts at offset 0 the story starts from the earliest metadata snapshot that
    covers the deleted records (the records below its end offset are skipped)."""
    from kproto.storage.partition import Partition, read_batch_file

    part = partition if partition is not None else Partition.open(_metadata_partition(path))
    problems = problems if problems is not None else Problems()
    story = MetadataStory()
    start = 0
    first = part.log_start_offset or 0
    if first > 0:
        snaps = [(o, p) for o, _e, p in part.layout.metadata_snapshots if o >= first]
        if snaps:
            start, snap_path = snaps[0]
            read_batch_file(snap_path, partial(story.load_snapshot, start,
                                               problems=problems.scope(source=snap_path)),
                            problems)
    for seg, batch in part.batches(start_offset=start or None, problems=problems):
        if not isinstance(batch, RecordBatch):
            problems.report("record", "not a v2 record batch", source=seg.files.log or seg.name,
                            position=batch.position)
            continue
        story.add_batch(batch, problems.scope(source=seg.files.log or seg.name), start)
    return story

