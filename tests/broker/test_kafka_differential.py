"""kproto's broker and Apache Kafka 4.4 given the same requests, their answers compared.

Each scenario is a function of a :class:`~test_kafka_parity.Target` that runs a story in
raw requests (at the versions given, so that per-version error codes are compared too) and
returns a transcript: one (step, answer) pair per request, answers normalized by
:func:`normalize` (topic ids replaced by their order of appearance, error messages, throttle
times, addresses, cluster ids and timestamps left out). The test runs it against both brokers
(fresh topic names each time) and asserts the transcripts are equal, so a difference shows as
the first step whose answers differ. Skipped where Apache Kafka cannot run (no Java or jars).

A scenario is added by writing the story; what Kafka answers needs no writing down."""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable

import pytest

from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode as E
from kproto.records import RecordBatchBuilder
from kproto.schemas.api_keys import ApiKey

from test_kafka_parity import Target, ck, eventually

Transcript = list[tuple[str, Any]]
#: a coordinator still being elected or loading, a transaction still completing
_NOT_YET = (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR,
            E.CONCURRENT_TRANSACTIONS)

#: answer fields that differ between any two brokers or runs: not compared
IGNORED = {"throttle_time_ms", "error_message", "host", "port", "cluster_id", "log_append_time_ms",
           "timestamp", "commit_timestamp", "current_state_timestamp", "node_id", "leader_id",
           "controller_id", "coordinator_epoch", "producer_id", "transaction_start_time_ms"}


def normalize(value: Any, ids: dict[Any, str]) -> Any:
    """A response as plain data, with what must not be compared taken out."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k in IGNORED:
                continue
            if k == "topic_id" or isinstance(v, Uuid):
                out[k] = v if v in (Uuid.ZERO, None) else ids.setdefault(v, f"id{len(ids)}")
            else:
                out[k] = normalize(v, ids)
        return out
    if isinstance(value, (list, tuple)):
        return [normalize(v, ids) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"  # record batches carry the producer's timestamps
    return value


def error_codes(value: Any) -> list[int]:
    """Every ``error_code`` in a response as :meth:`to_dict` gives it."""
    if isinstance(value, dict):
        return [c for k, v in value.items() for c in ([v] if k == "error_code" else error_codes(v))]
    if isinstance(value, list):
        return [c for v in value for c in error_codes(v)]
    return []


class Story:
    """What a scenario uses: its target, fresh names, raw requests recorded in a transcript."""

    def __init__(self, target: Target, suffix: str) -> None:
        self.t = target
        self.suffix = suffix
        self.transcript: Transcript = []
        self._ids: dict[Any, str] = {}

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    def ask(self, step: str, api_key: int, version: int, **fields: Any) -> Any:
        cls = request_codec(api_key).cls
        resp = self.t.request(cls(**fields), version)
        self.transcript.append((step, normalize(resp, self._ids)))
        return resp

    def ask_ready(self, step: str, api_key: int, version: int, arrange: Callable[[Any], Any] = lambda d: d,
                  **fields: Any) -> Any:
        """:meth:`ask`, repeated (unrecorded) while the answer says a coordinator is still
        being elected or loaded or a transaction still completing: how long that lasts is
        each broker's own."""
        cls = request_codec(api_key).cls
        deadline = time.monotonic() + 20
        while True:
            resp = self.t.request(cls(**fields), version)
            if not set(error_codes(resp.to_dict())) & set(_NOT_YET) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.transcript.append((step, arrange(normalize(resp, self._ids))))
        return resp

    def note(self, step: str, value: Any) -> None:
        self.transcript.append((step, normalize(value, self._ids)))

    # setup steps through the admin client (not recorded: the stories are about what follows)
    def create(self, topic: str, partitions: int = 1) -> Uuid:
        self.t.create_topic(topic, partitions)
        tid = self.t.topic_id(topic)
        assert tid is not None
        # Apache Kafka's metadata names a new partition's leader before its replica manager
        # has made the partition a leader: a produce between the two is answered
        # NOT_LEADER_OR_FOLLOWER (seen under load). The stories start once both agree.
        L = request_codec(ApiKey.LIST_OFFSETS).cls
        ask = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=topic, partitions=[
            L.ListOffsetsPartition(partition_index=i, timestamp=-1) for i in range(partitions)])])
        eventually(lambda: not any(p.error_code for t in self.t.request(ask, 7).topics for p in t.partitions),
                   what=f"{topic}'s partitions led")
        return tid

    def delete(self, topic: str) -> None:
        self.t.delete_topic(topic)

    def produce(self, topic: str, values: list[bytes], partition: int = 0) -> None:
        p = ck.Producer({"bootstrap.servers": self.t.bootstrap, "linger.ms": 0})
        for v in values:
            p.produce(topic, value=v, partition=partition)
        assert p.flush(20) == 0

    def commit(self, group: str, topic: str, offset: int) -> None:
        from test_kafka_parity import commit_offset
        commit_offset(self.t, group, topic, offset)


