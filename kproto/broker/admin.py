"""Admin APIs of the broker: CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, DescribeCluster, DescribeLogDirs, DeleteRecords, DescribeProducers,
ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments, DescribeTopicPartitions and
ListConfigResources, answered as a single-node KRaft broker (which is also its own controller)
answers them."""
from __future__ import annotations

import os
import shutil
from typing import Any, Callable, Optional

from kproto.broker.context import BrokerContext
from kproto.broker.retention import RetentionManager
from kproto.broker.configs import TOPIC_CONFIGS, ConfigEntry
from kproto.broker.group_configs import GROUP_RESOURCE
from kproto.broker.log import BrokerError, Log, Topic, topic_name_error
from kproto.broker.quotas import MutationQuota
from kproto.codecs import response as response_codec
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey
from kproto.storage.layout import partition_dir_name


__all__ = ["AdminHandlers", "ADMIN_VERSIONS", "admin_error_response", "ELECTION_NOT_NEEDED_MESSAGE",
           "elect_leaders_error", "describe_topic_partitions_error",
           "validate_manual_assignment"]

#: API key -> (lowest, highest version) the handlers here implement
ADMIN_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),
}

#: Kafka's text of ELECTION_NOT_NEEDED in an ElectLeaders answer
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
_PREFERRED, _UNCLEAN = 0, 1  # ElectLeaders election types
#: ConfigResource types ListConfigResources lists, in the order Kafka answers them; v0 (the
#: former ListClientMetricsResources) lists client-metrics subscriptions only
_GROUP, _CLIENT_METRICS, _BROKER_LOGGER = 32, 16, 8
_LISTED_TYPES = (_GROUP, _CLIENT_METRICS, _BROKER_LOGGER, 4, 2)
#: Kafka's AclOperation bits a topic supports (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE,
#: DESCRIBE_CONFIGS, ALTER_CONFIGS): without an authorizer every one is allowed
_TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
#: max.request.partition.size.limit: the most partitions one DescribeTopicPartitions answers
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


def validate_manual_assignment(replicas: list[int], registered: Any) -> None:
    """Kafka's ``validateManualPartitionAssignment``: a non-empty list of registered brokers,
    each once (checked in broker id order, so an unknown broker is named before a repeat)."""
    if not replicas:
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          "The manual partition assignment includes an empty replica list.")
    prev = None
    for broker in sorted(replicas):
        if broker not in registered:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"The manual partition assignment includes broker {broker}, but no "
                              "such broker is registered.")
        if broker == prev:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"The manual partition assignment includes the broker {prev} more "
                              "than once.")
        prev = broker

TOPIC, BROKER = 2, 4  # ConfigResource types
_SET, _DELETE, _APPEND, _SUBTRACT = 0, 1, 2, 3
#: Kafka's AclOperation bits a cluster resource supports (ALTER, ALTER_CONFIGS, CLUSTER_ACTION,
#: CREATE, DESCRIBE, DESCRIBE_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS):
#: without an authorizer every one is allowed
_CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12, 13, 14))
_INT32_MIN = -2**31

Respond = Callable[[Any], None]


