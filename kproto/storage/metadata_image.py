"""The cluster's metadata image, built by replaying ``__cluster_metadata`` records (sans-I/O).

Kafka's controller and every broker replay the same KRaft log into their own in-memory picture
of the cluster (``MetadataImage``, changed through a ``MetadataDelta``). :class:`MetadataImage`
is that picture: brokers, topics and their partitions, configs, finalized features and the
next producer id block, ACLs, SCRAM credentials and delegation tokens. :meth:`MetadataImage.replay` applies one record as Kafka's
``MetadataDelta.replay`` does; :meth:`MetadataImage.take_changes` reports what changed since the
previous call, which is what a broker needs to become leader or follower of partitions.

Partition states are immutable values (a change makes a new :class:`PartitionInfo`), so a
``previous`` state handed out by :meth:`~MetadataImage.take_changes` stays as it was.

Records travel in the KRaft value framing: ``uvarint frame version (1), uvarint record type,
uvarint record version`` then the record (:func:`encode_metadata_record`,
:func:`decode_metadata_record`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from kproto.codecs.primitives import Uuid, read_uvarint, uvarint
from kproto.storage.internal import read_metadata_frame

__all__ = ["encode_metadata_record", "decode_metadata_record", "record_type_of", "Endpoint", "BrokerInfo",
           "ControllerInfo", "AclEntry", "ScramEntry", "DelegationTokenEntry",
           "PartitionInfo", "TopicInfo", "MetadataChanges", "MetadataImage", "RecordType",
           "TOPIC_RESOURCE", "BROKER_RESOURCE", "NO_LEADER", "NO_LEADER_CHANGE", "RECOVERED",
           "RECOVERING"]


class RecordType:
    """Kafka's ``MetadataRecordType`` ids of the records the image understands."""

    REGISTER_BROKER = 0
    UNREGISTER_BROKER = 1
    TOPIC = 2
    PARTITION = 3
    CONFIG = 4
    PARTITION_CHANGE = 5
    FENCE_BROKER = 7
    UNFENCE_BROKER = 8
    REMOVE_TOPIC = 9
    DELEGATION_TOKEN = 10
    USER_SCRAM_CREDENTIAL = 11
    FEATURE_LEVEL = 12
    CLIENT_QUOTA = 14
    PRODUCER_IDS = 15
    BROKER_REGISTRATION_CHANGE = 17
    ACCESS_CONTROL_ENTRY = 18
    REMOVE_ACCESS_CONTROL_ENTRY = 19
    NO_OP = 20
    REMOVE_USER_SCRAM_CREDENTIAL = 22
    REMOVE_DELEGATION_TOKEN = 26
    REGISTER_CONTROLLER = 27
    CLEAR_ELR = 28
    UNREGISTER_CONTROLLER = 29


#: ConfigResource types (Kafka's ``ConfigResource.Type`` ids) used as ``configs`` keys.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
#: PartitionChangeRecord/PartitionRecord leader sentinels.
NO_LEADER = -1
NO_LEADER_CHANGE = -2
#: LeaderRecoveryState values.
RECOVERED = 0
RECOVERING = 1


def _codec_of(obj: Any) -> Any:
    from kproto.codecs import message

    codec = message(type(obj).__name__)
    if codec.kind != "metadata" or codec.api_key is None:
        raise ValueError(f"{codec.name} is not a metadata record")
    return codec


def record_type_of(obj: Any) -> int:
    """The metadata record type id of a record object (``TopicRecord`` -> 2)."""
    return _codec_of(obj).api_key


def encode_metadata_record(obj: Any, version: int) -> bytes:
    """``obj`` (a metadata record object) as a ``__cluster_metadata`` record value."""
    codec = _codec_of(obj)
    return b"".join((uvarint(1), uvarint(codec.api_key), uvarint(version),
                     codec.encode(obj, version)))


def decode_metadata_record(value: bytes | memoryview) -> tuple[int, int, Any]:
    """A ``__cluster_metadata`` record value as ``(record type, version, record object)``."""
    record_type, version, codec, pos = read_metadata_frame(value)
    return record_type, version, codec.decode(memoryview(value)[pos:], version)


@dataclass
class Endpoint:
    """A broker listener as registered (``security_protocol`` is Kafka's SecurityProtocol id)."""

    name: str
    host: str
    port: int
    security_protocol: int