def records(*values: bytes, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
            transactional: bool = False) -> bytes:
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                           transactional=transactional)
    for i, v in enumerate(values):
        b.append(1_700_000_000_000 + i, None, v, [])
    return b.build()


# ---------------------------------------------------------------------------- scenarios
def offset_fetch_of_a_deleted_topic(s: Story) -> None:
    """OffsetFetch, old and new versions, for a topic deleted after a commit."""
    topic, group = s.name("of-del"), s.name("g")
    s.create(topic, 2)
    s.produce(topic, [b"a", b"b"])
    s.commit(group, topic, 2)
    s.delete(topic)
    # Kafka's coordinator deletes the offsets once its broker has the deletion: a moment later
    from test_kafka_parity import committed
    eventually(lambda: committed(s.t, group, topic) < 0, what="the offsets deleted")
    R = request_codec(ApiKey.OFFSET_FETCH).cls
    for v in (1, 5, 7):
        s.ask(f"v{v} named", ApiKey.OFFSET_FETCH, v, group_id=group, topics=[
            R.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])], require_stable=v >= 7)
    s.ask("v8 named", ApiKey.OFFSET_FETCH, 8, require_stable=False, groups=[R.OffsetFetchRequestGroup(
        group_id=group, topics=[R.OffsetFetchRequestTopics(name=topic, partition_indexes=[0, 1])])])
    s.ask("v8 all", ApiKey.OFFSET_FETCH, 8, require_stable=False,
          groups=[R.OffsetFetchRequestGroup(group_id=group, topics=None)])


def list_offsets_of_deleted_and_recreated_topic(s: Story) -> None:
    """ListOffsets at several versions: a deleted topic, then the topic created again."""
    topic = s.name("lo")
    s.create(topic)
    s.produce(topic, [b"x"] * 4)
    L = request_codec(ApiKey.LIST_OFFSETS).cls

    def ask(step: str) -> None:
        for v in (1, 4, 7):
            for ts in (-1, -2):
                s.ask(f"{step} v{v} ts{ts}", ApiKey.LIST_OFFSETS, v, replica_id=-1, isolation_level=0,
                      topics=[L.ListOffsetsTopic(name=topic, partitions=[L.ListOffsetsPartition(
                          partition_index=0, timestamp=ts, current_leader_epoch=-1 if v < 4 else 0)])])
    ask("before")
    s.delete(topic)
    ask("deleted")
    s.create(topic)
    ask("recreated")


def produce_to_missing_topic_and_partition(s: Story) -> None:
    """Produce to a topic that does not exist and to a partition past the topic's last."""
    topic = s.name("pr")
    s.create(topic)
    P = request_codec(ApiKey.PRODUCE).cls
    for v in (3, 7, 9, 11):
        for name, part in ((s.name("nope"), 0), (topic, 5)):
            s.ask(f"v{v} {'missing topic' if part == 0 else 'missing partition'}", ApiKey.PRODUCE, v,
                  transactional_id=None, acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
                      name=name, partition_data=[P.PartitionProduceData(index=part, records=records(b"v"))])])


def delete_topics_errors_per_version(s: Story) -> None:
    """DeleteTopics of a missing name at each version, by a missing id, and of an internal topic."""
    D = request_codec(ApiKey.DELETE_TOPICS).cls
    for v in (1, 4, 5):
        s.ask(f"v{v} missing name", ApiKey.DELETE_TOPICS, v, topic_names=[s.name("nope")], timeout_ms=5000)
    s.ask("v6 missing name", ApiKey.DELETE_TOPICS, 6, timeout_ms=5000,
          topics=[D.DeleteTopicState(name=s.name("nope"), topic_id=Uuid.ZERO)])
    s.ask("v6 missing id", ApiKey.DELETE_TOPICS, 6, timeout_ms=5000,
          topics=[D.DeleteTopicState(name=None, topic_id=Uuid(uuid.uuid4().bytes))])