class AdminHandlers:
    """The handlers, bound to the broker (and its retention manager, which moves log start
    offsets for DeleteRecords)."""

    def __init__(self, core: BrokerContext, retention: RetentionManager) -> None:
        self.core = core
        self.retention = retention

    # ------------------------------------------------------------------ CreatePartitions
    def create_partitions(self, body: Any, version: int, respond: Respond,
                          quota: Optional[MutationQuota] = None) -> None:
        """``quota``: the request's controller mutation quota (each topic's new partitions
        are counted against it)."""
        cls = response_codec(ApiKey.CREATE_PARTITIONS).cls
        names = [t.name for t in body.topics]
        results = []
        for t in body.topics:
            res = cls.CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None)
            results.append(res)
            if names.count(t.name) > 1:
                res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic in request."
                continue
            try:
                self._add_partitions(t, body.validate_only, quota)
            except BrokerError as exc:
                res.error_code, res.error_message = exc.code, exc.message
        respond(cls(results=results))

    def _add_partitions(self, t: Any, validate_only: bool, quota: Optional[MutationQuota] = None) -> None:
        core = self.core
        topic = core.logs.topics.get(t.name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # Kafka: no message
        have = len(topic.partitions)
        if t.count < have:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"The topic {t.name} currently has {have} partition(s); {t.count} would "
                              "not be an increase.")
        if t.count == have:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {have} partition(s).")
        if t.count - have > core.config.max_partitions_per_request:
            raise BrokerError(ErrorCode.POLICY_VIOLATION,
                              f"Unable to add {t.count - have} partitions in one operation: the "
                              f"limit is {core.config.max_partitions_per_request}")
        if t.assignments is not None:
            if len(t.assignments) != t.count - have:
                raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                  f"Attempted to add {t.count - have} additional partition(s), but only "
                                  f"{len(t.assignments)} assignment(s) were specified.")
        if quota is not None and not quota.record(t.count - have):  # Kafka's controller: here
            raise BrokerError(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        if t.assignments is not None:
            for a in t.assignments:
                if list(a.broker_ids) != [core.config.node_id]:
                    raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                      f"The manual partition assignment includes broker(s) "
                                      f"{list(a.broker_ids)}, but only broker {core.config.node_id} "
                                      "is registered.")
        if validate_only:
            return
        cfg = topic.logs[0].config if topic.logs else core.logs.defaults
        for p in range(have, t.count):
            path = os.path.join(core.logs.data_dir, partition_dir_name(topic.name, p))
            topic.partitions.append(Log(path, topic.name, p, topic.topic_id, cfg))
        core.logs.topic_changed(topic.name)

    # ------------------------------------------------------------------ DescribeConfigs
    def describe_configs(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DESCRIBE_CONFIGS).cls
        synonyms = version >= 1 and body.include_synonyms
        docs = version >= 3 and body.include_documentation
        results = []
        for r in body.resources:
            # Kafka answers an empty message, not null, for a resource described without error (v1+)
            res = cls.DescribeConfigsResult(error_code=0, error_message="" if version >= 1 else None,
                                            resource_type=r.resource_type,
                                            resource_name=r.resource_name, configs=[])
            results.append(res)
            try:
                entries = self._entries(r.resource_type, r.resource_name)
            except BrokerError as exc:
                res.error_code = exc.code
                # an unknown topic comes without text from Kafka (the field's default, '')
                if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or version < 1:
                    res.error_message = exc.message
                continue
            keys = None if r.configuration_keys is None else set(r.configuration_keys)
            res.configs = [self._entry(cls, e, version, synonyms, docs)
                           for e in entries if keys is None or e.name in keys]
        respond(cls(results=results))

    @staticmethod
    def _entry(cls: Any, e: ConfigEntry, version: int, synonyms: bool, docs: bool) -> Any:
        out = cls.DescribeConfigsResourceResult(name=e.name, value=e.value, read_only=e.read_only,
                                                is_sensitive=e.sensitive)
        if version == 0:
            out.is_default = e.source == 5
            return out
        out.config_source = e.source
        if synonyms:
            out.synonyms = [cls.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in e.synonyms]
        if version >= 3:
            out.config_type = e.type
            out.documentation = e.doc if docs else None
        return out

    def _topic(self, name: str) -> Topic:
        why = topic_name_error(name)
        if why is not None:
            raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, why)
        topic = self.core.logs.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                              f"The topic '{name}' does not exist.")
        return topic

    def _broker_name(self, name: str) -> str:
        if name == "":
            return name
        if not name.lstrip("-").isdigit():
            raise BrokerError(ErrorCode.INVALID_REQUEST,
                              f"Broker id must be an integer, but it is: {name}")
        if int(name) != self.core.config.node_id:
            raise BrokerError(ErrorCode.INVALID_REQUEST,
                              f"Unexpected broker id, expected {self.core.config.node_id} or empty "
                              f"string, but received {name}")
        return str(int(name))

    def _entries(self, rtype: int, name: str) -> list[ConfigEntry]:
        configs = self.core.configs
        if rtype == TOPIC:
            return configs.describe_topic(self._topic(name))
        if rtype == BROKER:
            return configs.broker_entries(self._broker_name(name))
        if rtype == GROUP_RESOURCE:
            if not name:
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
            return self.core.group_configs.entries(name)
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {rtype}")

    # ------------------------------------------------------------------ AlterConfigs
    def alter_configs(self, body: Any, version: int, respond: Respond) -> None:
        """The legacy AlterConfigs: each resource's dynamic configs are replaced whole."""
        cls = response_codec(ApiKey.ALTER_CONFIGS).cls
        self._alter(cls, body, lambda current, r: {c.name: c.value for c in r.configs}, respond, incremental=False)

    def incremental_alter_configs(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.INCREMENTAL_ALTER_CONFIGS).cls
        self._alter(cls, body, self.incremental_change, respond)

    def incremental_change(self, current: dict[str, str], r: Any) -> dict[str, Optional[str]]:
        """The configs ``current`` becomes with IncrementalAlterConfigs resource ``r``'s
        operations (None: a config deleted)."""
        out: dict[str, Optional[str]] = dict(current)
        names = [c.name for c in r.configs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise BrokerError(ErrorCode.INVALID_REQUEST,
                              f"Error due to duplicate config keys: {', '.join(dupes)}")
        for c in r.configs:
            op = c.config_operation
            if op == _SET:
                out[c.name] = c.value
            elif op == _DELETE:
                out.pop(c.name, None)
            elif op in (_APPEND, _SUBTRACT):
                d = TOPIC_CONFIGS.get(c.name) if r.resource_type == TOPIC else None
                if d is None or d.type != 7:
                    raise BrokerError(ErrorCode.INVALID_CONFIG, f"Config value append is not allowed "
                                      f"for config key: {c.name}" if op == _APPEND else
                                      f"Config value subtract is not allowed for config key: {c.name}")
                now = out.get(c.name)
                if now is None:
                    now = self.core.configs.broker_value(d)[0] or ""
                items = [s for s in now.split(",") if s]
                given = [s.strip() for s in (c.value or "").split(",") if s.strip()]
                if op == _APPEND:
                    items += [s for s in given if s not in items]
                else:
                    items = [s for s in items if s not in given]
                out[c.name] = ",".join(items)
            else:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"Unknown alter config operation {op}")
        return out

    def _alter(self, cls: Any, body: Any, change: Callable[[dict[str, str], Any], dict[str, Optional[str]]],
               respond: Respond, incremental: bool = True) -> None:
        configs = self.core.configs
        keys = [(r.resource_type, r.resource_name) for r in body.resources]
        results = []
        for r in body.resources:
            res = cls.AlterConfigsResourceResponse(error_code=0, error_message=None,
                                                   resource_type=r.resource_type, resource_name=r.resource_name)
            results.append(res)
            try:
                if keys.count((r.resource_type, r.resource_name)) > 1:
                    raise BrokerError(ErrorCode.INVALID_REQUEST,
                                      f"Error due to duplicate resource {r.resource_name} in the request")
                if r.resource_type == TOPIC:
                    topic = self._topic(r.resource_name)
                    wanted = configs.validate_topic(change(dict(topic.configs), r))
                    if not body.validate_only:
                        configs.set_topic(topic, wanted)
                elif r.resource_type == BROKER:
                    name = self._broker_name(r.resource_name)
                    bwanted = configs.validate_broker(change(dict(configs.broker_dynamic[name]), r))
                    configs.check_reconfiguration(name, bwanted)
                    if not body.validate_only:
                        configs.set_broker(name, bwanted)
                elif r.resource_type == GROUP_RESOURCE and incremental:  # (not by the legacy API)
                    groups = self.core.group_configs
                    gwanted = groups.validate(r.resource_name, change(groups.current(r.resource_name), r))
                    if not body.validate_only:
                        groups.set(r.resource_name, gwanted)
                else:
                    raise BrokerError(ErrorCode.INVALID_REQUEST,
                                      f"Unsupported resource type: {r.resource_type}")
            except BrokerError as exc:
                res.error_code, res.error_message = exc.code, exc.message
        respond(cls(responses=results))

    # ------------------------------------------------------------------ DescribeCluster
    def describe_cluster(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DESCRIBE_CLUSTER).cls
        cfg = self.core.config
        endpoint = body.endpoint_type if version >= 1 else 1
        out = cls(error_code=0, error_message=None, cluster_id=self.core.logs.cluster_id,
                  controller_id=cfg.node_id, brokers=[cls.DescribeClusterBroker(
                      broker_id=cfg.node_id, host=cfg.host, port=cfg.port, rack=cfg.rack)],
                  cluster_authorized_operations=(_CLUSTER_OPERATIONS
                                                 if body.include_cluster_authorized_operations
                                                 else _INT32_MIN))
        if version >= 1:
            out.endpoint_type = endpoint
        if endpoint != 1:
            # a broker answers for brokers only; controllers are asked directly (KIP-919)
            out = cls(error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                      error_message="The request was sent to an endpoint of type BROKER, but we "
                      f"wanted an endpoint of type {'CONTROLLER' if endpoint == 2 else endpoint}",
                      cluster_id="", controller_id=-1, brokers=[], endpoint_type=endpoint)
        respond(out)

    # ------------------------------------------------------------------ DescribeLogDirs
    def describe_log_dirs(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DESCRIBE_LOG_DIRS).cls
        logs = self.core.logs
        if body.topics is None:
            wanted = [(t, [lg.partition for lg in t.logs]) for t in sorted(logs.topics.values(),
                                                                           key=lambda t: t.name)]
        else:
            wanted = [(logs.topics[t.topic], [p for p in t.partitions
                                              if logs.get(t.topic, p) is not None])
                      for t in body.topics if t.topic in logs.topics]
        topics = [cls.DescribeLogDirsTopic(name=t.name, partitions=[cls.DescribeLogDirsPartition(
            partition_index=p, partition_size=sum(s.size for s in _hosted(t, p).segments),
            offset_lag=0, is_future_key=False) for p in ps]) for t, ps in wanted if ps]
        result = cls.DescribeLogDirsResult(error_code=0, log_dir=os.path.abspath(logs.data_dir),
                                           topics=topics)
        if version >= 4:
            usage = shutil.disk_usage(logs.data_dir)
            result.total_bytes, result.usable_bytes = usage.total, usage.free
        out = cls(results=[result])
        if version >= 3:
            out.error_code = 0
        respond(out)

    # ------------------------------------------------------------------ DeleteRecords
    def delete_records(self, body: Any, version: int, respond: Respond) -> None:
        cls = response_codec(ApiKey.DELETE_RECORDS).cls
        topics = []
        for t in body.topics:
            parts = []
            topic = self.core.logs.topics.get(t.name)
            for p in t.partitions:
                res = cls.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                       low_watermark=-1, error_code=0)
                parts.append(res)
                lg = self.core.logs.get(t.name, p.partition_index)
                if topic is None or lg is None:
                    res.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                try:
                    res.low_watermark = self.retention.delete_records(topic, lg, p.offset)
                except BrokerError as exc:
                    res.error_code = exc.code
            topics.append(cls.DeleteRecordsTopicResult(name=t.name, partitions=parts))
        respond(cls(topics=topics))

    # ------------------------------------------------------------------ DescribeProducers
    def describe_producers(self, body: Any, version: int, respond: Respond) -> None:
        """The producers a partition's leader keeps state for (``kafka-transactions.sh
        describe-producers``): epoch, last sequence and timestamp, open transaction's start."""
        cls = response_codec(ApiKey.DESCRIBE_PRODUCERS).cls
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partition_indexes:
                res = cls.PartitionResponse(partition_index=p, error_code=0, error_message=None)
                parts.append(res)
                lg = self.core.logs.get(t.name, p)
                if lg is None:
                    res.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                for pid, epoch, last_seq, last_ts, txn_start in lg.producer_states():
                    res.active_producers.append(cls.ProducerState(
                        producer_id=pid, producer_epoch=epoch, last_sequence=last_seq, last_timestamp=last_ts,
                        coordinator_epoch=-1, current_txn_start_offset=txn_start))
            topics.append(cls.TopicResponse(name=t.name, partitions=parts))
        respond(cls(throttle_time_ms=0, topics=topics))


    # ------------------------------------------------------------------ ElectLeaders
    def elect_leaders(self, body: Any, version: int, respond: Respond) -> None:
        """A single broker's partitions are led by their only replica, which is also the
        preferred one: every partition asked answers ELECTION_NOT_NEEDED, PREFERRED and UNCLEAN
        alike, as Kafka's controller answers; electing every partition (null topics) answers
        each topic with no partition (those needing no election are left out)."""
        cls = response_codec(ApiKey.ELECT_LEADERS).cls
        kind = body.election_type if version >= 1 else _PREFERRED
        out = cls(replica_election_results=[])
        if kind not in (_PREFERRED, _UNCLEAN):
            # Kafka's controller refuses the whole request (an InvalidRequestException)
            respond(elect_leaders_error(cls, version, body, ErrorCode.INVALID_REQUEST,
                                        f"Unknown election type {kind}"))
            return
        known = self.core.known_topics()
        if body.topic_partitions is None:
            out.replica_election_results = [cls.ReplicaElectionResult(topic=t, partition_result=[])
                                            for t in sorted(known)]
        for tp in body.topic_partitions or ():
            parts = []
            for i in tp.partitions:
                res = cls.PartitionResult(partition_id=i, error_code=ErrorCode.ELECTION_NOT_NEEDED,
                                          error_message=ELECTION_NOT_NEEDED_MESSAGE)
                if tp.topic not in known:
                    res.error_code, res.error_message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                         f"No such topic as {tp.topic}")
                elif not 0 <= i < known[tp.topic][1]:
                    res.error_code, res.error_message = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                         f"No such partition as {tp.topic}-{i}")
                parts.append(res)
            out.replica_election_results.append(cls.ReplicaElectionResult(topic=tp.topic, partition_result=parts))
        if version >= 1:
            out.error_code = 0
        respond(out)

    # ------------------------------------------------------------------ partition reassignments
    def alter_partition_reassignments(self, body: Any, version: int, respond: Respond) -> None:
        """As Kafka's controller with one registered broker: the only valid target is that
        broker (nothing to move, answered without error); any other broker is unknown; a
        cancellation finds no reassignment in progress."""
        cls = response_codec(ApiKey.ALTER_PARTITION_REASSIGNMENTS).cls
        known = self.core.known_topics()
        registered = set(self.core.broker_ids(alive=False))
        topics = []
        for t in body.topics:
            parts = []
            for rp in t.partitions:
                res = cls.ReassignablePartitionResponse(partition_index=rp.partition_index, error_code=0,
                                                        error_message=None)
                parts.append(res)
                try:
                    if t.name not in known:
                        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                          f"Unable to find a topic named {t.name}.")
                    if not 0 <= rp.partition_index < known[t.name][1]:
                        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                          f"Unable to find partition {t.name}:{rp.partition_index}.")
                    if rp.replicas is None:
                        raise BrokerError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)  # Kafka: no message
                    # a valid target is [this broker], the replication factor unchanged
                    validate_manual_assignment(list(rp.replicas), registered)
                except BrokerError as exc:
                    res.error_code, res.error_message = exc.code, exc.message
            topics.append(cls.ReassignableTopicResponse(name=t.name, partitions=parts))
        out = cls(error_code=0, error_message=None, responses=topics)
        if version >= 1:
            out.allow_replication_factor_change = body.allow_replication_factor_change
        respond(out)

    def list_partition_reassignments(self, body: Any, version: int, respond: Respond) -> None:
        """No partition of a single broker is ever being reassigned: an empty list, whatever
        is asked (unknown topics and partitions are left out, as Kafka's controller does)."""
        cls = response_codec(ApiKey.LIST_PARTITION_REASSIGNMENTS).cls
        respond(cls(error_code=0, error_message=None, topics=[]))

    # ------------------------------------------------------------------ DescribeTopicPartitions
    def describe_topic_partitions(self, body: Any, version: int, respond: Respond,
                                  describable: Optional[Callable[[str], bool]] = None) -> None:
        """KIP-966's paged topic description, as Kafka's ``DescribeTopicPartitionsRequestHandler``:
        topics in name order from the cursor on, at most ``response_partition_limit``
        partitions (within 1 and max.request.partition.size.limit); where the answer stops,
        ``next_cursor`` says where to go on. Asking for no topic describes every topic (and
        reports no unknown one). ``describable``: whether the client may describe a topic (an
        authorizer's DESCRIBE); the others asked by name answer TOPIC_AUTHORIZATION_FAILED after
        the page, left out when every topic is asked for."""
        cls = response_codec(ApiKey.DESCRIBE_TOPIC_PARTITIONS).cls
        known = self.core.known_topics()
        every = not body.topics
        cursor = body.cursor
        after = cursor.topic_name if cursor is not None else ""
        names = {n for n in (known if every else (t.name for t in body.topics)) if n >= after}
        if not every and cursor is not None and cursor.topic_name not in names:
            respond(describe_topic_partitions_error(cls, body, ErrorCode.INVALID_REQUEST))
            return
        if cursor is not None and cursor.partition_index < 0:
            respond(describe_topic_partitions_error(cls, body, ErrorCode.INVALID_REQUEST))
            return
        denied = sorted(n for n in names if describable is not None and not describable(n))
        remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, body.response_partition_limit), 1)
        alive = set(self.core.broker_ids(alive=True))
        out = cls(topics=[], next_cursor=None)
        for name in sorted(names.difference(denied)):
            if remaining == 0:
                # the previous topic ended exactly at the limit: go on from this one
                out.next_cursor = cls.Cursor(topic_name=name, partition_index=0)
                break
            states = self.core.partition_states(name)
            if states is None:
                if not every:
                    code = (ErrorCode.INVALID_TOPIC_EXCEPTION if topic_name_error(name) is not None
                            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                    out.topics.append(cls.DescribeTopicPartitionsResponseTopic(
                        error_code=code, name=name, is_internal=name in _INTERNAL_TOPICS, partitions=[],
                        topic_authorized_operations=_TOPIC_OPERATIONS))
                continue
            start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            upper = min(len(states), start + remaining)
            parts = [cls.DescribeTopicPartitionsResponsePartition(
                error_code=0, partition_index=p.partition,
                leader_id=p.leader if p.leader in alive else -1, leader_epoch=p.leader_epoch,
                replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
                eligible_leader_replicas=list(p.elr), last_known_elr=list(p.last_known_elr),
                offline_replicas=[r for r in p.replicas if r not in alive])
                for p in states if start <= p.partition < upper]
            out.topics.append(cls.DescribeTopicPartitionsResponseTopic(
                error_code=0, name=name, topic_id=known[name][0], is_internal=name in _INTERNAL_TOPICS,
                partitions=parts, topic_authorized_operations=_TOPIC_OPERATIONS))
            if upper < len(states):
                out.next_cursor = cls.Cursor(topic_name=name, partition_index=upper)
                break
            remaining -= len(parts)
        if not every:
            # not told whether they exist: no id, no partitions
            out.topics += [cls.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=n, partitions=[]) for n in denied]
        respond(out)

    # ------------------------------------------------------------------ ListConfigResources
    def list_config_resources(self, body: Any, version: int, respond: Respond) -> None:
        """The resources that can have configs, of the types asked (none: every type): groups
        with configs, client-metrics subscriptions (kproto has none), the brokers (as
        BROKER_LOGGER the live ones), the topics. v0 (ListClientMetricsResources) lists
        client-metrics subscriptions only; an unknown type answers UNSUPPORTED_VERSION."""
        cls = response_codec(ApiKey.LIST_CONFIG_RESOURCES).cls
        supported = _LISTED_TYPES if version >= 1 else (_CLIENT_METRICS,)
        types = (list(body.resource_types) if version >= 1 else []) or list(supported)
        if any(t not in supported for t in types):
            respond(cls(throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, config_resources=[]))
            return
        out = []
        for rtype in _LISTED_TYPES:
            if rtype not in types:
                continue
            if rtype == _BROKER_LOGGER or rtype == BROKER:
                names = [str(b) for b in self.core.broker_ids(alive=rtype == _BROKER_LOGGER)]
            elif rtype == TOPIC:
                names = sorted(self.core.known_topics())
            elif rtype == _GROUP:
                names = sorted(self.core.group_configs.groups)
            else:
                names = []
            out += [cls.ConfigResource(resource_name=n, resource_type=rtype) for n in names]
        respond(cls(throttle_time_ms=0, error_code=0, config_resources=out))


