"""The single broker's metadata quorum: the broker is also its cluster's only controller, as an
Apache Kafka node with ``process.roles=broker,controller`` and one voter.

:class:`CombinedMetadata` keeps ``__cluster_metadata-0`` in the broker's own log directory
with the cluster's pieces: a one-voter :class:`~kproto.broker.cluster.raft.KRaftReplica` (it
elects itself at once; each write is committed as it is appended, LeaderChange records,
``quorum-state`` and ``<offset>-<epoch>.checkpoint`` snapshots as Kafka writes them) and a
:class:`~kproto.broker.cluster.controller.QuorumController` over it (its activation writes the
feature levels and the cluster-wide defaults a new cluster is formatted with). The broker's
state lives in the controller's image: topics and partitions (TopicRecord, PartitionRecord,
RemoveTopicRecord), topic, group and dynamic broker configs (ConfigRecord), ACLs
(AccessControlEntryRecord), SCRAM credentials (UserScramCredentialRecord) and feature levels
(FeatureLevelRecord). The ``sync_*``/``store_*`` methods write the records that bring the image
to what the broker holds; the broker reads its state back from the image at start.

A directory of an older kproto (``kproto-configs.json``, ``kproto-security.json``,
``kproto-features.json``) is migrated once by :mod:`~kproto.broker.cluster.migration`, the
files renamed ``*.migrated``.
"""
from __future__ import annotations

import os
from dataclasses import astuple
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from kproto.broker.cluster.controller import ControllerConfig, QuorumController, partition_record
from kproto.broker.cluster.migration import migration_records, read_legacy_state, retire_files
from kproto.broker.group_configs import GROUP_RESOURCE, group_config_records, group_configs_of
from kproto.broker.cluster.raft import (METADATA_TOPIC, KRaftReplica, RaftConfig, RaftMetadataLog,
                                        open_metadata_log)
from kproto.broker.security.acl import AclBinding
from kproto.broker.security.auth import ScramCredential, image_credentials, scram_records
from kproto.broker.timer import SystemTimer
from kproto.codecs import metadata_record
from kproto.codecs.primitives import Uuid
from kproto.storage.metadata_image import BROKER_RESOURCE, TOPIC_RESOURCE, MetadataImage, RecordType

if TYPE_CHECKING:
    from kproto.broker.log import Topic

__all__ = ["CombinedMetadata"]



class _NoPeers:
    """The transport of a quorum of one: there is nobody to ask."""

    def send(self, dst: int, api_key: int, version: int, body: Any,
             on_response: Callable[[Any], None], timeout_ms: int) -> None:
        on_response(None)