def metadata_of_a_deleted_topic(s: Story) -> None:
    """Metadata by name and by id for a topic that was deleted."""
    topic = s.name("md")
    tid = s.create(topic)
    s.delete(topic)
    M = request_codec(ApiKey.METADATA).cls
    for v in (4, 9, 12):  # (before v4 a request auto-creates the topic: its timing is Kafka's own)
        s.ask(f"v{v} by name", ApiKey.METADATA, v, allow_auto_topic_creation=False,
              topics=[M.MetadataRequestTopic(name=topic, topic_id=Uuid.ZERO)])
    s.ask("v12 by id", ApiKey.METADATA, 12, allow_auto_topic_creation=False,
          topics=[M.MetadataRequestTopic(name=None, topic_id=tid)])


def metadata_auto_creation(s: Story) -> None:
    """The request that auto-creates a topic is answered before the topic exists (what later
    requests see depends on how fast the controller is: not compared)."""
    M = request_codec(ApiKey.METADATA).cls
    s.ask("v12 auto-creating", ApiKey.METADATA, 12, allow_auto_topic_creation=True,
          topics=[M.MetadataRequestTopic(name=s.name("auto"), topic_id=Uuid.ZERO)])
    s.ask("v12 invalid name", ApiKey.METADATA, 12, allow_auto_topic_creation=True,
          topics=[M.MetadataRequestTopic(name="bad name!", topic_id=Uuid.ZERO)])


def txn_produce(s: Story, step: str, topic: str, partition: int, tid: str, pid: int, epoch: int,
                seq: int, version: int = 9) -> Any:
    P = request_codec(ApiKey.PRODUCE).cls
    return s.ask(step, ApiKey.PRODUCE, version, transactional_id=tid, acks=-1, timeout_ms=5000,
                 topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(
                     index=partition, records=records(b"t", producer_id=pid, producer_epoch=epoch,
                                                      base_sequence=seq, transactional=True))])])


def transaction_fencing_and_a_deleted_topic(s: Story) -> None:
    """A transaction in raw requests: produce to a partition not added, with a newer epoch,
    the topic deleted while the transaction is open, its commit, a fenced EndTxn at each
    version, a fenced InitProducerId."""
    topic, tid = s.name("txn"), s.name("tid")
    s.create(topic, 2)
    s.ask_ready("find coordinator", ApiKey.FIND_COORDINATOR, 3, key=tid, key_type=1)
    init = s.ask_ready("init", ApiKey.INIT_PRODUCER_ID, 4, transactional_id=tid, transaction_timeout_ms=60000,
                       producer_id=-1, producer_epoch=-1)
    pid, epoch = init.producer_id, init.producer_epoch
    A = request_codec(ApiKey.ADD_PARTITIONS_TO_TXN).cls
    s.ask_ready("add p0", ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[0])])
    s.ask_ready("add missing topic", ApiKey.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=tid,
                v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=s.name("nope"), partitions=[0])])
    txn_produce(s, "produce p0", topic, 0, tid, pid, epoch, 0)
    # (at v11 Kafka answers INVALID_TXN_STATE or TRANSACTION_ABORTABLE from one run to the next)
    for v in (3, 9):
        txn_produce(s, f"v{v} produce p1 not added", topic, 1, tid, pid, epoch, 0, v)
    txn_produce(s, "produce newer epoch", topic, 0, tid, pid, epoch + 1, 0)
    s.delete(topic)
    txn_produce(s, "produce after delete", topic, 0, tid, pid, epoch, 1)
    s.ask_ready("commit", ApiKey.END_TXN, 3, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                committed=True)
    again = s.ask_ready("init again", ApiKey.INIT_PRODUCER_ID, 4, transactional_id=tid,
                        transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
    for v in (0, 2, 3, 4):
        s.ask(f"v{v} fenced end", ApiKey.END_TXN, v, transactional_id=tid, producer_id=pid,
              producer_epoch=epoch, committed=False)
    for v in (3, 4):
        s.ask(f"v{v} fenced init", ApiKey.INIT_PRODUCER_ID, v, transactional_id=tid, transaction_timeout_ms=60000,
              producer_id=pid, producer_epoch=again.producer_epoch - 1)
    s.ask("unknown tid end", ApiKey.END_TXN, 3, transactional_id=s.name("other"), producer_id=pid,
          producer_epoch=0, committed=True)


def idempotent_sequences(s: Story) -> None:
    """An idempotent producer's sequence errors: a gap, a duplicate, an unknown producer."""
    topic = s.name("idem")
    s.create(topic)
    init = s.ask_ready("init", ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=60000,
                 producer_id=-1, producer_epoch=-1)
    pid = init.producer_id
    P = request_codec(ApiKey.PRODUCE).cls

    def send(step: str, seq: int, producer: int = pid, epoch: int = 0, version: int = 9) -> None:
        s.ask(step, ApiKey.PRODUCE, version, transactional_id=None, acks=-1, timeout_ms=5000,
              topic_data=[P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(
                  index=0, records=records(b"a", b"b", producer_id=producer, producer_epoch=epoch,
                                           base_sequence=seq))])])
    send("first", 0)
    send("duplicate", 0)
    send("gap", 5)
    send("next", 2)
    send("new epoch not at 0", 3, epoch=1)
    send("older epoch", 4, epoch=0)
    send("v3 gap", 9, version=3)


