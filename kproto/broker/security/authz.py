"""Where a request needs which rights: Kafka's ``KafkaApis`` checks, API by API.

:meth:`RequestAuthorizer.check` looks at a decoded request with the connection's principal
and host and says what the core does before (or instead of) running the handler
(:class:`Verdict`):

- ``error``: the whole request is refused with that code, answered as the core answers any
  error (every topic and partition of the request mirrored): JoinGroup without READ on the
  group is GROUP_AUTHORIZATION_FAILED, EndTxn without WRITE on the transactional id
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, InitProducerId without IDEMPOTENT_WRITE on the
  cluster nor WRITE on any topic CLUSTER_AUTHORIZATION_FAILED;
- ``response``: this answer instead of the handler's (AddPartitionsToTxn with a topic it may
  not write: that topic TOPIC_AUTHORIZATION_FAILED, the rest OPERATION_NOT_ATTEMPTED);
- ``patch``: the request's unauthorized entries were taken out of the body, the handler runs
  on the rest and ``patch`` puts them back into its response with their errors (a Produce to
  a topic without WRITE, a Fetch of one without READ, ListOffsets/Metadata without DESCRIBE,
  CreateTopics without CREATE, a group without DESCRIBE in DescribeGroups, ...); lists of
  everything (Metadata of all topics, ListGroups, OffsetFetch of all topics) leave out what
  the principal may not describe, as Kafka does.

Kafka checks rights before existence, so a topic one may not see is TOPIC_AUTHORIZATION_FAILED
whether it exists or not. Fetch's unauthorized partitions are answered with their error and
do not enter the fetch session.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from kproto.broker.security.acl import (ALTER, ALTER_CONFIGS, CLUSTER, CLUSTER_NAME, CREATE, DELETE, DESCRIBE,
                               DESCRIBE_CONFIGS, GROUP, IDEMPOTENT_WRITE, READ, TOPIC, TRANSACTIONAL_ID,
                               WRITE, CLUSTER_ACTION, Authorizer)
from kproto.broker.security.auth import ConnectionAuth
from kproto.broker.context import BrokerContext
from kproto.codecs import response as response_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.fetch_session.messages import request_replica_id
from kproto.schemas.api_keys import ApiKey

__all__ = ["RequestAuthorizer", "Verdict"]

_TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
_GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
_TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
_CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
_CONFIG_TOPIC, _CONFIG_BROKER, _CONFIG_BROKER_LOGGER = 2, 4, 8


@dataclass
class Verdict:
    """What the core does with a request (see the module's text)."""

    error: Optional[int] = None
    response: Any = None
    patch: Optional[Callable[[Any], Any]] = None


Rule = Callable[[int, Any, ConnectionAuth], Optional[Verdict]]


class RequestAuthorizer:
    """The per-API checks over an :class:`~kproto.broker.security.acl.Authorizer`."""

    def __init__(self, authorizer: Authorizer, broker: BrokerContext) -> None:
        self.authorizer = authorizer
        self.broker = broker
        self._session: Optional[ConnectionAuth] = None
        self.rules: dict[int, Rule] = {
            ApiKey.PRODUCE: self._produce, ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets, ApiKey.METADATA: self._metadata,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offsets_for_leader_epoch,
            ApiKey.CREATE_TOPICS: self._create_topics, ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DELETE_RECORDS: self._delete_records,
            ApiKey.DESCRIBE_CONFIGS: self._configs(DESCRIBE_CONFIGS, "results"),
            ApiKey.ALTER_CONFIGS: self._configs(ALTER_CONFIGS, "responses"),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._configs(ALTER_CONFIGS, "responses"),
            ApiKey.DESCRIBE_LOG_DIRS: self._describe_log_dirs,
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.JOIN_GROUP: self._group(READ), ApiKey.SYNC_GROUP: self._group(READ),
            ApiKey.HEARTBEAT: self._group(READ), ApiKey.LEAVE_GROUP: self._group(READ),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._consumer_heartbeat,
            ApiKey.OFFSET_COMMIT: self._offset_commit, ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch, ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups, ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._consumer_group_describe,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self._add_offsets_to_txn, ApiKey.END_TXN: self._end_txn,
            ApiKey.DESCRIBE_TRANSACTIONS: self._describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self._list_transactions,
            ApiKey.DESCRIBE_PRODUCERS: self._describe_producers,
            ApiKey.CREATE_ACLS: self._create_acls, ApiKey.DELETE_ACLS: self._delete_acls,
            ApiKey.DESCRIBE_ACLS: self._cluster_top_level(DESCRIBE),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._cluster_top_level(DESCRIBE),
            ApiKey.UPDATE_FEATURES: self._cluster_top_level(ALTER),
            ApiKey.DESCRIBE_QUORUM: self._cluster_top_level(DESCRIBE),
            ApiKey.UNREGISTER_CONTROLLER: self._cluster_top_level(ALTER),
            # partition administration (DescribeTopicPartitions checks each topic in its handler)
            ApiKey.ELECT_LEADERS: self._cluster_top_level(ALTER),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._cluster_top_level(ALTER),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._cluster_top_level(DESCRIBE),
            ApiKey.LIST_CONFIG_RESOURCES: self._cluster_top_level(DESCRIBE_CONFIGS),
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter_scram,
            # share groups (KIP-932): the group's READ (DESCRIBE to describe), the topics' READ
            # to fetch and acknowledge; the persister's RPCs are the brokers' (CLUSTER_ACTION)
            ApiKey.SHARE_GROUP_HEARTBEAT: self._consumer_heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: self._consumer_group_describe,
            ApiKey.SHARE_FETCH: self._share_fetch(ApiKey.SHARE_FETCH),
            ApiKey.SHARE_ACKNOWLEDGE: self._share_fetch(ApiKey.SHARE_ACKNOWLEDGE),
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self._describe_share_group_offsets,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: self._group(READ),
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: self._group(DELETE),
            ApiKey.INITIALIZE_SHARE_GROUP_STATE: self._cluster_top_level(CLUSTER_ACTION),
            ApiKey.READ_SHARE_GROUP_STATE: self._cluster_top_level(CLUSTER_ACTION),
            ApiKey.WRITE_SHARE_GROUP_STATE: self._cluster_top_level(CLUSTER_ACTION),
            ApiKey.DELETE_SHARE_GROUP_STATE: self._cluster_top_level(CLUSTER_ACTION),
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: self._cluster_top_level(CLUSTER_ACTION),
        }

    def check(self, api_key: int, version: int, body: Any, session: ConnectionAuth) -> Optional[Verdict]:
        rule = self.rules.get(api_key)
        return None if rule is None else rule(version, body, session)

    # -------------------------------------------------------------- helpers
    def ok(self, s: ConnectionAuth, op: int, rtype: int, name: Optional[str]) -> bool:
        return self.authorizer.authorize(s.principal, s.host, op, rtype, name or "")

    def _cluster(self, s: ConnectionAuth, op: int) -> bool:
        return self.ok(s, op, CLUSTER, CLUSTER_NAME)

    @staticmethod
    def _patch_list(field: str, make: Callable[[Any], list[Any]], denied: list[Any]) -> Verdict:
        """A Verdict whose patch appends ``make(cls)`` entries to the response's ``field``."""
        def patch(resp: Any) -> Any:
            cls = type(resp)
            getattr(resp, field).extend(make(cls))
            return resp
        return Verdict(patch=patch)

    def _strip(self, items: list[Any], allowed: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
        keep: list[Any] = []
        denied: list[Any] = []
        for it in items:
            (keep if allowed(it) else denied).append(it)
        return keep, denied

    # -------------------------------------------------------------- produce / fetch / offsets
    def _produce(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if body.transactional_id is not None and not self.ok(s, WRITE, TRANSACTIONAL_ID, body.transactional_id):
            return Verdict(error=_TXN_DENIED)
        # v13 names topics by id: an unknown one (no name filled in) is UNKNOWN_TOPIC_ID, not denied
        body.topic_data, denied = self._strip(list(body.topic_data), lambda t: (
            ver >= 13 and not t.name) or self.ok(s, WRITE, TOPIC, t.name))
        if not denied:
            return None
        return self._patch_list("responses", lambda cls: [cls.TopicProduceResponse(
            name=t.name, topic_id=t.topic_id, partition_responses=[cls.PartitionProduceResponse(
                index=p.index, error_code=_TOPIC_DENIED, base_offset=-1, log_append_time_ms=-1,
                log_start_offset=-1) for p in t.partition_data]) for t in denied], denied)

    def _fetch(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if request_replica_id(body, ver) >= 0:
            return None if self._cluster(s, CLUSTER_ACTION) else Verdict(error=_TOPIC_DENIED)
        by_id = self.broker.logs.topics_by_id

        def name_of(t: Any) -> Optional[str]:
            if ver < 13:
                return str(t.topic)
            topic = by_id.get(t.topic_id)
            return None if topic is None else topic.name

        def allowed(t: Any) -> bool:
            name = name_of(t)
            return name is None or self.ok(s, READ, TOPIC, name)  # unknown ids: UNKNOWN_TOPIC_ID
        body.topics, denied = self._strip(list(body.topics), allowed)
        if not denied:
            return None
        return self._patch_list("responses", lambda cls: [cls.FetchableTopicResponse(
            topic=name_of(t) if ver < 13 else "", topic_id=t.topic_id if ver >= 13 else Uuid.ZERO,
            partitions=[cls.PartitionData(partition_index=p.partition, error_code=_TOPIC_DENIED,
                                          high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                          # empty, not null, as Kafka's MemoryRecords.EMPTY:
                                          # librdkafka refuses a null record set
                                          records=b"") for p in t.partitions]) for t in denied], denied)

    def _list_offsets(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.topics, denied = self._strip(list(body.topics), lambda t: self.ok(s, DESCRIBE, TOPIC, t.name))
        if not denied:
            return None
        return self._patch_list("topics", lambda cls: [cls.ListOffsetsTopicResponse(
            name=t.name, partitions=[cls.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=_TOPIC_DENIED, timestamp=-1, offset=-1)
                for p in t.partitions]) for t in denied], denied)

    def _offsets_for_leader_epoch(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        # a follower's request (replica_id >= 0, v3+) needs CLUSTER_ACTION, a client's DESCRIBE
        if ver >= 3 and body.replica_id >= 0:
            return None if self._cluster(s, CLUSTER_ACTION) else Verdict(error=_CLUSTER_DENIED)
        body.topics, denied = self._strip(list(body.topics), lambda t: self.ok(s, DESCRIBE, TOPIC, t.topic))
        if not denied:
            return None
        return self._patch_list("topics", lambda cls: [cls.OffsetForLeaderTopicResult(
            topic=t.topic, partitions=[cls.EpochEndOffset(error_code=_TOPIC_DENIED, partition=p.partition,
                                                          leader_epoch=-1, end_offset=-1)
                                       for p in t.partitions]) for t in denied], denied)

    def _metadata(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if body.topics is None or (ver == 0 and not body.topics):
            def only_described(resp: Any) -> Any:
                resp.topics = [t for t in resp.topics if self.ok(s, DESCRIBE, TOPIC, t.name)]
                return resp
            return Verdict(patch=only_described)
        logs = self.broker.logs
        auto = self.broker.config.auto_create_topics and (ver < 4 or body.allow_auto_topic_creation)
        may_create_any = auto and self._cluster(s, CREATE)
        keep, denied = [], []
        for t in body.topics:
            name = t.name
            if name is None or getattr(t, "topic_id", Uuid.ZERO) not in (None, Uuid.ZERO):
                # asked by id (the name, if any, is not looked at: the Java client sends "")
                topic = logs.topics_by_id.get(t.topic_id)
                if topic is not None and not self.ok(s, DESCRIBE, TOPIC, topic.name):
                    denied.append((None, t.topic_id))
                    continue
            elif not self.ok(s, DESCRIBE, TOPIC, name):
                denied.append((name, Uuid.ZERO))
                continue
            elif (auto and name not in logs.topics and not may_create_any
                  and not self.ok(s, CREATE, TOPIC, name)):
                denied.append((name, Uuid.ZERO))  # would be auto-created: needs CREATE
                continue
            keep.append(t)
        if not denied:
            return None
        body.topics = keep
        # v0's empty list asks for every topic: then only the refused ones are answered
        replace = ver == 0 and not keep

        def patch(resp: Any) -> Any:
            cls = type(resp)
            refused = [cls.MetadataResponseTopic(error_code=_TOPIC_DENIED, name=n, topic_id=tid,
                                                 is_internal=False, partitions=[]) for n, tid in denied]
            resp.topics = refused if replace else list(resp.topics) + refused
            return resp
        return Verdict(patch=patch)

    # -------------------------------------------------------------- topics and configs
    def _create_topics(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if self._cluster(s, CREATE):
            return None
        names = [t.name for t in body.topics]
        body.topics, denied = self._strip(
            list(body.topics), lambda t: names.count(t.name) > 1 or self.ok(s, CREATE, TOPIC, t.name))
        if not denied:
            return None
        return self._patch_list("topics", lambda cls: [cls.CreatableTopicResult(
            name=t.name, error_code=_TOPIC_DENIED, error_message="Authorization failed.")
            for t in denied], denied)

    def _delete_topics(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if ver < 6:
            body.topic_names, denied_names = self._strip(
                list(body.topic_names), lambda n: self.ok(s, DELETE, TOPIC, n))
            if not denied_names:
                return None
            return self._patch_list("responses", lambda cls: [cls.DeletableTopicResult(
                name=n, error_code=_TOPIC_DENIED) for n in denied_names], denied_names)
        by_id = self.broker.logs.topics_by_id

        def name_of(t: Any) -> Optional[str]:
            if t.name is not None:
                return str(t.name)
            topic = by_id.get(t.topic_id)
            return None if topic is None else topic.name
        body.topics, denied = self._strip(
            list(body.topics), lambda t: name_of(t) is None or self.ok(s, DELETE, TOPIC, name_of(t)))
        if not denied:
            return None
        return self._patch_list("responses", lambda cls: [cls.DeletableTopicResult(
            name=t.name, topic_id=t.topic_id, error_code=_TOPIC_DENIED) for t in denied], denied)

    def _create_partitions(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.topics, denied = self._strip(list(body.topics), lambda t: self.ok(s, ALTER, TOPIC, t.name))
        if not denied:
            return None
        return self._patch_list("results", lambda cls: [cls.CreatePartitionsTopicResult(
            name=t.name, error_code=_TOPIC_DENIED, error_message=None) for t in denied], denied)

    def _delete_records(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.topics, denied = self._strip(list(body.topics), lambda t: self.ok(s, DELETE, TOPIC, t.name))
        if not denied:
            return None
        return self._patch_list("topics", lambda cls: [cls.DeleteRecordsTopicResult(
            name=t.name, partitions=[cls.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1, error_code=_TOPIC_DENIED)
                for p in t.partitions]) for t in denied], denied)

    def _configs(self, op: int, field: str) -> Rule:
        def rule(ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
            def code(r: Any) -> int:
                if r.resource_type == _CONFIG_TOPIC:
                    return 0 if self.ok(s, op, TOPIC, r.resource_name) else _TOPIC_DENIED
                if r.resource_type in (_CONFIG_BROKER, _CONFIG_BROKER_LOGGER):
                    return 0 if self._cluster(s, op) else _CLUSTER_DENIED
                return 0
            body.resources, denied = self._strip(list(body.resources), lambda r: code(r) == 0)
            if not denied:
                return None

            def make(cls: Any) -> list[Any]:
                entry = cls.DescribeConfigsResult if field == "results" else cls.AlterConfigsResourceResponse
                out = [entry(error_code=code(r), error_message=None, resource_type=r.resource_type,
                             resource_name=r.resource_name) for r in denied]
                if field == "results":
                    for e in out:
                        e.configs = []
                return out
            return self._patch_list(field, make, denied)
        return rule

    def _describe_log_dirs(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if self._cluster(s, DESCRIBE):
            return None
        cls = response_codec(ApiKey.DESCRIBE_LOG_DIRS).cls
        resp = cls(results=[])
        if ver >= 3:
            resp.error_code = _CLUSTER_DENIED
        return Verdict(response=resp)

    # -------------------------------------------------------------- groups
    def _find_coordinator(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        key_type = body.key_type if ver >= 1 else 0
        if key_type == 0:
            rtype, code = GROUP, _GROUP_DENIED
        elif key_type == 1:
            rtype, code = TRANSACTIONAL_ID, _TXN_DENIED
        else:
            return None
        if ver < 4:
            return None if self.ok(s, DESCRIBE, rtype, body.key) else Verdict(error=code)
        body.coordinator_keys, denied = self._strip(list(body.coordinator_keys),
                                                    lambda k: self.ok(s, DESCRIBE, rtype, k))
        if not denied:
            return None
        return self._patch_list("coordinators", lambda cls: [cls.Coordinator(
            key=k, node_id=-1, host="", port=-1, error_code=code,
            error_message=ErrorCode(code).message) for k in denied], denied)

    def _group(self, op: int) -> Rule:
        def rule(ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
            return None if self.ok(s, op, GROUP, body.group_id) else Verdict(error=_GROUP_DENIED)
        return rule

    def _consumer_heartbeat(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if not self.ok(s, READ, GROUP, body.group_id):
            return Verdict(error=_GROUP_DENIED)
        if any(not self.ok(s, DESCRIBE, TOPIC, n) for n in body.subscribed_topic_names or ()):
            return Verdict(error=_TOPIC_DENIED)
        return None

    def _offset_topics(self, body: Any, s: ConnectionAuth, field: str, by_id: bool = False) -> Optional[Verdict]:
        """OffsetCommit/TxnOffsetCommit: READ on each topic, per partition otherwise. ``by_id``:
        the topics are named by id, an unknown one (no name) is answered UNKNOWN_TOPIC_ID
        before any authorisation, as Kafka does."""
        body.topics, denied = self._strip(list(body.topics), lambda t: (by_id and not t.name)
                                          or self.ok(s, READ, TOPIC, t.name))
        if not denied:
            return None

        def make(cls: Any) -> list[Any]:
            if field == "OffsetCommit":
                return [cls.OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
                    cls.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=_TOPIC_DENIED)
                    for p in t.partitions]) for t in denied]
            return [cls.TxnOffsetCommitResponseTopic(name=t.name, partitions=[
                cls.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=_TOPIC_DENIED)
                for p in t.partitions]) for t in denied]
        return self._patch_list("topics", make, denied)

    def _offset_commit(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if not self.ok(s, READ, GROUP, body.group_id):
            return Verdict(error=_GROUP_DENIED)
        return self._offset_topics(body, s, "OffsetCommit", by_id=ver >= 10)

    def _txn_offset_commit(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if not self.ok(s, WRITE, TRANSACTIONAL_ID, body.transactional_id):
            return Verdict(error=_TXN_DENIED)
        if not self.ok(s, READ, GROUP, body.group_id):
            return Verdict(error=_GROUP_DENIED)
        return self._offset_topics(body, s, "TxnOffsetCommit")

    def _offset_fetch(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        # v10 names topics by id: an unknown one (no name) is answered UNKNOWN_TOPIC_ID, not denied
        described = lambda t: (ver >= 10 and not t.name) or self.ok(s, DESCRIBE, TOPIC, t.name)  # noqa: E731
        if ver < 8:
            if not self.ok(s, DESCRIBE, GROUP, body.group_id):
                return Verdict(error=_GROUP_DENIED)
            if body.topics is None:
                def only_described(resp: Any) -> Any:
                    resp.topics = [t for t in resp.topics if described(t)]
                    return resp
                return Verdict(patch=only_described)
            body.topics, denied = self._strip(list(body.topics), described)
            if not denied:
                return None
            return self._patch_list("topics", lambda cls: [cls.OffsetFetchResponseTopic(
                name=t.name, partitions=[cls.OffsetFetchResponsePartition(
                    partition_index=p, committed_offset=-1, metadata="", error_code=_TOPIC_DENIED)
                    for p in t.partition_indexes]) for t in denied], denied)
        denied_groups = []
        denied_topics: dict[str, list[Any]] = {}
        all_topics: set[str] = set()
        keep = []
        for g in body.groups:
            if not self.ok(s, DESCRIBE, GROUP, g.group_id):
                denied_groups.append(g.group_id)
                continue
            keep.append(g)
            if g.topics is None:
                all_topics.add(g.group_id)
            else:
                g.topics, denied_topics[g.group_id] = self._strip(list(g.topics), described)
        if not denied_groups and not all_topics and not any(denied_topics.values()):
            return None
        body.groups = keep

        def patch(resp: Any) -> Any:
            cls = type(resp)
            for rg in resp.groups:
                if rg.group_id in all_topics:
                    rg.topics = [t for t in rg.topics if described(t)]
                rg.topics.extend(cls.OffsetFetchResponseTopics(name=t.name, topic_id=t.topic_id, partitions=[
                    cls.OffsetFetchResponsePartitions(partition_index=p, committed_offset=-1,
                                                      metadata="", error_code=_TOPIC_DENIED)
                    for p in t.partition_indexes]) for t in denied_topics.get(rg.group_id, ()))
            resp.groups.extend(cls.OffsetFetchResponseGroup(group_id=g, topics=[], error_code=_GROUP_DENIED)
                               for g in denied_groups)
            return resp
        return Verdict(patch=patch)

    def _offset_delete(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if not self.ok(s, DELETE, GROUP, body.group_id):
            return Verdict(error=_GROUP_DENIED)
        body.topics, denied = self._strip(list(body.topics), lambda t: self.ok(s, READ, TOPIC, t.name))
        if not denied:
            return None
        return self._patch_list("topics", lambda cls: [cls.OffsetDeleteResponseTopic(
            name=t.name, partitions=[cls.OffsetDeleteResponsePartition(
                partition_index=p.partition_index, error_code=_TOPIC_DENIED) for p in t.partitions])
            for t in denied], denied)

    def _describe_groups(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.groups, denied = self._strip(list(body.groups), lambda g: self.ok(s, DESCRIBE, GROUP, g))
        if not denied:
            return None
        return self._patch_list("groups", lambda cls: [cls.DescribedGroup(
            error_code=_GROUP_DENIED, group_id=g, group_state="", protocol_type="", protocol_data="",
            members=[]) for g in denied], denied)

    def _list_groups(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if self._cluster(s, DESCRIBE):
            return None

        def only_described(resp: Any) -> Any:
            resp.groups = [g for g in resp.groups if self.ok(s, DESCRIBE, GROUP, g.group_id)]
            return resp
        return Verdict(patch=only_described)

    def _delete_groups(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.groups_names, denied = self._strip(list(body.groups_names), lambda g: self.ok(s, DELETE, GROUP, g))
        if not denied:
            return None
        return self._patch_list("results", lambda cls: [cls.DeletableGroupResult(
            group_id=g, error_code=_GROUP_DENIED) for g in denied], denied)

    def _consumer_group_describe(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.group_ids, denied = self._strip(list(body.group_ids), lambda g: self.ok(s, DESCRIBE, GROUP, g))
        if not denied:
            return None
        return self._patch_list("groups", lambda cls: [cls.DescribedGroup(
            error_code=_GROUP_DENIED, group_id=g, group_state="", assignor_name="", members=[])
            for g in denied], denied)

    def _share_fetch(self, api_key: int) -> Rule:
        """ShareFetch/ShareAcknowledge: the group's READ (else the whole request), each topic's
        READ (else its partitions answered TOPIC_AUTHORIZATION_FAILED)."""
        def rule(ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
            if not self.ok(s, READ, GROUP, body.group_id):
                return Verdict(error=_GROUP_DENIED)
            by_id = self.broker.logs.topics_by_id

            def allowed(t: Any) -> bool:
                topic = by_id.get(t.topic_id)
                return topic is None or self.ok(s, READ, TOPIC, topic.name)
            body.topics, denied = self._strip(list(body.topics), allowed)
            if not denied:
                return None
            fetch = api_key == ApiKey.SHARE_FETCH
            field = "responses"

            def make(cls: Any) -> list[Any]:
                topic_cls = cls.ShareFetchableTopicResponse if fetch else cls.ShareAcknowledgeTopicResponse
                return [topic_cls(topic_id=t.topic_id, partitions=[cls.PartitionData(
                    partition_index=p.partition_index, error_code=_TOPIC_DENIED,
                    **({"records": b"", "acquired_records": []} if fetch else {}))
                    for p in t.partitions]) for t in denied]
            return self._patch_list(field, make, denied)
        return rule

    def _describe_share_group_offsets(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.groups, denied = self._strip(list(body.groups), lambda g: self.ok(s, DESCRIBE, GROUP, g.group_id))
        if not denied:
            return None
        return self._patch_list("groups", lambda cls: [cls.DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, topics=[], error_code=_GROUP_DENIED) for g in denied], denied)

    # -------------------------------------------------------------- transactions
    def _init_producer_id(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if body.transactional_id is not None:
            ok = self.ok(s, WRITE, TRANSACTIONAL_ID, body.transactional_id)
            return None if ok else Verdict(error=_TXN_DENIED)
        if self._cluster(s, IDEMPOTENT_WRITE) or self.authorizer.authorize_any(s.principal, s.host, WRITE, TOPIC):
            return None
        return Verdict(error=_CLUSTER_DENIED)

    def _add_partitions_to_txn(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if ver >= 4:
            return None if self._cluster(s, CLUSTER_ACTION) else Verdict(error=_CLUSTER_DENIED)
        if not self.ok(s, WRITE, TRANSACTIONAL_ID, body.v3_and_below_transactional_id):
            return Verdict(error=_TXN_DENIED)
        topics = list(body.v3_and_below_topics)
        denied = {t.name for t in topics if not self.ok(s, WRITE, TOPIC, t.name)}
        if not denied:
            return None
        cls = response_codec(ApiKey.ADD_PARTITIONS_TO_TXN).cls
        return Verdict(response=cls(results_by_topic_v3_and_below=[cls.AddPartitionsToTxnTopicResult(
            name=t.name, results_by_partition=[cls.AddPartitionsToTxnPartitionResult(
                partition_index=p, partition_error_code=_TOPIC_DENIED if t.name in denied
                else ErrorCode.OPERATION_NOT_ATTEMPTED) for p in t.partitions]) for t in topics]))

    def _add_offsets_to_txn(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if not self.ok(s, WRITE, TRANSACTIONAL_ID, body.transactional_id):
            return Verdict(error=_TXN_DENIED)
        return None if self.ok(s, READ, GROUP, body.group_id) else Verdict(error=_GROUP_DENIED)

    def _end_txn(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        return None if self.ok(s, WRITE, TRANSACTIONAL_ID, body.transactional_id) else Verdict(error=_TXN_DENIED)

    def _describe_transactions(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        # Kafka: DESCRIBE on each transactional id, and only the topics the caller may describe
        body.transactional_ids, denied = self._strip(
            list(body.transactional_ids), lambda t: self.ok(s, DESCRIBE, TRANSACTIONAL_ID, t))

        def patch(resp: Any) -> Any:
            cls = type(resp)
            for st in resp.transaction_states:
                st.topics = [t for t in st.topics if self.ok(s, DESCRIBE, TOPIC, t.topic)]
            resp.transaction_states.extend(cls.TransactionState(
                error_code=_TXN_DENIED, transactional_id=t, transaction_state="", producer_id=-1,
                producer_epoch=-1) for t in denied)
            return resp
        return Verdict(patch=patch)

    def _list_transactions(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        def only_described(resp: Any) -> Any:
            resp.transaction_states = [t for t in resp.transaction_states
                                       if self.ok(s, DESCRIBE, TRANSACTIONAL_ID, t.transactional_id)]
            return resp
        return Verdict(patch=only_described)

    def _describe_producers(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        body.topics, denied = self._strip(list(body.topics), lambda t: self.ok(s, READ, TOPIC, t.name))
        if not denied:
            return None
        return self._patch_list("topics", lambda cls: [cls.TopicResponse(name=t.name, partitions=[
            cls.PartitionResponse(partition_index=p, error_code=_TOPIC_DENIED)
            for p in t.partition_indexes]) for t in denied], denied)

    # -------------------------------------------------------------- ACLs and credentials
    def _cluster_top_level(self, op: int) -> Rule:
        def rule(ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
            return None if self._cluster(s, op) else Verdict(error=_CLUSTER_DENIED)
        return rule

    def _create_acls(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if self._cluster(s, ALTER):
            return None
        cls = response_codec(ApiKey.CREATE_ACLS).cls
        return Verdict(response=cls(results=[cls.AclCreationResult(
            error_code=_CLUSTER_DENIED, error_message=ErrorCode(_CLUSTER_DENIED).message)
            for _ in body.creations]))

    def _delete_acls(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if self._cluster(s, ALTER):
            return None
        cls = response_codec(ApiKey.DELETE_ACLS).cls
        return Verdict(response=cls(filter_results=[cls.DeleteAclsFilterResult(
            error_code=_CLUSTER_DENIED, error_message=ErrorCode(_CLUSTER_DENIED).message, matching_acls=[])
            for _ in body.filters]))

    def _alter_scram(self, ver: int, body: Any, s: ConnectionAuth) -> Optional[Verdict]:
        if self._cluster(s, ALTER):
            return None
        cls = response_codec(ApiKey.ALTER_USER_SCRAM_CREDENTIALS).cls
        names = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
        return Verdict(response=cls(results=[cls.AlterUserScramCredentialsResult(
            user=n, error_code=_CLUSTER_DENIED, error_message=None) for n in names]))