class CombinedMetadata:
    """``__cluster_metadata-0`` of a one-node cluster under ``data_dir``, recovered when it
    exists; the node leads it (and its controller is active) once constructed."""

    def __init__(self, data_dir: str, *, node_id: int, cluster_id: str, directory_id: Uuid,
                 timer: SystemTimer, controller_config: ControllerConfig,
                 raft_config: Optional[RaftConfig] = None) -> None:
        self.node_id = node_id
        self.directory_id = directory_id
        #: the metadata log is new (a directory formatted now, or one of an older kproto)
        self.created = not os.path.isdir(os.path.join(data_dir, f"{METADATA_TOPIC}-0"))
        self.log = open_metadata_log(data_dir, raft_config)
        self.replica = KRaftReplica(node_id, [node_id], self.log, cluster_id=cluster_id,
                                    transport=_NoPeers(), timer=timer, config=raft_config)
        self.controller = QuorumController(node_id, RaftMetadataLog(self.replica), timer, controller_config)
        self.replica.register(self.controller)
        if not self.controller.is_active:  # a quorum of one always elects itself
            raise RuntimeError(f"node {node_id} did not become the metadata leader")
        #: what could not be read of the old JSON files migrated at start
        self.migration_problems: list[str] = []
        #: the SCRAM credentials (mechanism name, user) the old files named, deleted ones too
        self.migrated_scram: set[tuple[str, str]] = set()

    @property
    def image(self) -> MetadataImage:
        """The metadata: every record written is committed at once, so this is the committed state."""
        return self.controller.image

    def write(self, records: list[tuple[Any, int]]) -> None:
        """Append ``records`` (record, version) as one batch; committed on return."""
        if not records:
            return
        done: list[bool] = []
        self.controller.write_records(records, done.append)
        if done != [True]:
            raise RuntimeError("the metadata records were not committed")

    def snapshot(self) -> None:
        """Write a snapshot of the image now (and clean the log as Kafka does after one)."""
        self.replica.create_snapshot(self.controller.snapshot_records())

    def close(self, clean: bool = True) -> None:
        self.replica.shutdown(graceful=False)
        self.log.close(clean)

    # ------------------------------------------------------------------ migration
    def migrate(self, data_dir: str) -> None:
        """Write what the JSON files of an older kproto in ``data_dir`` hold and the image lacks,
        then rename the files ``*.migrated`` (the topics must be in the image already)."""
        state = read_legacy_state([data_dir])
        self.migration_problems = state.problems
        self.migrated_scram = state.scram_keys
        if state.files:
            self.write(migration_records(state, self.image, self.controller.new_acl_id))
            retire_files(state)

    # ------------------------------------------------------------------ topics
    def sync_topics(self, topics: Mapping[str, Topic], names: Optional[Iterable[str]] = None) -> None:
        """Records for the topics (and partitions) the broker has and the image does not, and a
        RemoveTopicRecord for each topic the broker no longer has; ``names``: only these."""
        image = self.image
        check = sorted(set(image.topics) | set(topics) if names is None else set(names))
        records: list[tuple[Any, int]] = []
        me = [self.node_id]
        for name in check:
            t, info = topics.get(name), image.topics.get(name)
            have = 0
            if info is not None and (t is None or t.topic_id != info.topic_id):
                records.append((metadata_record(RecordType.REMOVE_TOPIC)(topic_id=info.topic_id), 0))
                info = None
            if t is None:
                continue
            if info is None:
                # the topic's configs between its TopicRecord and its PartitionRecords, as Kafka's
                # controller writes a new topic
                config = metadata_record(RecordType.CONFIG)
                records.append((metadata_record(RecordType.TOPIC)(name=name, topic_id=t.topic_id), 0))
                records += [(config(resource_type=TOPIC_RESOURCE, resource_name=name, name=k, value=v), 0)
                            for k, v in sorted(t.configs.items())]
            else:
                have = len(info.partitions)
            records += [partition_record(t.topic_id, p, me, me, [self.directory_id])
                        for p in range(have, len(t.partitions))]
        self.write(records)

    # ------------------------------------------------------------------ configs
    def stored_configs(self) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
        """(dynamic broker configs by broker name, "" the cluster default; topic configs by name)."""
        broker = {n: dict(c) for (kind, n), c in self.image.configs.items() if kind == BROKER_RESOURCE}
        topics = {n: dict(c) for (kind, n), c in self.image.configs.items() if kind == TOPIC_RESOURCE}
        return broker, topics

    def store_configs(self, broker: Mapping[str, Mapping[str, str]],
                      topics: Mapping[str, Mapping[str, str]]) -> None:
        """ConfigRecords for every value that differs from the image (null: removed)."""
        wanted = {(BROKER_RESOURCE, n): c for n, c in broker.items()}
        wanted.update({(TOPIC_RESOURCE, n): c for n, c in topics.items() if n in self.image.topics})
        record = metadata_record(RecordType.CONFIG)
        records = []
        for key in sorted(set(wanted) | set(self.image.configs)):
            if key[0] not in (BROKER_RESOURCE, TOPIC_RESOURCE):
                continue  # group configs are stored on their own
            have, want = self.image.configs.get(key, {}), wanted.get(key, {})
            if key not in wanted and key[0] == TOPIC_RESOURCE and key[1] not in self.image.topics:
                continue
            records += [(record(resource_type=key[0], resource_name=key[1], name=k, value=want.get(k)), 0)
                        for k in sorted(set(have) | set(want)) if have.get(k) != want.get(k)]
        self.write(records)

    def stored_group_configs(self) -> dict[str, dict[str, str]]:
        """Every group's configs (ConfigRecords of resource type GROUP)."""
        return group_configs_of(self.image.configs)

    def store_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """ConfigRecords taking the group's configs in the image to ``configs``."""
        self.write(group_config_records(group_id, self.image.configs.get((GROUP_RESOURCE, group_id), {}), configs))

    # ------------------------------------------------------------------ ACLs and SCRAM
    def stored_acls(self) -> set[AclBinding]:
        return {AclBinding(*astuple(e)) for e in self.image.acls.values()}

    def store_acls(self, acls: Iterable[AclBinding]) -> None:
        """AccessControlEntryRecords for the ACLs not in the image, removals for those gone."""
        wanted = set(acls)
        have = {AclBinding(*astuple(e)): acl_id for acl_id, e in self.image.acls.items()}
        gone = metadata_record(RecordType.REMOVE_ACCESS_CONTROL_ENTRY)
        records: list[tuple[Any, int]] = [(gone(id=acl_id), 0) for b, acl_id in sorted(have.items())
                                          if b not in wanted]
        add = metadata_record(RecordType.ACCESS_CONTROL_ENTRY)
        for b in sorted(wanted - set(have)):
            records.append((add(id=self.controller.new_acl_id(), resource_type=b.resource_type,
                                resource_name=b.resource_name, pattern_type=b.pattern_type,
                                principal=b.principal, host=b.host, operation=b.operation,
                                permission_type=b.permission), 0))
        self.write(records)

    def stored_scram(self) -> dict[tuple[str, str], Optional[ScramCredential]]:
        """SCRAM credentials by (mechanism name, user)."""
        return image_credentials(self.image.scram)

    def store_scram(self, credentials: Mapping[tuple[str, str], Optional[ScramCredential]]) -> None:
        """Records for the credentials that differ from the image (None: removed)."""
        self.write(scram_records(dict(sorted(credentials.items())), self.image.scram))

    # ------------------------------------------------------------------ features
    def feature_levels(self) -> tuple[dict[str, int], int]:
        """The finalized levels and their epoch (the offset of the last FeatureLevelRecord, as
        a controller answers it)."""
        return dict(self.image.features), self.image.features_offset

    def store_features(self, levels: Mapping[str, int]) -> None:
        """A FeatureLevelRecord per level that changes (0: the feature is no longer finalized)."""
        record = metadata_record(RecordType.FEATURE_LEVEL)
        self.write([(record(name=n, feature_level=lv), 0) for n, lv in levels.items()
                    if self.image.features.get(n, 0) != lv])