def topic_admin_errors(s: Story) -> None:
    """CreateTopics, CreatePartitions and DeleteRecords refusals, at several versions."""
    topic = s.name("adm")
    s.create(topic, 2)
    s.produce(topic, [b"a", b"b", b"c"])
    C = request_codec(ApiKey.CREATE_TOPICS).cls

    def create(step: str, version: int, name: str, partitions: int = 1, rf: int = 1,
               configs: dict[str, str] | None = None, validate_only: bool = False) -> None:
        s.ask(step, ApiKey.CREATE_TOPICS, version, timeout_ms=10000, validate_only=validate_only,
              topics=[C.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf,
                                       assignments=[], configs=[C.CreatableTopicConfig(name=k, value=v)
                                                                for k, v in (configs or {}).items()])])
    for v in (2, 5, 7):
        create(f"v{v} exists", v, topic)
        create(f"v{v} zero partitions", v, s.name(f"z{v}"), partitions=0)
        create(f"v{v} rf too high", v, s.name(f"r{v}"), rf=5)
        create(f"v{v} bad config", v, s.name(f"c{v}"), configs={"no.such.config": "1"})
        create(f"v{v} bad config value", v, s.name(f"d{v}"), configs={"retention.ms": "soon"})
        create(f"v{v} invalid name", v, "bad name!")
    P = request_codec(ApiKey.CREATE_PARTITIONS).cls
    for v in (0, 3):
        for step, name, count in (("fewer", topic, 1), ("same", topic, 2), ("missing", s.name("nope"), 3)):
            s.ask(f"v{v} partitions {step}", ApiKey.CREATE_PARTITIONS, v, timeout_ms=10000, validate_only=False,
                  topics=[P.CreatePartitionsTopic(name=name, count=count, assignments=None)])
    D = request_codec(ApiKey.DELETE_RECORDS).cls
    for v in (0, 2):
        for step, part, offset in (("past the end", 0, 99), ("missing partition", 7, 0), ("to hw", 0, -1)):
            s.ask(f"v{v} delete records {step}", ApiKey.DELETE_RECORDS, v, timeout_ms=10000, topics=[
                D.DeleteRecordsTopic(name=topic, partitions=[D.DeleteRecordsPartition(partition_index=part,
                                                                                     offset=offset)])])