@dataclass
class BrokerInfo:
    """A registered broker (Kafka's ``BrokerRegistration``)."""

    id: int
    epoch: int
    incarnation_id: Uuid
    listeners: list[Endpoint]
    rack: Optional[str]
    fenced: bool
    in_controlled_shutdown: bool
    log_dirs: list[Uuid] = field(default_factory=list)
    #: feature name -> (min supported, max supported)
    features: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ControllerInfo:
    """A registered controller (Kafka's ``ControllerRegistration``)."""

    id: int
    incarnation_id: Uuid
    listeners: tuple[Endpoint, ...]
    #: feature name -> (min supported, max supported)
    features: dict[str, tuple[int, int]]


@dataclass(frozen=True)
class PartitionInfo:
    """One partition's state (Kafka's ``PartitionRegistration``); immutable."""

    topic: str
    topic_id: Uuid
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED
    directories: tuple[Uuid, ...] = ()
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @property
    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    def merge(self, rec: Any) -> "PartitionInfo":
        """The state after a PartitionChangeRecord, as Kafka's ``PartitionRegistration.merge``:
        any leader field (even the same leader) bumps the leader epoch; every change bumps the
        partition epoch."""
        def pick(value: Any, old: tuple) -> tuple:
            return old if value is None else tuple(value)

        replicas = pick(rec.replicas, self.replicas)
        dirs = getattr(rec, "directories", None)
        if dirs is not None:
            directories = tuple(dirs)
        elif rec.replicas is not None:
            # replicas moved without directories: keep known ones, the rest unassigned
            known = dict(zip(self.replicas, self.directories))
            directories = tuple(known.get(r, Uuid.ZERO) for r in replicas) if self.directories else ()
        else:
            directories = self.directories
        if rec.leader == NO_LEADER_CHANGE:
            leader, epoch = self.leader, self.leader_epoch
        else:
            leader, epoch = rec.leader, self.leader_epoch + 1
        lrs = self.leader_recovery_state if rec.leader_recovery_state == -1 else rec.leader_recovery_state
        return replace(self, replicas=replicas, isr=pick(rec.isr, self.isr),
                       removing_replicas=pick(rec.removing_replicas, self.removing_replicas),
                       adding_replicas=pick(rec.adding_replicas, self.adding_replicas),
                       leader=leader, leader_epoch=epoch, partition_epoch=self.partition_epoch + 1,
                       leader_recovery_state=lrs, directories=directories,
                       elr=pick(getattr(rec, "eligible_leader_replicas", None), self.elr),
                       last_known_elr=pick(getattr(rec, "last_known_elr", None), self.last_known_elr))


@dataclass(frozen=True, order=True)
class AclEntry:
    """An ACL as an AccessControlEntryRecord holds it (Kafka's ``StandardAcl``; the ids are
    Kafka's ``ResourceType``, ``PatternType``, ``AclOperation`` and ``AclPermissionType``)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True)
class ScramEntry:
    """A user's SCRAM credential for one mechanism (Kafka's ``ScramCredentialData``)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True)
class DelegationTokenEntry:
    """A delegation token (Kafka's ``TokenInformation``): principals as ``User:<name>``,
    times in ms since the epoch."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    max_ms: int
    expiry_ms: int

    def owner_or_renewer(self, principal: str) -> bool:
        """Kafka's ``TokenInformation.ownerOrRenewer``: the owner, the requester or a renewer."""
        return principal in (self.owner, self.requester) or principal in self.renewers


@dataclass
class TopicInfo:
    """A topic and its partitions by index."""

    name: str
    topic_id: Uuid
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


@dataclass
class MetadataChanges:
    """What changed in an image since the previous :meth:`MetadataImage.take_changes`.

    ``partitions`` holds ``(current, previous)`` pairs: ``current`` None for a deleted
    partition, ``previous`` None for a new one. ``brokers`` maps each changed broker id to its
    registration now (None: unregistered)."""

    topics_created: list[str] = field(default_factory=list)
    topics_deleted: list[str] = field(default_factory=list)
    partitions: list[tuple[Optional[PartitionInfo], Optional[PartitionInfo]]] = field(default_factory=list)
    brokers: dict[int, Optional[BrokerInfo]] = field(default_factory=dict)
    configs: list[tuple[int, str]] = field(default_factory=list)
    features: list[str] = field(default_factory=list)
    #: whether any ACL was added or removed
    acls: bool = False
    #: the (SCRAM mechanism id, user) whose credential was set or removed
    scram: list[tuple[int, str]] = field(default_factory=list)
    #: whether any client quota was set or removed
    client_quotas: bool = False
    #: the delegation tokens created, renewed or removed
    tokens: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.topics_created or self.topics_deleted or self.partitions or self.brokers
                    or self.configs or self.features or self.acls or self.scram or self.client_quotas
                    or self.tokens)