def elect_leaders_error(cls: Any, version: int, body: Any, code: int, message: Optional[str]) -> Any:
    """ElectLeaders refused whole (Kafka's ``getErrorResponse``): every partition asked carries
    the error, and from v1 the top level too."""
    out = cls(replica_election_results=[cls.ReplicaElectionResult(topic=tp.topic, partition_result=[
        cls.PartitionResult(partition_id=i, error_code=code, error_message=message) for i in tp.partitions])
        for tp in body.topic_partitions or ()])
    if version >= 1:
        out.error_code = code
    return out


def describe_topic_partitions_error(cls: Any, body: Any, code: int) -> Any:
    """DescribeTopicPartitions refused whole: each topic asked with the error and nothing else."""
    return cls(topics=[cls.DescribeTopicPartitionsResponseTopic(error_code=code, name=t.name, partitions=[])
                       for t in body.topics], next_cursor=None)


def admin_error_response(api_key: int, version: int, body: Any, code: int) -> Optional[Any]:
    """``code`` mirrored over the request's resources/topics (a test hook's error)."""
    cls = response_codec(api_key).cls
    if api_key == ApiKey.CREATE_PARTITIONS:
        return cls(results=[cls.CreatePartitionsTopicResult(name=t.name, error_code=code)
                            for t in body.topics])
    if api_key == ApiKey.DESCRIBE_CONFIGS:
        return cls(results=[cls.DescribeConfigsResult(error_code=code, resource_type=r.resource_type,
                                                      resource_name=r.resource_name, configs=[])
                            for r in body.resources])
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return cls(responses=[cls.AlterConfigsResourceResponse(
            error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in body.resources])
    if api_key == ApiKey.DELETE_RECORDS:
        return cls(topics=[cls.DeleteRecordsTopicResult(name=t.name, partitions=[
            cls.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1,
                                             error_code=code) for p in t.partitions])
            for t in body.topics])
    if api_key == ApiKey.DESCRIBE_PRODUCERS:
        return cls(topics=[cls.TopicResponse(name=t.name, partitions=[
            cls.PartitionResponse(partition_index=p, error_code=code) for p in t.partition_indexes])
            for t in body.topics])
    if api_key == ApiKey.ELECT_LEADERS:
        return elect_leaders_error(cls, version, body, code, None)
    if api_key == ApiKey.DESCRIBE_TOPIC_PARTITIONS:
        return describe_topic_partitions_error(cls, body, code)
    if api_key == ApiKey.DESCRIBE_LOG_DIRS and version < 3:
        return cls(results=[cls.DescribeLogDirsResult(error_code=code, log_dir="", topics=[])])
    return None


def _hosted(topic: Any, partition: int) -> Log:
    """A partition of ``topic`` known to be held here."""
    log = topic.partitions[partition]
    assert log is not None
    return log