def group_offset_errors(s: Story) -> None:
    """OffsetCommit to missing topics and partitions per version, OffsetDelete of them."""
    topic, group = s.name("oc"), s.name("g")
    s.create(topic)
    s.ask_ready("find coordinator", ApiKey.FIND_COORDINATOR, 3, key=group, key_type=0)
    O = request_codec(ApiKey.OFFSET_COMMIT).cls
    for v in (2, 5, 8, 9):
        s.ask_ready(f"v{v} commit", ApiKey.OFFSET_COMMIT, v, group_id=group, generation_id_or_member_epoch=-1,
                    member_id="", topics=[
                        O.OffsetCommitRequestTopic(name=topic, partitions=[
                            O.OffsetCommitRequestPartition(partition_index=0, committed_offset=1),
                            O.OffsetCommitRequestPartition(partition_index=3, committed_offset=1)]),
                        O.OffsetCommitRequestTopic(name=s.name("nope"), partitions=[
                            O.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
    D = request_codec(ApiKey.OFFSET_DELETE).cls
    s.ask_ready("offset delete", ApiKey.OFFSET_DELETE, 0, group_id=group, topics=[
        D.OffsetDeleteRequestTopic(name=topic, partitions=[D.OffsetDeleteRequestPartition(partition_index=0),
                                                           D.OffsetDeleteRequestPartition(partition_index=3)]),
        D.OffsetDeleteRequestTopic(name=s.name("nope"), partitions=[
            D.OffsetDeleteRequestPartition(partition_index=0)])])
    s.ask_ready("offset delete unknown group", ApiKey.OFFSET_DELETE, 0, group_id=s.name("none"), topics=[
        D.OffsetDeleteRequestTopic(name=topic, partitions=[D.OffsetDeleteRequestPartition(partition_index=0)])])


def fetch_and_epochs_of_missing_partitions(s: Story) -> None:
    """Fetch by name (v12) and by id (v13+) and OffsetsForLeaderEpoch for partitions and
    topics that are not there, a deleted topic's id among them."""
    topic = s.name("fe")
    tid = s.create(topic)
    O = request_codec(ApiKey.OFFSET_FOR_LEADER_EPOCH).cls

    def epochs(step: str, v: int) -> None:
        s.ask(step, ApiKey.OFFSET_FOR_LEADER_EPOCH, v, replica_id=-1, topics=[
            O.OffsetForLeaderTopic(topic=topic, partitions=[
                O.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=e)
                for e in (0, 1, 7)])])
    epochs("epochs of an empty log", 4)   # the leader's epoch is known before any record
    s.produce(topic, [b"x"])
    epochs("epochs", 4)
    gone = s.name("gone")
    gone_id = s.create(gone)
    s.delete(gone)
    F = request_codec(ApiKey.FETCH).cls

    def part(i: int) -> Any:
        return F.FetchPartition(partition=i, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                log_start_offset=-1, partition_max_bytes=1024)
    s.ask("v12 by name", ApiKey.FETCH, 12, max_wait_ms=0, min_bytes=0, session_id=0, session_epoch=-1,
          topics=[F.FetchTopic(topic=topic, partitions=[part(0), part(4)]),
                  F.FetchTopic(topic=gone, partitions=[part(0)])])
    # (by id, Kafka answers a missing partition of a known topic in a topic entry of its own
    # after the others: not asked here)
    for v in (13, 16):
        s.ask(f"v{v} by id", ApiKey.FETCH, v, max_wait_ms=0, min_bytes=0, session_id=0, session_epoch=-1,
              topics=[F.FetchTopic(topic_id=tid, partitions=[part(0)]),
                      F.FetchTopic(topic_id=gone_id, partitions=[part(0)])])
    for v in (2, 4):
        s.ask(f"v{v} epochs", ApiKey.OFFSET_FOR_LEADER_EPOCH, v, replica_id=-1, topics=[
            O.OffsetForLeaderTopic(topic=topic, partitions=[
                O.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0),
                O.OffsetForLeaderPartition(partition=4, current_leader_epoch=-1, leader_epoch=0)]),
            O.OffsetForLeaderTopic(topic=gone, partitions=[
                O.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)])])


def group_admin_errors(s: Story) -> None:
    """DescribeGroups, DeleteGroups and DescribeConfigs of what does not exist, per version."""
    group = s.name("g")
    topic = s.name("cfg")
    s.create(topic)
    s.commit(group, topic, 1)
    def by_group(d: Any) -> Any:  # Kafka answers in the order of its coordinator shards
        return {**d, "groups": sorted(d["groups"], key=lambda g: g["group_id"])}
    for v in (0, 3, 5, 6):
        s.ask_ready(f"v{v} describe", ApiKey.DESCRIBE_GROUPS, v, arrange=by_group,
                    groups=[group, s.name("none"), ""])
    def by_result(d: Any) -> Any:
        return {**d, "results": sorted(d["results"], key=lambda g: g["group_id"])}
    for v in (0, 2, 3):
        s.ask_ready(f"v{v} delete unknown", ApiKey.DELETE_GROUPS, v, arrange=by_result,
                    groups_names=[s.name("none"), ""])
    s.ask_ready("delete offsets-only group", ApiKey.DELETE_GROUPS, 2, groups_names=[group])
    C = request_codec(ApiKey.DESCRIBE_CONFIGS).cls
    for v in (1, 4):
        s.ask(f"v{v} configs of missing", ApiKey.DESCRIBE_CONFIGS, v, include_synonyms=False, resources=[
            C.DescribeConfigsResource(resource_type=2, resource_name=s.name("nope"), configuration_keys=None),
            C.DescribeConfigsResource(resource_type=4, resource_name="77", configuration_keys=None),
            C.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=["retention.ms"])])