class MetadataImage:
    """The cluster as the metadata log describes it up to :attr:`offset`."""

    def __init__(self, cluster_id: Optional[str] = None) -> None:
        self.cluster_id = cluster_id
        self.offset = -1
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[Uuid, TopicInfo] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        #: finalized feature name -> level (``metadata.version`` among them)
        self.features: dict[str, int] = {}
        #: the offset of the last FeatureLevelRecord (-1: none yet)
        self.features_offset = -1
        #: registered controllers by id
        self.controllers: dict[int, ControllerInfo] = {}
        self.next_producer_id = 0
        #: the broker that took the last producer id block, and its epoch
        self.producer_ids_owner: tuple[int, int] = (-1, -1)
        #: ACLs by the id the controller gave them
        self.acls: dict[Uuid, AclEntry] = {}
        #: SCRAM credentials by (mechanism id: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512; user name)
        self.scram: dict[tuple[int, str], ScramEntry] = {}
        #: client quotas: entity ((type, name) pairs sorted by type, a None name the default
        #: entity) -> {key: value}
        self.client_quotas: dict[tuple[tuple[str, Optional[str]], ...], dict[str, float]] = {}
        #: delegation tokens by id
        self.tokens: dict[str, DelegationTokenEntry] = {}
        self._tokens: dict[str, None] = {}
        self._topics_created: dict[str, None] = {}
        self._topics_deleted: dict[str, None] = {}
        self._partitions: dict[tuple[Uuid, int], Optional[PartitionInfo]] = {}  # key -> previous
        self._brokers: set[int] = set()
        self._configs: dict[tuple[int, str], None] = {}
        self._features: dict[str, None] = {}
        self._acls = False
        self._scram: dict[tuple[int, str], None] = {}
        self._client_quotas = False

    # ------------------------------------------------------------------ reading
    def partition(self, topic: str, partition: int) -> Optional[PartitionInfo]:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(partition)

    def all_partitions(self) -> list[PartitionInfo]:
        return [p for t in self.topics.values() for p in t.partitions.values()]

    def copy(self) -> "MetadataImage":
        """An independent copy (partition states are shared: they are immutable)."""
        return copy.deepcopy(self)

    def __deepcopy__(self, memo: dict) -> "MetadataImage":
        out = MetadataImage.__new__(MetadataImage)
        for k, v in self.__dict__.items():
            if k == "topics_by_id":
                continue
            if k == "topics":
                v = {n: TopicInfo(t.name, t.topic_id, dict(t.partitions)) for n, t in v.items()}
            else:
                v = copy.deepcopy(v, memo)
            setattr(out, k, v)
        out.topics_by_id = {t.topic_id: t for t in out.topics.values()}
        return out

    # ------------------------------------------------------------------ replay
    def replay_value(self, value: bytes | memoryview, offset: int) -> None:
        """Replay one ``__cluster_metadata`` record value found at ``offset``. A record of a
        type the image does not keep is not decoded, so types newer than the schemas pass."""
        frame, pos = read_uvarint(value, 0)
        if frame == 1 and read_uvarint(value, pos)[0] not in _REPLAY:
            self.offset = offset
            return
        record_type, version, obj = decode_metadata_record(value)
        self.replay(record_type, version, obj, offset)

    def replay(self, record_type: int, version: int, obj: Any, offset: int) -> None:
        """Apply one metadata record; types the image does not keep (transactions markers,
        NoOp) only move
        :attr:`offset`."""
        handler = _REPLAY.get(record_type)
        if handler is not None:
            handler(self, obj)
        if record_type == RecordType.FEATURE_LEVEL:
            self.features_offset = offset
        self.offset = offset

    def _note_partition(self, key: tuple[Uuid, int], old: Optional[PartitionInfo]) -> None:
        """Remember a partition's state before its first change since take_changes."""
        if key not in self._partitions:
            self._partitions[key] = old

    def _topic_record(self, r: Any) -> None:
        t = TopicInfo(r.name, Uuid(r.topic_id))
        self.topics[r.name] = t
        self.topics_by_id[t.topic_id] = t
        self._topics_created[r.name] = None
        self._topics_deleted.pop(r.name, None)

    def _partition_record(self, r: Any) -> None:
        t = self.topics_by_id.get(r.topic_id)
        if t is None:
            return  # a partition of an unknown topic: nothing to attach it to
        p = PartitionInfo(
            topic=t.name, topic_id=t.topic_id, partition=r.partition_id, replicas=tuple(r.replicas),
            isr=tuple(r.isr), leader=r.leader, leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch, removing_replicas=tuple(r.removing_replicas),
            adding_replicas=tuple(r.adding_replicas), leader_recovery_state=r.leader_recovery_state,
            directories=tuple(r.directories or ()), elr=tuple(r.eligible_leader_replicas or ()),
            last_known_elr=tuple(r.last_known_elr or ()))
        old = t.partitions.get(p.partition)
        t.partitions[p.partition] = p
        self._note_partition((t.topic_id, p.partition), old)

    def _partition_change(self, r: Any) -> None:
        t = self.topics_by_id.get(r.topic_id)
        old = None if t is None else t.partitions.get(r.partition_id)
        if t is None or old is None:
            return  # Kafka rejects these on the controller; a replayed log may still hold them
        new = old.merge(r)
        t.partitions[r.partition_id] = new
        self._note_partition((t.topic_id, r.partition_id), old)

    def _remove_topic(self, r: Any) -> None:
        t = self.topics_by_id.pop(r.topic_id, None)
        if t is None:
            return
        del self.topics[t.name]
        for i, p in t.partitions.items():
            self._note_partition((t.topic_id, i), p)
        # a topic's configs go with it (Kafka's ConfigurationsDelta on RemoveTopicRecord)
        if self.configs.pop((TOPIC_RESOURCE, t.name), None) is not None:
            self._configs[(TOPIC_RESOURCE, t.name)] = None
        if self._topics_created.pop(t.name, "absent") == "absent":
            self._topics_deleted[t.name] = None

    def _register_broker(self, r: Any) -> None:
        self.brokers[r.broker_id] = BrokerInfo(
            id=r.broker_id, epoch=r.broker_epoch, incarnation_id=Uuid(r.incarnation_id),
            listeners=[Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points],
            rack=r.rack, fenced=bool(r.fenced), in_controlled_shutdown=bool(r.in_controlled_shutdown),
            log_dirs=[Uuid(d) for d in r.log_dirs or ()],
            features={f.name: (f.min_supported_version, f.max_supported_version) for f in r.features})
        self._brokers.add(r.broker_id)

    def _unregister_broker(self, r: Any) -> None:
        if self.brokers.pop(r.broker_id, None) is not None:
            self._brokers.add(r.broker_id)

    def _register_controller(self, r: Any) -> None:
        self.controllers[r.controller_id] = ControllerInfo(
            r.controller_id, Uuid(r.incarnation_id),
            tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points),
            {f.name: (f.min_supported_version, f.max_supported_version) for f in r.features})

    def _unregister_controller(self, r: Any) -> None:
        self.controllers.pop(r.controller_id, None)

    def _broker(self, broker_id: int, epoch: int) -> Optional[BrokerInfo]:
        b = self.brokers.get(broker_id)
        # a change for an older registration of the id is stale
        return b if b is not None and b.epoch == epoch else None

    def _fence(self, broker_id: int, epoch: int, fenced: bool) -> None:
        b = self._broker(broker_id, epoch)
        if b is not None:
            b.fenced = fenced
            self._brokers.add(broker_id)

    def _registration_change(self, r: Any) -> None:
        b = self._broker(r.broker_id, r.broker_epoch)
        if b is None:
            return
        if r.fenced == 1:
            b.fenced = True
        elif r.fenced == -1:
            b.fenced = False
        if getattr(r, "in_controlled_shutdown", 0) == 1:
            b.in_controlled_shutdown = True
        if getattr(r, "log_dirs", None):
            b.log_dirs = [Uuid(d) for d in r.log_dirs]
        self._brokers.add(r.broker_id)

    def _config(self, r: Any) -> None:
        key = (r.resource_type, r.resource_name)
        if r.value is None:
            entries = self.configs.get(key)
            if entries is not None:
                entries.pop(r.name, None)
                if not entries:
                    del self.configs[key]
        else:
            self.configs.setdefault(key, {})[r.name] = r.value
        self._configs[key] = None

    def _feature(self, r: Any) -> None:
        if r.feature_level == 0:
            self.features.pop(r.name, None)
        else:
            self.features[r.name] = r.feature_level
        self._features[r.name] = None

    def _producer_ids(self, r: Any) -> None:
        self.next_producer_id = r.next_producer_id
        self.producer_ids_owner = (r.broker_id, r.broker_epoch)

    def _acl(self, r: Any) -> None:
        self.acls[Uuid(r.id)] = AclEntry(r.resource_type, r.resource_name, r.pattern_type,
                                         r.principal, r.host, r.operation, r.permission_type)
        self._acls = True

    def _remove_acl(self, r: Any) -> None:
        if self.acls.pop(Uuid(r.id), None) is not None:
            self._acls = True

    def _scram_credential(self, r: Any) -> None:
        key = (r.mechanism, r.name)
        self.scram[key] = ScramEntry(bytes(r.salt), bytes(r.stored_key), bytes(r.server_key),
                                     r.iterations)
        self._scram[key] = None

    def _remove_scram_credential(self, r: Any) -> None:
        key = (r.mechanism, r.name)
        if self.scram.pop(key, None) is not None:
            self._scram[key] = None

    def _delegation_token(self, r: Any) -> None:
        self.tokens[r.token_id] = DelegationTokenEntry(
            r.token_id, r.owner, r.requester, tuple(r.renewers), r.issue_timestamp,
            r.max_timestamp, r.expiration_timestamp)
        self._tokens[r.token_id] = None

    def _remove_delegation_token(self, r: Any) -> None:
        if self.tokens.pop(r.token_id, None) is not None:
            self._tokens[r.token_id] = None

    def _client_quota(self, r: Any) -> None:
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in r.entity))
        if r.remove:
            values = self.client_quotas.get(entity)
            if values is not None and values.pop(r.key, None) is not None and not values:
                del self.client_quotas[entity]
        else:
            self.client_quotas.setdefault(entity, {})[r.key] = r.value
        self._client_quotas = True

    def _clear_elr(self, r: Any) -> None:
        topics = self.topics.values() if not r.topic_name else (
            [self.topics[r.topic_name]] if r.topic_name in self.topics else [])
        for t in topics:
            for i, p in list(t.partitions.items()):
                if p.elr or p.last_known_elr:
                    new = replace(p, elr=(), last_known_elr=(), partition_epoch=p.partition_epoch + 1)
                    t.partitions[i] = new
                    self._note_partition((t.topic_id, i), p)

    # ------------------------------------------------------------------ snapshots
    def records(self) -> list[tuple[Any, int]]:
        """The image as the ``(record, version)`` list a KRaft snapshot holds, in Kafka's
        ``MetadataImage.write`` order: features (``metadata.version`` first), brokers, controllers,
        topics with their partitions, configs, client quotas, the producer id block, ACLs, SCRAM
        credentials, delegation tokens.
        Replaying them into an empty image gives this one back. The versions are those the
        controller writes at
        ``metadata.version`` 3.9-IV0; record types the image does not keep are not written."""
        from kproto.codecs import metadata_record

        out: list[tuple[Any, int]] = []
        feature = metadata_record(RecordType.FEATURE_LEVEL)
        for name in sorted(self.features, key=lambda n: (n != "metadata.version", n)):
            out.append((feature(name=name, feature_level=self.features[name]), 0))
        register = metadata_record(RecordType.REGISTER_BROKER)
        for b in sorted(self.brokers.values(), key=lambda b: b.id):
            out.append((register(
                broker_id=b.id, is_migrating_zk_broker=False, incarnation_id=b.incarnation_id,
                broker_epoch=b.epoch,
                end_points=[register.cls.BrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                        security_protocol=e.security_protocol)
                            for e in b.listeners],
                features=[register.cls.BrokerFeature(name=n, min_supported_version=lo,
                                                     max_supported_version=hi)
                          for n, (lo, hi) in b.features.items()],
                rack=b.rack, fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown,
                log_dirs=list(b.log_dirs)), 3))
        controller = metadata_record(RecordType.REGISTER_CONTROLLER)
        for ctl in sorted(self.controllers.values(), key=lambda c: c.id):
            out.append((controller(
                controller_id=ctl.id, incarnation_id=ctl.incarnation_id, zk_migration_ready=False,
                end_points=[controller.cls.ControllerEndpoint(name=e.name, host=e.host, port=e.port,
                                                              security_protocol=e.security_protocol)
                            for e in ctl.listeners],
                features=[controller.cls.ControllerFeature(name=n, min_supported_version=lo,
                                                           max_supported_version=hi)
                          for n, (lo, hi) in ctl.features.items()]), 0))
        topic, partition = metadata_record(RecordType.TOPIC), metadata_record(RecordType.PARTITION)
        for t in sorted(self.topics.values(), key=lambda t: t.name):
            out.append((topic(name=t.name, topic_id=t.topic_id), 0))
            for i in sorted(t.partitions):
                p = t.partitions[i]
                out.append((partition(
                    partition_id=i, topic_id=t.topic_id, replicas=list(p.replicas),
                    isr=list(p.isr), removing_replicas=list(p.removing_replicas),
                    adding_replicas=list(p.adding_replicas), leader=p.leader,
                    leader_recovery_state=p.leader_recovery_state, leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch, directories=list(p.directories),
                    # Kafka sets the ELR fields only where ELR is enabled (absent: null)
                    eligible_leader_replicas=list(p.elr) if p.elr else None,
                    last_known_elr=list(p.last_known_elr) if p.last_known_elr else None), 2))
        config = metadata_record(RecordType.CONFIG)
        for (rtype, rname), entries in sorted(self.configs.items()):
            for name, value in sorted(entries.items()):
                out.append((config(resource_type=rtype, resource_name=rname, name=name,
                                   value=value), 0))
        quota = metadata_record(RecordType.CLIENT_QUOTA)
        for entity, values in sorted(self.client_quotas.items(), key=lambda kv: repr(kv[0])):
            for key, amount in sorted(values.items()):
                out.append((quota(entity=[quota.cls.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                                  key=key, value=amount, remove=False), 0))
        if self.next_producer_id > 0 or self.producer_ids_owner != (-1, -1):
            # Kafka's ProducerIdsImage.write: the next block only, no owner
            out.append((metadata_record(RecordType.PRODUCER_IDS)(
                broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id), 0))
        acl = metadata_record(RecordType.ACCESS_CONTROL_ENTRY)
        for acl_id, a in sorted(self.acls.items(), key=lambda kv: kv[1]):
            out.append((acl(id=acl_id, resource_type=a.resource_type, resource_name=a.resource_name,
                            pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                            operation=a.operation, permission_type=a.permission), 0))
        scram = metadata_record(RecordType.USER_SCRAM_CREDENTIAL)
        for (mechanism, user), c in sorted(self.scram.items()):
            out.append((scram(name=user, mechanism=mechanism, salt=c.salt, stored_key=c.stored_key,
                              server_key=c.server_key, iterations=c.iterations), 0))
        token = metadata_record(RecordType.DELEGATION_TOKEN)
        for _, tok in sorted(self.tokens.items()):
            out.append((token(owner=tok.owner, requester=tok.requester, renewers=list(tok.renewers),
                              issue_timestamp=tok.issue_ms, max_timestamp=tok.max_ms,
                              expiration_timestamp=tok.expiry_ms, token_id=tok.token_id), 0))
        return out

    def note_changes_since(self, old: "MetadataImage") -> None:
        """Make :meth:`take_changes` report what differs from ``old`` (an image replaced by
        one loaded from a snapshot, as Kafka's loader diffs the two images)."""
        self.take_changes()
        ids = {n: t.topic_id for n, t in self.topics.items()}
        old_ids = {n: t.topic_id for n, t in old.topics.items()}
        for name, topic_id in ids.items():
            if old_ids.get(name) != topic_id:
                self._topics_created[name] = None
        for name, topic_id in old_ids.items():
            if ids.get(name) != topic_id:
                self._topics_deleted[name] = None
        keys = {(t.topic_id, i) for img in (self, old) for t in img.topics.values()
                for i in t.partitions}
        for topic_id, i in keys:
            now_topic, old_topic = self.topics_by_id.get(topic_id), old.topics_by_id.get(topic_id)
            now = None if now_topic is None else now_topic.partitions.get(i)
            before = None if old_topic is None else old_topic.partitions.get(i)
            if now != before:
                self._partitions[(topic_id, i)] = before
        self._brokers = {i for i in set(self.brokers) | set(old.brokers)
                         if self.brokers.get(i) != old.brokers.get(i)}
        self._configs = {k: None for k in set(self.configs) | set(old.configs)
                         if self.configs.get(k) != old.configs.get(k)}
        self._features = {n: None for n in set(self.features) | set(old.features)
                          if self.features.get(n) != old.features.get(n)}
        self._acls = self.acls != old.acls
        self._scram = {k: None for k in set(self.scram) | set(old.scram)
                       if self.scram.get(k) != old.scram.get(k)}
        self._client_quotas = self.client_quotas != old.client_quotas
        self._tokens = {k: None for k in set(self.tokens) | set(old.tokens)
                        if self.tokens.get(k) != old.tokens.get(k)}

    # ------------------------------------------------------------------ changes
    def take_changes(self) -> MetadataChanges:
        """What changed since the previous call (or since the image was made)."""
        out = MetadataChanges(topics_created=list(self._topics_created),
                              topics_deleted=list(self._topics_deleted),
                              brokers={i: self.brokers.get(i) for i in sorted(self._brokers)},
                              configs=list(self._configs), features=list(self._features),
                              acls=self._acls, scram=list(self._scram), client_quotas=self._client_quotas,
                              tokens=list(self._tokens))
        for (topic_id, index), previous in self._partitions.items():
            t = self.topics_by_id.get(topic_id)
            current = None if t is None else t.partitions.get(index)
            if current is None and previous is None:
                continue  # created and deleted between two calls
            if current is not previous:
                out.partitions.append((current, previous))
        self._topics_created, self._topics_deleted = {}, {}
        self._partitions, self._brokers = {}, set()
        self._configs, self._features = {}, {}
        self._acls, self._scram = False, {}
        self._client_quotas = False
        self._tokens = {}
        return out


_REPLAY = {
    RecordType.REGISTER_BROKER: MetadataImage._register_broker,
    RecordType.UNREGISTER_BROKER: MetadataImage._unregister_broker,
    RecordType.TOPIC: MetadataImage._topic_record,
    RecordType.PARTITION: MetadataImage._partition_record,
    RecordType.CONFIG: MetadataImage._config,
    RecordType.PARTITION_CHANGE: MetadataImage._partition_change,
    RecordType.FENCE_BROKER: lambda self, r: self._fence(r.id, r.epoch, True),
    RecordType.UNFENCE_BROKER: lambda self, r: self._fence(r.id, r.epoch, False),
    RecordType.REMOVE_TOPIC: MetadataImage._remove_topic,
    RecordType.FEATURE_LEVEL: MetadataImage._feature,
    RecordType.PRODUCER_IDS: MetadataImage._producer_ids,
    RecordType.BROKER_REGISTRATION_CHANGE: MetadataImage._registration_change,
    RecordType.CLEAR_ELR: MetadataImage._clear_elr,
    RecordType.REGISTER_CONTROLLER: MetadataImage._register_controller,
    RecordType.UNREGISTER_CONTROLLER: MetadataImage._unregister_controller,
    RecordType.ACCESS_CONTROL_ENTRY: MetadataImage._acl,
    RecordType.REMOVE_ACCESS_CONTROL_ENTRY: MetadataImage._remove_acl,
    RecordType.USER_SCRAM_CREDENTIAL: MetadataImage._scram_credential,
    RecordType.REMOVE_USER_SCRAM_CREDENTIAL: MetadataImage._remove_scram_credential,
    RecordType.CLIENT_QUOTA: MetadataImage._client_quota,
    RecordType.DELEGATION_TOKEN: MetadataImage._delegation_token,
    RecordType.REMOVE_DELEGATION_TOKEN: MetadataImage._remove_delegation_token,
}