def txn_offset_commit_errors(s: Story) -> None:
    """TxnOffsetCommit with missing partitions and before the group was added."""
    topic, tid, group = s.name("toc"), s.name("tid"), s.name("g")
    s.create(topic)
    s.ask_ready("find txn coordinator", ApiKey.FIND_COORDINATOR, 3, key=tid, key_type=1)
    s.ask_ready("find group coordinator", ApiKey.FIND_COORDINATOR, 3, key=group, key_type=0)
    init = s.ask_ready("init", ApiKey.INIT_PRODUCER_ID, 4, transactional_id=tid, transaction_timeout_ms=60000,
                       producer_id=-1, producer_epoch=-1)
    T = request_codec(ApiKey.TXN_OFFSET_COMMIT).cls

    def commit(step: str, version: int) -> None:
        s.ask_ready(step, ApiKey.TXN_OFFSET_COMMIT, version, transactional_id=tid, group_id=group,
                    producer_id=init.producer_id, producer_epoch=init.producer_epoch, topics=[
                        T.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                            T.TxnOffsetCommitRequestPartition(partition_index=3, committed_offset=1),
                            T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)]),
                        T.TxnOffsetCommitRequestTopic(name=s.name("nope"), partitions=[
                            T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])
    commit("v3 before AddOffsets", 3)
    s.ask_ready("add offsets", ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id=tid, producer_id=init.producer_id,
                producer_epoch=init.producer_epoch, group_id=group)
    for v in (0, 3):
        commit(f"v{v} commit", v)
    s.ask_ready("end", ApiKey.END_TXN, 3, transactional_id=tid, producer_id=init.producer_id,
                producer_epoch=init.producer_epoch, committed=True)


SCENARIOS: list[Callable[[Story], None]] = [
    fetch_and_epochs_of_missing_partitions,
    group_admin_errors,
    txn_offset_commit_errors,
    topic_admin_errors,
    group_offset_errors,
    transaction_fencing_and_a_deleted_topic,
    idempotent_sequences,
    metadata_auto_creation,
    offset_fetch_of_a_deleted_topic,
    list_offsets_of_deleted_and_recreated_topic,
    produce_to_missing_topic_and_partition,
    delete_topics_errors_per_version,
    metadata_of_a_deleted_topic,
]


def transcript(scenario: Callable[[Story], None], target: Target, suffix: str) -> Transcript:
    story = Story(target, suffix)
    scenario(story)
    return story.transcript


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_kproto_answers_as_apache_kafka(scenario: Callable[[Story], None], kafka_broker: Any,
                                        apache_kafka: Any) -> None:
    suffix = uuid.uuid4().hex[:8]  # the same names on both brokers
    ours = transcript(scenario, Target(kafka_broker.bootstrap), suffix)
    theirs = transcript(scenario, Target(apache_kafka.bootstrap), suffix)
    assert [step for step, _ in ours] == [step for step, _ in theirs]
    for (step, mine), (_, kafka) in zip(ours, theirs):
        assert mine == kafka, (f"{step}: kproto answered differently from Apache Kafka\n"
                               f"  kproto: {mine}\n  kafka:  {kafka}")
