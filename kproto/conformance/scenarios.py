"""The scenario corpus: request sequences over the APIs every client uses, error paths included
(sans-I/O: each body yields :class:`~kproto.conformance.scenario.Call` objects and reads the
decoded answers). Every run uses its own topics and groups, so runs never see each other."""
from __future__ import annotations

import zlib
from typing import Any, Dict, List, Optional

from kproto.conformance.normalise import Keyed
from kproto.conformance.scenario import TRANSIENT_COORDINATOR_ERRORS, Context, Scenario, ScenarioGen, TopicSpec, scenario
from kproto.error_codes import ErrorCode
from kproto.records import RecordBatchBuilder
from kproto.schemas.api_keys import ApiKey

__all__ = ["SCENARIOS"]

#: Every scenario, in registration order.
SCENARIOS: List[Scenario] = []

MB = 1 << 20
NO_ID = ""  # a member id the coordinator has never handed out
UNKNOWN_UUID = "AAAAAAAAAAAAAAAAAAAAAQ"  # a topic id no broker has (not the zero UUID)


def _sc(api: int, **kw: Any) -> Any:
    return scenario(api, registry=SCENARIOS, **kw)


def _t(suffix: str = "t", partitions: int = 1, **configs: str) -> TopicSpec:
    return TopicSpec(suffix, partitions, tuple((k.replace("_", "."), v) for k, v in configs.items()))


def batch(t0: int, n: int, *, first: int = 0, ts_step: int = 1, key: Optional[bytes] = b"k", value_size: int = 8,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          transactional: bool = False) -> bytes:
    """A v2 batch of ``n`` records with timestamps from ``t0`` (the run's start: the same on
    both brokers, and recent, so that no retention deletes them during the run)."""
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=base_sequence, transactional=transactional)
    for i in range(n):
        b.append(t0 + (first + i) * ts_step, key, (b"v%d-" % (first + i)).ljust(value_size, b"x"))
    return b.build()


def produce(ctx: Context, suffix: str, records: bytes, *, partition: int = 0, acks: int = -1,
            transactional_id: Optional[str] = None, label: str = "Produce", **kw: Any) -> Any:
    return ctx.call(ApiKey.PRODUCE, label=label, acks=acks, timeout_ms=10000,
                    transactional_id=transactional_id, expect_response=acks != 0, topic_data=[
                        {"name": ctx.topic(suffix), "topic_id": ctx.topic_id(suffix),
                         "partition_data": [{"index": partition, "records": records}]}], **kw)


def fetch(ctx: Context, suffix: str, offset: int, *, partition: int = 0, session_id: int = 0,
          session_epoch: int = -1, label: str = "Fetch", name: Optional[str] = None, **kw: Any) -> Any:
    topics = [{"topic": name or ctx.topic(suffix), "topic_id": ctx.topic_id(suffix), "partitions": [
        {"partition": partition, "fetch_offset": offset, "partition_max_bytes": MB,
         "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}]
    return ctx.call(ApiKey.FETCH, label=label, replica_id=-1, max_wait_ms=0, min_bytes=0,
                    max_bytes=MB, isolation_level=0, session_id=session_id,
                    session_epoch=session_epoch, topics=topics, forgotten_topics_data=[], rack_id="", **kw)


def _partition(fetch_response: Any) -> Any:
    """The first partition of a Fetch answer."""
    return fetch_response.responses[0].partitions[0]


def _own(key: str, name: str) -> Any:
    """A view keeping only the entries of keyed array ``key`` that belong to this run."""
    def view(tree: Any) -> Any:
        return {**tree, key: Keyed((k, v) for k, v in tree[key].items() if k.startswith(name))}
    return view


# -- ApiVersions -------------------------------------------------------------------------------
def _without_ranges(tree: Any) -> Any:
    # the advertised ranges are compared side by side in the report, not here; features by
    # name (plain fields, so a deviation can name the feature: finalized_features.share.version)
    out = {k: v for k, v in tree.items() if k != "api_keys"}
    for k in ("supported_features", "finalized_features"):
        if isinstance(out.get(k), dict):
            out[k] = {name: dict(entry) for name, entry in out[k].items()}
    return out


@_sc(ApiKey.API_VERSIONS)
def api_versions(ctx: Context) -> ScenarioGen:
    """ApiVersions with client software name and version (v3+)."""
    yield ctx.call(ApiKey.API_VERSIONS, client_software_name="kproto-conformance",
                   client_software_version="1.0", view=_without_ranges)


@_sc(ApiKey.API_VERSIONS, versions=range(3, 5))
def api_versions_bad_software_name(ctx: Context) -> ScenarioGen:
    """An invalid client software name: INVALID_REQUEST."""
    yield ctx.call(ApiKey.API_VERSIONS, client_software_name="bad name!",
                   client_software_version="1.0", view=_without_ranges)


# -- Metadata ----------------------------------------------------------------------------------
@_sc(ApiKey.METADATA, topics=[_t("t", 2)])
def metadata_topics(ctx: Context) -> ScenarioGen:
    """A known topic with two partitions, then an unknown one (no auto-creation from v4)."""
    yield ctx.call(ApiKey.METADATA, topics=[{"name": ctx.topic("t")}], allow_auto_topic_creation=False)
    if ctx.version >= 4:
        yield ctx.call(ApiKey.METADATA, topics=[{"name": ctx.topic("missing")}],
                       allow_auto_topic_creation=False, label="Metadata unknown topic")
    yield ctx.call(ApiKey.METADATA, topics=[{"name": "bad/name"}], allow_auto_topic_creation=False,
                   label="Metadata invalid name")


@_sc(ApiKey.METADATA, topics=[_t("t")], versions=range(10, 14))
def metadata_by_topic_id(ctx: Context) -> ScenarioGen:
    """Topics by id: a known id, then an id no broker has."""
    yield ctx.call(ApiKey.METADATA, topics=[{"name": None, "topic_id": ctx.topic_id("t")}],
                   allow_auto_topic_creation=False)
    yield ctx.call(ApiKey.METADATA, topics=[{"name": None, "topic_id": _uuid(UNKNOWN_UUID)}],
                   allow_auto_topic_creation=False, label="Metadata unknown id")


def _uuid(text: str) -> Any:
    from kproto.codecs import Uuid
    return Uuid(text)


# -- CreateTopics / DeleteTopics / CreatePartitions -------------------------------------------
@_sc(ApiKey.CREATE_TOPICS)
def create_topics(ctx: Context) -> ScenarioGen:
    """Create, create again (exists), bad partition count, replication factor above the
    broker count, unknown config, invalid name; validate-only from v1."""
    def topic(name: str, parts: int = 2, rf: int = 1, configs: Optional[Dict[str, str]] = None) -> Any:
        return {"name": name, "num_partitions": parts, "replication_factor": rf, "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
    new = ctx.topic("new")
    yield ctx.call(ApiKey.CREATE_TOPICS, timeout_ms=30000,
                   topics=[topic(new, 2, configs={"retention.ms": "3600000"})])
    yield ctx.call(ApiKey.CREATE_TOPICS, timeout_ms=30000, label="CreateTopics errors", topics=[
        topic(new), topic(ctx.topic("zero"), 0), topic(ctx.topic("rf"), 1, 3),
        topic(ctx.topic("cfg"), 1, configs={"no.such.config": "1"}),
        topic(ctx.topic("badval"), 1, configs={"retention.ms": "soon"}), topic("bad/name")])
    if ctx.version >= 1:
        yield ctx.call(ApiKey.CREATE_TOPICS, timeout_ms=30000, validate_only=True,
                       topics=[topic(ctx.topic("dry"), 3)], label="CreateTopics validate only")
        yield ctx.call(ApiKey.METADATA, topics=[{"name": ctx.topic("dry")}], label="Metadata after dry run",
                       allow_auto_topic_creation=False, compare=True)


@_sc(ApiKey.DELETE_TOPICS, topics=[_t("a"), _t("b")])
def delete_topics(ctx: Context) -> ScenarioGen:
    """Delete a topic by name, an unknown name, and (v6+) by id and an unknown id."""
    if ctx.version < 6:
        yield ctx.call(ApiKey.DELETE_TOPICS, timeout_ms=30000, topic_names=[ctx.topic("a")])
        yield ctx.call(ApiKey.DELETE_TOPICS, timeout_ms=30000, topic_names=[ctx.topic("missing")],
                       label="DeleteTopics unknown")
    else:
        yield ctx.call(ApiKey.DELETE_TOPICS, timeout_ms=30000, topics=[{"name": ctx.topic("a")}])
        yield ctx.call(ApiKey.DELETE_TOPICS, timeout_ms=30000, topics=[{"name": ctx.topic("missing")}],
                       label="DeleteTopics unknown")
        yield ctx.call(ApiKey.DELETE_TOPICS, timeout_ms=30000, label="DeleteTopics by id",
                       topics=[{"name": None, "topic_id": ctx.topic_id("b")}])
        yield ctx.call(ApiKey.DELETE_TOPICS, timeout_ms=30000, label="DeleteTopics unknown id",
                       topics=[{"name": None, "topic_id": _uuid(UNKNOWN_UUID)}])


@_sc(ApiKey.CREATE_PARTITIONS, topics=[_t("t")])
def create_partitions(ctx: Context) -> ScenarioGen:
    """Grow 1 -> 3, shrink (invalid), an unknown topic, validate-only."""
    def t(name: str, count: int) -> Any:
        return {"name": name, "count": count, "assignments": None}
    yield ctx.call(ApiKey.CREATE_PARTITIONS, timeout_ms=30000, validate_only=False,
                   topics=[t(ctx.topic("t"), 3)])
    yield ctx.call(ApiKey.CREATE_PARTITIONS, timeout_ms=30000, validate_only=False,
                   topics=[t(ctx.topic("t"), 2), t(ctx.topic("missing"), 2)], label="CreatePartitions errors")
    yield ctx.call(ApiKey.CREATE_PARTITIONS, timeout_ms=30000, validate_only=True,
                   topics=[t(ctx.topic("t"), 5)], label="CreatePartitions validate only")


# -- Produce -----------------------------------------------------------------------------------
PRODUCE_VERSIONS = range(3, 14)  # magic v2 batches


@_sc(ApiKey.PRODUCE, topics=[_t("t")], versions=PRODUCE_VERSIONS)
def produce_acks(ctx: Context) -> ScenarioGen:
    """acks=-1, acks=1, acks=0 (no answer), then a Fetch showing all three batches."""
    yield produce(ctx, "t", batch(ctx.t0, 3), acks=-1, label="Produce acks=-1")
    yield produce(ctx, "t", batch(ctx.t0, 2, first=3), acks=1, label="Produce acks=1")
    yield produce(ctx, "t", batch(ctx.t0, 1, first=5), acks=0, label="Produce acks=0")
    yield fetch(ctx, "t", 0, label="Fetch after produce", compare=True)


@_sc(ApiKey.PRODUCE, topics=[_t("t")], versions=PRODUCE_VERSIONS)
def produce_unknown(ctx: Context) -> ScenarioGen:
    """An unknown topic and a partition beyond the topic's count."""
    yield ctx.call(ApiKey.PRODUCE, acks=-1, timeout_ms=10000, label="Produce unknown topic", topic_data=[
        {"name": ctx.topic("missing"), "topic_id": _uuid(UNKNOWN_UUID),
         "partition_data": [{"index": 0, "records": batch(ctx.t0, 1)}]}])
    yield produce(ctx, "t", batch(ctx.t0, 1), partition=7, label="Produce bad partition")


@_sc(ApiKey.PRODUCE, topics=[_t("t")], versions=PRODUCE_VERSIONS)
def produce_idempotent(ctx: Context) -> ScenarioGen:
    """An idempotent producer: sequence 0, the same batch again (duplicate), a gap (out of
    order), the next sequence, and an unknown producer id."""
    init = yield init_idempotent(ctx)
    pid, epoch = init.producer_id, init.producer_epoch
    first = batch(ctx.t0, 3, producer_id=pid, producer_epoch=epoch, base_sequence=0)
    yield produce(ctx, "t", first, label="Produce seq 0")
    yield produce(ctx, "t", first, label="Produce duplicate seq 0")
    yield produce(ctx, "t", batch(ctx.t0, 1, first=3, producer_id=pid, producer_epoch=epoch, base_sequence=10),
                  label="Produce out-of-order seq")
    yield produce(ctx, "t", batch(ctx.t0, 1, first=3, producer_id=pid, producer_epoch=epoch, base_sequence=3),
                  label="Produce seq 3")
    yield produce(ctx, "t", batch(ctx.t0, 1, first=4, producer_id=pid + 1000, producer_epoch=0, base_sequence=5),
                  label="Produce unknown producer")


@_sc(ApiKey.PRODUCE, topics=[_t("small", max_message_bytes="1000"), _t("compact", cleanup_policy="compact")],
     versions=PRODUCE_VERSIONS)
def produce_rejected(ctx: Context) -> ScenarioGen:
    """A batch over the topic's max.message.bytes; a null key on a compacted topic."""
    yield produce(ctx, "small", batch(ctx.t0, 1, value_size=5000), label="Produce oversized")
    yield produce(ctx, "compact", batch(ctx.t0, 2, key=None), label="Produce null key compacted")
    yield produce(ctx, "compact", batch(ctx.t0, 2), label="Produce keyed compacted")


@_sc(ApiKey.PRODUCE, topics=[_t("t")], versions=PRODUCE_VERSIONS)
def produce_transactional_unadded(ctx: Context) -> ScenarioGen:
    """A transactional batch to a partition not added to the transaction."""
    txn = ctx.group("txn")
    init = yield init_txn(ctx, txn)
    yield produce(ctx, "t", batch(ctx.t0, 1, producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                  base_sequence=0, transactional=True),
                  transactional_id=txn, label="Produce txn not added")


# -- Fetch -------------------------------------------------------------------------------------
FETCH_VERSIONS = range(4, 19)


@_sc(ApiKey.FETCH, topics=[_t("t")], versions=FETCH_VERSIONS)
def fetch_offsets(ctx: Context) -> ScenarioGen:
    """From 0, from the middle of a batch, at the end, out of range, a bad partition, an
    unknown topic."""
    yield produce(ctx, "t", batch(ctx.t0, 3))
    yield produce(ctx, "t", batch(ctx.t0, 2, first=3))
    yield fetch(ctx, "t", 0, label="Fetch from 0")
    yield fetch(ctx, "t", 4, label="Fetch from 4")
    yield fetch(ctx, "t", 5, label="Fetch at end")
    yield fetch(ctx, "t", 100, label="Fetch out of range")
    yield fetch(ctx, "t", 0, partition=3, label="Fetch bad partition")
    yield fetch(ctx, "missing", 0, label="Fetch unknown topic")


@_sc(ApiKey.FETCH, topics=[_t("t")], versions=range(7, 19))
def fetch_sessions(ctx: Context) -> ScenarioGen:
    """KIP-227: a full fetch opening a session, an incremental one with no changes, a wrong
    epoch, an unknown session id, and closing it."""
    yield produce(ctx, "t", batch(ctx.t0, 2))
    full = yield fetch(ctx, "t", 0, session_id=0, session_epoch=0, label="Fetch session open")
    sid = full.session_id
    yield ctx.call(ApiKey.FETCH, label="Fetch session incremental", replica_id=-1, max_wait_ms=0,
                   min_bytes=0, max_bytes=MB, isolation_level=0, session_id=sid, session_epoch=1,
                   topics=[], forgotten_topics_data=[], rack_id="")
    yield ctx.call(ApiKey.FETCH, label="Fetch session bad epoch", replica_id=-1, max_wait_ms=0,
                   min_bytes=0, max_bytes=MB, isolation_level=0, session_id=sid, session_epoch=7,
                   topics=[], forgotten_topics_data=[], rack_id="")
    yield ctx.call(ApiKey.FETCH, label="Fetch session unknown", replica_id=-1, max_wait_ms=0,
                   min_bytes=0, max_bytes=MB, isolation_level=0, session_id=sid ^ 0x5A5A5A5A or 1,
                   session_epoch=1, topics=[], forgotten_topics_data=[], rack_id="")
    yield ctx.call(ApiKey.FETCH, label="Fetch session close", replica_id=-1, max_wait_ms=0,
                   min_bytes=0, max_bytes=MB, isolation_level=0, session_id=sid, session_epoch=-1,
                   topics=[], forgotten_topics_data=[], rack_id="")


# -- ListOffsets -------------------------------------------------------------------------------
@_sc(ApiKey.LIST_OFFSETS, topics=[_t("t")])
def list_offsets(ctx: Context) -> ScenarioGen:
    """Earliest, latest, by time, max timestamp (v7+), latest tiered (v9+), earliest pending
    upload (v11+), a time after every record, a bad partition."""
    for i in range(3):
        yield produce(ctx, "t", batch(ctx.t0, 1, first=i, ts_step=1000))

    def q(ts: int, label: str, partition: int = 0) -> Any:
        return ctx.call(ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=0, label=label, timeout_ms=10000,
                        topics=[{"name": ctx.topic("t"), "partitions": [
                            {"partition_index": partition, "timestamp": ts, "max_num_offsets": 1,
                             "current_leader_epoch": -1}]}])
    yield q(-2, "ListOffsets earliest")
    yield q(-1, "ListOffsets latest")
    yield q(ctx.t0 + 500, "ListOffsets by time")
    yield q(ctx.t0 + 10_000, "ListOffsets after the last record")
    if ctx.version >= 7:
        yield q(-3, "ListOffsets max timestamp")
    if ctx.version >= 9:
        yield q(-5, "ListOffsets latest tiered")
    if ctx.version >= 11:
        yield q(-6, "ListOffsets earliest pending upload")
    yield q(-1, "ListOffsets bad partition", partition=4)


# -- FindCoordinator ---------------------------------------------------------------------------
@_sc(ApiKey.FIND_COORDINATOR)
def find_coordinator(ctx: Context) -> ScenarioGen:
    """A group coordinator, then (v1+) a transaction coordinator and an unknown key type."""
    yield ctx.call(ApiKey.FIND_COORDINATOR, key=ctx.group(), key_type=0, coordinator_keys=[ctx.group()])
    if ctx.version >= 1:
        yield ctx.call(ApiKey.FIND_COORDINATOR, key=ctx.group("txn"), key_type=1,
                       coordinator_keys=[ctx.group("txn")], label="FindCoordinator transaction")
        yield ctx.call(ApiKey.FIND_COORDINATOR, key=ctx.group("x"), key_type=7,
                       coordinator_keys=[ctx.group("x")], label="FindCoordinator bad key type")


# -- classic groups ----------------------------------------------------------------------------
PROTOCOLS = [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"}]


def _coordinator_loading(resp: Any) -> bool:
    return resp.error_code in TRANSIENT_COORDINATOR_ERRORS


def join(ctx: Context, group: str, member_id: str = "", label: str = "JoinGroup") -> ScenarioGen:
    """JoinGroup, answering MEMBER_ID_REQUIRED (v4+) with a second join; returns the answer."""
    def req(mid: str, lab: str) -> Any:
        return ctx.call(ApiKey.JOIN_GROUP, group_id=group, session_timeout_ms=30000,
                        rebalance_timeout_ms=30000, member_id=mid, group_instance_id=None,
                        protocol_type="consumer", protocols=PROTOCOLS, reason=None, label=lab,
                        retry=_coordinator_loading)
    resp = yield req(member_id, label)
    if resp.error_code == 79:  # MEMBER_ID_REQUIRED
        resp = yield req(resp.member_id, label + " with member id")
    return resp


def join_sync(ctx: Context, group: str) -> ScenarioGen:
    """A one-member group that has completed its rebalance: (member id, generation)."""
    j = yield from join(ctx, group)
    yield ctx.call(ApiKey.SYNC_GROUP, group_id=group, generation_id=j.generation_id, member_id=j.member_id,
                   group_instance_id=None, protocol_type="consumer", protocol_name="range",
                   assignments=[{"member_id": j.member_id, "assignment": b"\x00\x01"}])
    return j.member_id, j.generation_id


@_sc(ApiKey.JOIN_GROUP)
def join_group(ctx: Context) -> ScenarioGen:
    """Join a new group, rejoin as the member (same generation), join with an unknown member
    id, a bad protocol type."""
    g = ctx.group()
    j = yield from join(ctx, g)
    yield from join(ctx, g, j.member_id, label="JoinGroup rejoin")
    yield ctx.call(ApiKey.JOIN_GROUP, group_id=g, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                   member_id="unknown-member", protocol_type="consumer", protocols=PROTOCOLS,
                   label="JoinGroup unknown member")
    yield ctx.call(ApiKey.JOIN_GROUP, group_id=g, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                   member_id="", protocol_type="connect", protocols=PROTOCOLS,
                   label="JoinGroup inconsistent protocol")
    yield ctx.call(ApiKey.JOIN_GROUP, group_id=ctx.group("s"), session_timeout_ms=10, rebalance_timeout_ms=30000,
                   member_id="", protocol_type="consumer", protocols=PROTOCOLS,
                   label="JoinGroup bad session timeout")


@_sc(ApiKey.SYNC_GROUP)
def sync_group(ctx: Context) -> ScenarioGen:
    """The leader's SyncGroup, then a stale generation and an unknown member."""
    g = ctx.group()
    j = yield from join(ctx, g)

    def sync(gen: int, mid: str, label: str) -> Any:
        return ctx.call(ApiKey.SYNC_GROUP, group_id=g, generation_id=gen, member_id=mid, label=label,
                        group_instance_id=None, protocol_type="consumer", protocol_name="range",
                        assignments=[{"member_id": mid, "assignment": b"\x00\x01"}])
    yield sync(j.generation_id, j.member_id, "SyncGroup")
    yield sync(j.generation_id + 1, j.member_id, "SyncGroup stale generation")
    yield sync(j.generation_id, "unknown-member", "SyncGroup unknown member")


@_sc(ApiKey.HEARTBEAT)
def heartbeat(ctx: Context) -> ScenarioGen:
    """Heartbeat of a stable member, a stale generation, an unknown member, an unknown group."""
    g = ctx.group()
    mid, gen = yield from join_sync(ctx, g)

    def hb(group: str, gen: int, mid: str, label: str) -> Any:
        return ctx.call(ApiKey.HEARTBEAT, group_id=group, generation_id=gen, member_id=mid,
                        group_instance_id=None, label=label)
    yield hb(g, gen, mid, "Heartbeat")
    yield hb(g, gen - 1, mid, "Heartbeat stale generation")
    yield hb(g, gen, "unknown-member", "Heartbeat unknown member")
    yield hb(ctx.group("none"), 1, "unknown-member", "Heartbeat unknown group")


@_sc(ApiKey.LEAVE_GROUP)
def leave_group(ctx: Context) -> ScenarioGen:
    """A member leaves; an unknown member leaves."""
    g = ctx.group()
    mid, _ = yield from join_sync(ctx, g)

    def leave(m: str, label: str) -> Any:
        return ctx.call(ApiKey.LEAVE_GROUP, group_id=g, member_id=m, label=label,
                        members=[{"member_id": m, "group_instance_id": None, "reason": None}])
    yield leave(mid, "LeaveGroup")
    yield leave("unknown-member", "LeaveGroup unknown member")


def _commit(ctx: Context, group: str, gen: int, mid: str, offset: int, label: str,
            suffix: str = "t", partition: int = 0, compare: Optional[bool] = None) -> Any:
    return ctx.call(ApiKey.OFFSET_COMMIT, group_id=group, generation_id_or_member_epoch=gen, member_id=mid,
                    group_instance_id=None, retention_time_ms=-1, label=label, compare=compare,
                    topics=[{"name": ctx.topic(suffix), "topic_id": ctx.topic_id(suffix), "partitions": [
                        {"partition_index": partition, "committed_offset": offset,
                         "committed_leader_epoch": -1, "committed_metadata": "m"}]}])


@_sc(ApiKey.OFFSET_COMMIT, topics=[_t("t")])
def offset_commit(ctx: Context) -> ScenarioGen:
    """Commits of a group member (v1+), a stale generation, an unknown member, a simple
    (memberless) commit, an unknown partition."""
    g = ctx.group()
    if ctx.version >= 1:
        mid, gen = yield from join_sync(ctx, g)
        yield _commit(ctx, g, gen, mid, 3, "OffsetCommit member")
        yield _commit(ctx, g, gen + 1, mid, 3, "OffsetCommit stale generation")
        yield _commit(ctx, g, gen, "unknown-member", 3, "OffsetCommit unknown member")
    yield _commit(ctx, ctx.group("simple"), -1, "", 5, "OffsetCommit simple")
    yield _commit(ctx, ctx.group("simple"), -1, "", 5, "OffsetCommit unknown partition", partition=9)


@_sc(ApiKey.OFFSET_COMMIT, topics=[_t("t")], versions=range(10, 11))
def offset_commit_unknown_topic_id(ctx: Context) -> ScenarioGen:
    """Topics by id (v10): an id no broker has, alone and beside a known topic, a member's
    commit with one."""
    g = ctx.group("simple")

    def commit(topics: List[Any], label: str, group: str = g, gen: int = -1, mid: str = "") -> Any:
        return ctx.call(ApiKey.OFFSET_COMMIT, group_id=group, generation_id_or_member_epoch=gen,
                        member_id=mid, group_instance_id=None, retention_time_ms=-1, label=label,
                        topics=[{"name": "", "topic_id": tid, "partitions": [
                            {"partition_index": p, "committed_offset": 4, "committed_leader_epoch": -1,
                             "committed_metadata": "m"} for p in parts]} for tid, parts in topics])
    unknown, other = _uuid(UNKNOWN_UUID), _uuid("AAAAAAAAAAAAAAAAAAAAAg")
    yield commit([(unknown, [0, 1])], "OffsetCommit unknown topic id")
    yield commit([(ctx.topic_id("t"), [0]), (unknown, [0]), (ctx.topic_id("t"), [7]), (other, [2])],
                 "OffsetCommit known and unknown topic ids")
    member_group = ctx.group()
    mid, gen = yield from join_sync(ctx, member_group)
    yield commit([(unknown, [0]), (ctx.topic_id("t"), [0])], "OffsetCommit member, unknown topic id",
                 group=member_group, gen=gen, mid=mid)


@_sc(ApiKey.OFFSET_FETCH, topics=[_t("t", 2)], versions=range(10, 11))
def offset_fetch_unknown_topic_id(ctx: Context) -> ScenarioGen:
    """Topics by id (v10): an id no broker has, beside a known one, for a group with offsets
    and for an unknown group."""
    g = ctx.group()
    yield _commit(ctx, g, -1, "", 7, "OffsetCommit", compare=False)
    unknown = _uuid(UNKNOWN_UUID)

    def fetch_offsets(group: str, topics: List[Any], label: str) -> Any:
        return ctx.call(ApiKey.OFFSET_FETCH, require_stable=False, label=label, groups=[
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": [
                {"name": "", "topic_id": tid, "partition_indexes": parts} for tid, parts in topics]}])
    yield fetch_offsets(g, [(unknown, [0, 1])], "OffsetFetch unknown topic id")
    yield fetch_offsets(g, [(ctx.topic_id("t"), [0, 1]), (unknown, [0])], "OffsetFetch known and unknown ids")
    yield fetch_offsets(ctx.group("none"), [(unknown, [0]), (ctx.topic_id("t"), [1])],
                        "OffsetFetch unknown group, unknown topic id")
    yield fetch_offsets(g, [(unknown, [0]), (unknown, [1]), (_uuid("AAAAAAAAAAAAAAAAAAAAAg"), [3])],
                        "OffsetFetch only unknown ids")


@_sc(ApiKey.OFFSET_FETCH, topics=[_t("t", 2)])
def offset_fetch(ctx: Context) -> ScenarioGen:
    """Committed and uncommitted partitions, all partitions (v2+), an unknown group."""
    g = ctx.group()
    yield _commit(ctx, g, -1, "", 7, "OffsetCommit", compare=False)

    def fetch_offsets(group: str, parts: Optional[List[int]], label: str) -> Any:
        topics = None if parts is None else [{"name": ctx.topic("t"), "topic_id": ctx.topic_id("t"),
                                              "partition_indexes": parts}]
        return ctx.call(ApiKey.OFFSET_FETCH, group_id=group, topics=topics, require_stable=False, label=label,
                        groups=[{"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}])
    yield fetch_offsets(g, [0, 1], "OffsetFetch")
    if ctx.version >= 2:
        yield fetch_offsets(g, None, "OffsetFetch all")
    yield fetch_offsets(ctx.group("none"), [0], "OffsetFetch unknown group")


@_sc(ApiKey.DESCRIBE_GROUPS)
def describe_groups(ctx: Context) -> ScenarioGen:
    """A stable one-member group and an unknown group."""
    g = ctx.group()
    yield from join_sync(ctx, g)
    yield ctx.call(ApiKey.DESCRIBE_GROUPS, groups=[g, ctx.group("none")], include_authorized_operations=False)


@_sc(ApiKey.LIST_GROUPS)
def list_groups(ctx: Context) -> ScenarioGen:
    """The run's group among all groups (other runs' groups are left out of the comparison)."""
    g = ctx.group()
    yield from join_sync(ctx, g)
    yield ctx.call(ApiKey.LIST_GROUPS, states_filter=[], types_filter=[], view=_own("groups", g))
    if ctx.version >= 4:
        yield ctx.call(ApiKey.LIST_GROUPS, states_filter=["Stable"], types_filter=[], view=_own("groups", g),
                       label="ListGroups stable")


@_sc(ApiKey.DELETE_GROUPS, topics=[_t("t")])
def delete_groups(ctx: Context) -> ScenarioGen:
    """An empty group with offsets, a group with a member, an unknown group."""
    empty, busy = ctx.group("empty"), ctx.group("busy")
    yield _commit(ctx, empty, -1, "", 1, "OffsetCommit", compare=False)
    yield from join_sync(ctx, busy)
    yield ctx.call(ApiKey.DELETE_GROUPS, groups_names=[empty, busy, ctx.group("none")])


@_sc(ApiKey.OFFSET_DELETE, topics=[_t("t", 2)])
def offset_delete(ctx: Context) -> ScenarioGen:
    """Delete a committed offset of an empty group; an unknown group; a group subscribed to
    the topic."""
    g = ctx.group()
    yield _commit(ctx, g, -1, "", 1, "OffsetCommit", compare=False)
    yield ctx.call(ApiKey.OFFSET_DELETE, group_id=g, topics=[{"name": ctx.topic("t"), "partitions": [
        {"partition_index": 0}, {"partition_index": 1}]}])
    yield ctx.call(ApiKey.OFFSET_DELETE, group_id=ctx.group("none"), label="OffsetDelete unknown group",
                   topics=[{"name": ctx.topic("t"), "partitions": [{"partition_index": 0}]}])


# -- KIP-848 -----------------------------------------------------------------------------------
@_sc(ApiKey.CONSUMER_GROUP_HEARTBEAT, topics=[_t("t", 2)])
def consumer_group_heartbeat(ctx: Context) -> ScenarioGen:
    """Join with epoch 0, heartbeat with a stale member epoch (fenced), an unknown member, leave."""
    g = ctx.group()
    mid = "" if ctx.version == 0 else "kproto-conformance-mem01"

    def hb(member: str, epoch: int, label: str, **kw: Any) -> Any:
        return ctx.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, group_id=g, member_id=member, member_epoch=epoch,
                        instance_id=None, rack_id=None, label=label, **kw)
    first = yield hb(mid, 0, "ConsumerGroupHeartbeat join", rebalance_timeout_ms=30000,
                     subscribed_topic_names=[ctx.topic("t")], subscribed_topic_regex=None,
                     server_assignor=None, topic_partitions=[])
    mid, epoch = first.member_id or mid, first.member_epoch
    yield hb(mid, epoch + 5, "ConsumerGroupHeartbeat fenced epoch", rebalance_timeout_ms=-1,
             subscribed_topic_names=None, server_assignor=None, topic_partitions=None)
    yield hb("kproto-conformance-none", 3, "ConsumerGroupHeartbeat unknown member", rebalance_timeout_ms=-1,
             subscribed_topic_names=None, server_assignor=None, topic_partitions=None)
    yield hb(mid, -1, "ConsumerGroupHeartbeat leave", rebalance_timeout_ms=-1,
             subscribed_topic_names=None, server_assignor=None, topic_partitions=None)


# -- transactions ------------------------------------------------------------------------------
def init_txn(ctx: Context, txn: str, label: str = "InitProducerId", compare: Optional[bool] = None) -> Any:
    return ctx.call(ApiKey.INIT_PRODUCER_ID, transactional_id=txn, transaction_timeout_ms=60000,
                    producer_id=-1, producer_epoch=-1, label=label, compare=compare,
                    retry=_coordinator_loading)


def init_idempotent(ctx: Context, label: str = "InitProducerId") -> Any:
    """An idempotent producer id. Kafka answers COORDINATOR_LOAD_IN_PROGRESS until its first
    block of producer ids arrives from the controller (its client retries): asked again then."""
    return ctx.call(ApiKey.INIT_PRODUCER_ID, transactional_id=None, transaction_timeout_ms=60000,
                    producer_id=-1, producer_epoch=-1, label=label, retry=_coordinator_loading)


def add_partitions(ctx: Context, txn: str, pid: int, epoch: int, suffix: str = "t",
                   label: str = "AddPartitionsToTxn", name: Optional[str] = None) -> Any:
    topics = [{"name": name or ctx.topic(suffix), "partitions": [0]}]
    return ctx.call(ApiKey.ADD_PARTITIONS_TO_TXN, label=label,
                    v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics,
                    transactions=[{"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                                   "verify_only": False, "topics": topics}])


@_sc(ApiKey.INIT_PRODUCER_ID)
def init_producer_id(ctx: Context) -> ScenarioGen:
    """An idempotent producer id; a transactional one, twice (the epoch bumps); a bad timeout."""
    yield init_idempotent(ctx, "InitProducerId idempotent")
    txn = ctx.group("txn")
    yield init_txn(ctx, txn)
    yield init_txn(ctx, txn, "InitProducerId again")
    yield ctx.call(ApiKey.INIT_PRODUCER_ID, transactional_id=ctx.group("txn2"), transaction_timeout_ms=0,
                   producer_id=-1, producer_epoch=-1, label="InitProducerId bad timeout")


@_sc(ApiKey.ADD_PARTITIONS_TO_TXN, topics=[_t("t")])
def add_partitions_to_txn(ctx: Context) -> ScenarioGen:
    """Add a partition; with a fenced (old) epoch; an unknown topic; an unknown producer id."""
    txn = ctx.group("txn")
    old = yield init_txn(ctx, txn, compare=False)
    new = yield init_txn(ctx, txn, "InitProducerId again", compare=False)
    yield add_partitions(ctx, txn, new.producer_id, new.producer_epoch)
    yield add_partitions(ctx, txn, old.producer_id, old.producer_epoch, label="AddPartitionsToTxn fenced epoch")
    yield add_partitions(ctx, txn, new.producer_id, new.producer_epoch, name=ctx.topic("missing"),
                         label="AddPartitionsToTxn unknown topic")
    yield add_partitions(ctx, txn, new.producer_id + 1000, 0, label="AddPartitionsToTxn unknown producer")


@_sc(ApiKey.END_TXN, topics=[_t("t")])
def end_txn(ctx: Context) -> ScenarioGen:
    """Abort and commit a transaction nothing was added to (transaction version 2, v5, aborts
    it under a bumped epoch), commit a transaction with one batch, end with a fenced epoch,
    then a Fetch at read_committed showing the marker."""
    empty = ctx.group("txn-empty")
    r = yield init_txn(ctx, empty, compare=False)
    for committed, label in ((True, "EndTxn commit nothing added"), (False, "EndTxn abort nothing added")):
        yield ctx.call(ApiKey.END_TXN, transactional_id=empty, producer_id=r.producer_id,
                       producer_epoch=r.producer_epoch, committed=committed, label=label)
    txn = ctx.group("txn")
    old = yield init_txn(ctx, txn, compare=False)
    new = yield init_txn(ctx, txn, "InitProducerId again", compare=False)
    pid, epoch = new.producer_id, new.producer_epoch
    yield add_partitions(ctx, txn, pid, epoch)
    # the leader verifies the batch with the coordinator (KIP-890): retried while that is
    # still busy with the transaction's previous step, as producers do
    yield produce(ctx, "t", batch(ctx.t0, 2, producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True),
                  transactional_id=txn, retry=_verification_busy)

    def end(p: int, e: int, committed: bool, label: str) -> Any:
        return ctx.call(ApiKey.END_TXN, transactional_id=txn, producer_id=p, producer_epoch=e,
                        committed=committed, label=label)
    yield end(pid, epoch, True, "EndTxn commit")
    yield end(old.producer_id, old.producer_epoch, False, "EndTxn fenced epoch")
    # Kafka writes the commit marker after answering EndTxn: poll until it is there, as a
    # consumer would
    yield fetch(ctx, "t", 0, label="Fetch after commit", compare=True,
                retry=lambda r: _partition(r).error_code == 0 and _partition(r).last_stable_offset < 3)


def _verification_busy(resp: Any) -> bool:
    return resp.responses[0].partition_responses[0].error_code in (
        ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.CONCURRENT_TRANSACTIONS)


@_sc(ApiKey.ADD_OFFSETS_TO_TXN, topics=[_t("t")])
def add_offsets_to_txn(ctx: Context) -> ScenarioGen:
    """Add a group's offsets to a transaction; with a fenced epoch."""
    txn = ctx.group("txn")
    old = yield init_txn(ctx, txn, compare=False)
    new = yield init_txn(ctx, txn, "InitProducerId again", compare=False)
    for label, r in (("AddOffsetsToTxn", new), ("AddOffsetsToTxn fenced epoch", old)):
        yield ctx.call(ApiKey.ADD_OFFSETS_TO_TXN, transactional_id=txn, producer_id=r.producer_id,
                       producer_epoch=r.producer_epoch, group_id=ctx.group(), label=label)


@_sc(ApiKey.TXN_OFFSET_COMMIT, topics=[_t("t")])
def txn_offset_commit(ctx: Context) -> ScenarioGen:
    """TxnOffsetCommit after AddOffsetsToTxn; with a fenced epoch; without AddOffsetsToTxn."""
    txn, g = ctx.group("txn"), ctx.group()
    old = yield init_txn(ctx, txn, compare=False)
    new = yield init_txn(ctx, txn, "InitProducerId again", compare=False)
    yield ctx.call(ApiKey.ADD_OFFSETS_TO_TXN, transactional_id=txn, producer_id=new.producer_id,
                   producer_epoch=new.producer_epoch, group_id=g)

    def commit(r: Any, group: str, label: str) -> Any:
        return ctx.call(ApiKey.TXN_OFFSET_COMMIT, transactional_id=txn, group_id=group,
                        producer_id=r.producer_id, producer_epoch=r.producer_epoch,
                        generation_id_or_member_epoch=-1, member_id="", group_instance_id=None, label=label, topics=[
                            {"name": ctx.topic("t"), "topic_id": ctx.topic_id("t"), "partitions": [
                                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                 "committed_metadata": ""}]}])
    yield commit(new, g, "TxnOffsetCommit")
    yield commit(old, g, "TxnOffsetCommit fenced epoch")


@_sc(ApiKey.DESCRIBE_TRANSACTIONS, topics=[_t("t")])
def describe_transactions(ctx: Context) -> ScenarioGen:
    """An ongoing transaction with one partition; an unknown transactional id."""
    txn = ctx.group("txn")
    r = yield init_txn(ctx, txn)
    yield add_partitions(ctx, txn, r.producer_id, r.producer_epoch)
    yield ctx.call(ApiKey.DESCRIBE_TRANSACTIONS, transactional_ids=[txn, ctx.group("none")])


@_sc(ApiKey.LIST_TRANSACTIONS, topics=[_t("t")])
def list_transactions(ctx: Context) -> ScenarioGen:
    """Filtered by this run's producer id (other runs' transactions are left out)."""
    txn = ctx.group("txn")
    r = yield init_txn(ctx, txn)
    yield add_partitions(ctx, txn, r.producer_id, r.producer_epoch)
    yield ctx.call(ApiKey.LIST_TRANSACTIONS, state_filters=[], producer_id_filters=[r.producer_id],
                   duration_filter=-1, transactional_id_pattern=None)
    yield ctx.call(ApiKey.LIST_TRANSACTIONS, state_filters=["Ongoing"], producer_id_filters=[r.producer_id],
                   duration_filter=-1, transactional_id_pattern=None, label="ListTransactions ongoing")


@_sc(ApiKey.DESCRIBE_PRODUCERS, topics=[_t("t")])
def describe_producers(ctx: Context) -> ScenarioGen:
    """The idempotent producer of a partition; an unknown partition."""
    init = yield init_idempotent(ctx)
    yield produce(ctx, "t", batch(ctx.t0, 3, producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                                  base_sequence=0))
    yield ctx.call(ApiKey.DESCRIBE_PRODUCERS, topics=[{"name": ctx.topic("t"), "partition_indexes": [0, 5]}])


# -- configs -----------------------------------------------------------------------------------
TOPIC, BROKER = 2, 4
TOPIC_KEYS = ["cleanup.policy", "retention.ms", "max.message.bytes", "segment.bytes", "min.insync.replicas"]


@_sc(ApiKey.DESCRIBE_CONFIGS, topics=[_t("t", retention_ms="7200000")])
def describe_configs(ctx: Context) -> ScenarioGen:
    """Chosen keys of a topic (one set, the others defaults), all its configs with their
    synonyms, an unknown topic, an unknown key."""
    yield ctx.call(ApiKey.DESCRIBE_CONFIGS, include_synonyms=True, include_documentation=False, resources=[
        {"resource_type": TOPIC, "resource_name": ctx.topic("t"), "configuration_keys": TOPIC_KEYS}])
    yield ctx.call(ApiKey.DESCRIBE_CONFIGS, include_synonyms=True, include_documentation=False,
                   label="DescribeConfigs all", resources=[
                       {"resource_type": TOPIC, "resource_name": ctx.topic("t"), "configuration_keys": None}])
    yield ctx.call(ApiKey.DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=False,
                   label="DescribeConfigs unknown", resources=[
                       {"resource_type": TOPIC, "resource_name": ctx.topic("missing"), "configuration_keys": None},
                       {"resource_type": TOPIC, "resource_name": ctx.topic("t"), "configuration_keys": ["no.such"]}])


@_sc(ApiKey.ALTER_CONFIGS, topics=[_t("t")])
def alter_configs(ctx: Context) -> ScenarioGen:
    """Set a topic config, a bad value, an unknown topic; then describe the result."""
    def alter(name: str, configs: Dict[str, str], label: str, validate: bool = False) -> Any:
        return ctx.call(ApiKey.ALTER_CONFIGS, validate_only=validate, label=label, resources=[
            {"resource_type": TOPIC, "resource_name": name,
             "configs": [{"name": k, "value": v} for k, v in configs.items()]}])
    yield alter(ctx.topic("t"), {"retention.ms": "1000000"}, "AlterConfigs")
    yield alter(ctx.topic("t"), {"retention.ms": "soon"}, "AlterConfigs bad value")
    yield alter(ctx.topic("missing"), {"retention.ms": "1"}, "AlterConfigs unknown topic")
    yield ctx.call(ApiKey.DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=False,
                   compare=True, label="DescribeConfigs after alter", resources=[
                       {"resource_type": TOPIC, "resource_name": ctx.topic("t"), "configuration_keys": TOPIC_KEYS}])


@_sc(ApiKey.INCREMENTAL_ALTER_CONFIGS, topics=[_t("t")])
def incremental_alter_configs(ctx: Context) -> ScenarioGen:
    """SET, APPEND to a list, DELETE; an unknown config; then describe the result."""
    def alter(ops: List[Any], label: str, name: Optional[str] = None) -> Any:
        return ctx.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, validate_only=False, label=label, resources=[
            {"resource_type": TOPIC, "resource_name": name or ctx.topic("t"),
             "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}])
    yield alter([("retention.ms", 0, "1000000"), ("cleanup.policy", 2, "compact")], "IncrementalAlterConfigs")
    yield alter([("retention.ms", 1, None)], "IncrementalAlterConfigs delete")
    yield alter([("no.such.config", 0, "1")], "IncrementalAlterConfigs unknown config")
    yield alter([("retention.ms", 0, "1")], "IncrementalAlterConfigs unknown topic", name=ctx.topic("missing"))
    yield ctx.call(ApiKey.DESCRIBE_CONFIGS, include_synonyms=False, include_documentation=False,
                   compare=True, label="DescribeConfigs after alter", resources=[
                       {"resource_type": TOPIC, "resource_name": ctx.topic("t"), "configuration_keys": TOPIC_KEYS}])


# -- records and partitions --------------------------------------------------------------------
@_sc(ApiKey.DELETE_RECORDS, topics=[_t("t")])
def delete_records(ctx: Context) -> ScenarioGen:
    """Delete before offset 2 of 5, beyond the end, a bad partition; then ListOffsets earliest."""
    yield produce(ctx, "t", batch(ctx.t0, 5))

    def delete(offset: int, label: str, partition: int = 0) -> Any:
        return ctx.call(ApiKey.DELETE_RECORDS, timeout_ms=10000, label=label, topics=[
            {"name": ctx.topic("t"), "partitions": [{"partition_index": partition, "offset": offset}]}])
    yield delete(2, "DeleteRecords")
    yield delete(100, "DeleteRecords out of range")
    yield delete(1, "DeleteRecords bad partition", partition=3)
    yield ctx.call(ApiKey.LIST_OFFSETS, replica_id=-1, isolation_level=0, timeout_ms=10000, compare=True,
                   label="ListOffsets after delete", topics=[{"name": ctx.topic("t"), "partitions": [
                       {"partition_index": 0, "timestamp": -2, "max_num_offsets": 1, "current_leader_epoch": -1}]}])


@_sc(ApiKey.ELECT_LEADERS, topics=[_t("t")])
def elect_leaders(ctx: Context) -> ScenarioGen:
    """A preferred election where the preferred replica leads already; an unknown partition
    and an unknown topic; from v1 an unclean election of a partition that has a leader and an
    unknown election type (the whole request refused)."""
    def elect(kind: int, label: str) -> Any:
        return ctx.call(ApiKey.ELECT_LEADERS, election_type=kind, timeout_ms=10000, label=label,
                        topic_partitions=[{"topic": ctx.topic("t"), "partitions": [0, 4]},
                                          {"topic": ctx.topic("missing"), "partitions": [0]}])
    yield elect(0, "ElectLeaders")
    if ctx.version >= 1:
        yield elect(1, "ElectLeaders unclean")
        yield elect(7, "ElectLeaders unknown type")
        yield ctx.call(ApiKey.ELECT_LEADERS, election_type=0, timeout_ms=10000, topic_partitions=[],
                       label="ElectLeaders no partitions")


@_sc(ApiKey.ALTER_PARTITION_REASSIGNMENTS, topics=[_t("t", 2)])
def alter_partition_reassignments(ctx: Context) -> ScenarioGen:
    """Reassignments that change nothing or fail: partition 0 to its current replicas (no
    move), to an unregistered broker, to no broker, to a broker twice; cancelling where no
    reassignment is under way; an unknown partition and an unknown topic."""
    md = yield ctx.call(ApiKey.METADATA, topics=[{"name": ctx.topic("t")}], allow_auto_topic_creation=False)
    current = list(md.topics[0].partitions[0].replica_nodes) if md.topics and md.topics[0].partitions else [1]

    def alter(replicas: Optional[List[int]], label: str, partition: int = 0, suffix: str = "t") -> Any:
        return ctx.call(ApiKey.ALTER_PARTITION_REASSIGNMENTS, timeout_ms=10000, label=label,
                        allow_replication_factor_change=False, topics=[
                            {"name": ctx.topic(suffix), "partitions": [
                                {"partition_index": partition, "replicas": replicas}]}])
    yield alter(current, "AlterPartitionReassignments same replicas")
    yield alter(current + [12345], "AlterPartitionReassignments unknown broker")
    yield alter([], "AlterPartitionReassignments no broker")
    yield alter(current[:1] * 2, "AlterPartitionReassignments broker twice")
    yield alter(None, "AlterPartitionReassignments cancel none")
    yield alter(current, "AlterPartitionReassignments bad partition", partition=5)
    yield alter(current, "AlterPartitionReassignments unknown topic", suffix="missing")
    yield ctx.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, timeout_ms=10000, compare=True,
                   label="ListPartitionReassignments after", topics=[{"name": ctx.topic("t"), "partition_indexes": [0, 1]}])


@_sc(ApiKey.DESCRIBE_LOG_DIRS, topics=[_t("t")])
def describe_log_dirs(ctx: Context) -> ScenarioGen:
    """The log directory holding a topic with one batch."""
    yield produce(ctx, "t", batch(ctx.t0, 3))
    yield ctx.call(ApiKey.DESCRIBE_LOG_DIRS, topics=[{"topic": ctx.topic("t"), "partitions": [0]}],
                   view=_log_dirs_view)


def _log_dirs_view(tree: Any) -> Any:
    # total and usable bytes are the machine's disk, not the broker's
    return {**tree, "results": [{k: v for k, v in r.items() if k not in ("total_bytes", "usable_bytes")}
                                for r in tree["results"]]}


# -- cluster -----------------------------------------------------------------------------------
@_sc(ApiKey.DESCRIBE_CLUSTER)
def describe_cluster(ctx: Context) -> ScenarioGen:
    """The cluster's brokers and controller."""
    yield ctx.call(ApiKey.DESCRIBE_CLUSTER, include_cluster_authorized_operations=False, endpoint_type=1,
                   include_fenced_brokers=False)


@_sc(ApiKey.DESCRIBE_QUORUM)
def describe_quorum(ctx: Context) -> ScenarioGen:
    """The metadata quorum (``__cluster_metadata`` partition 0), whose offsets depend on the
    cluster's history: only the shape and error codes are meaningful."""
    yield ctx.call(ApiKey.DESCRIBE_QUORUM, topics=[{"topic_name": "__cluster_metadata",
                                                    "partitions": [{"partition_index": 0}]}],
                   view=_quorum_view)


@_sc(ApiKey.DESCRIBE_QUORUM)
def describe_quorum_unknown(ctx: Context) -> ScenarioGen:
    """A partition that is not the metadata partition, and the metadata partition asked for
    beside another: every partition UNKNOWN_TOPIC_OR_PARTITION."""
    yield ctx.call(ApiKey.DESCRIBE_QUORUM, topics=[{"topic_name": ctx.topic("t"),
                                                    "partitions": [{"partition_index": 0}]}])
    yield ctx.call(ApiKey.DESCRIBE_QUORUM, label="DescribeQuorum two partitions",
                   topics=[{"topic_name": "__cluster_metadata",
                            "partitions": [{"partition_index": 0}, {"partition_index": 1}]}])


def _quorum_view(tree: Any) -> Any:
    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()
                    if k not in ("log_end_offset", "high_watermark", "leader_epoch", "replica_directory_id")}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x
    return strip(tree)


# -- feature flags -----------------------------------------------------------------------------
UPGRADE, SAFE_DOWNGRADE = 1, 2


def _update(feature: str, level: int, upgrade_type: int = UPGRADE) -> Dict[str, Any]:
    return {"feature": feature, "max_version_level": level, "upgrade_type": upgrade_type}


@_sc(ApiKey.UPDATE_FEATURES, versions=range(1, 3))
def update_features_validate_only(ctx: Context) -> ScenarioGen:
    """Validate-only updates both brokers accept: group.version at its level, and a safe
    downgrade of it to 0 (nothing is written)."""
    yield ctx.call(ApiKey.UPDATE_FEATURES, timeout_ms=10000, validate_only=True,
                   feature_updates=[_update("group.version", 1)])
    yield ctx.call(ApiKey.UPDATE_FEATURES, timeout_ms=10000, validate_only=True,
                   label="UpdateFeatures safe downgrade", feature_updates=[_update("group.version", 0, SAFE_DOWNGRADE)])
    yield ctx.call(ApiKey.UPDATE_FEATURES, timeout_ms=10000, validate_only=True, label="UpdateFeatures none",
                   feature_updates=[])


@_sc(ApiKey.UPDATE_FEATURES)
def update_features_errors(ctx: Context) -> ScenarioGen:
    """Updates Kafka's controller refuses (INVALID_UPDATE_VERSION, nothing written): an unknown
    feature, a level beyond the supported range, a negative level, a downgrade asked as an
    upgrade, an unknown upgrade type, a failing update beside a valid one."""
    for label, updates in (("unknown feature", [_update("kproto.unknown.version", 1)]),
                           ("beyond supported", [_update("group.version", 2)]),
                           ("negative level", [_update("group.version", -1)]),
                           ("downgrade as upgrade", [_update("group.version", 0)]),
                           ("unknown upgrade type", [_update("group.version", 1, 0)]),
                           ("one bad of two", [_update("kproto.unknown.version", 1), _update("group.version", 1)])):
        yield ctx.call(ApiKey.UPDATE_FEATURES, timeout_ms=10000, validate_only=True,
                       label=f"UpdateFeatures {label}", feature_updates=updates)


# -- controllers -------------------------------------------------------------------------------
@_sc(ApiKey.UNREGISTER_CONTROLLER)
def unregister_controller_unknown(ctx: Context) -> ScenarioGen:
    """A controller id nobody registered: CONTROLLER_ID_NOT_REGISTERED (nothing written)."""
    yield ctx.call(ApiKey.UNREGISTER_CONTROLLER, controller_id=12345)


# -- ACLs (only with an authorizer on both sides) ----------------------------------------------
@_sc(ApiKey.DESCRIBE_ACLS, needs_authorizer=True)
def describe_acls(ctx: Context) -> ScenarioGen:
    """ACLs of a topic nobody has bound."""
    yield ctx.call(ApiKey.DESCRIBE_ACLS, resource_type_filter=2, resource_name_filter=ctx.topic("t"),
                   pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1, permission_type=1)


@_sc(ApiKey.CREATE_ACLS, needs_authorizer=True)
def create_acls(ctx: Context) -> ScenarioGen:
    """Allow a principal to read the run's topic, then describe and delete that binding."""
    binding = {"resource_type": 2, "resource_name": ctx.topic("t"), "resource_pattern_type": 3,
               "principal": "User:kproto-conformance", "host": "*", "operation": 3, "permission_type": 3}
    yield ctx.call(ApiKey.CREATE_ACLS, creations=[binding])
    yield ctx.call(ApiKey.DESCRIBE_ACLS, resource_type_filter=2, resource_name_filter=ctx.topic("t"),
                   pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1,
                   permission_type=1, compare=True, label="DescribeAcls after create")
    yield ctx.call(ApiKey.DELETE_ACLS, compare=True, label="DeleteAcls", filters=[
        {"resource_type_filter": 2, "resource_name_filter": ctx.topic("t"), "pattern_type_filter": 3,
         "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}])


# -- more admin and client APIs ----------------------------------------------------------------
@_sc(ApiKey.OFFSET_FOR_LEADER_EPOCH, topics=[_t("t")])
def offset_for_leader_epoch(ctx: Context) -> ScenarioGen:
    """The end offset of epoch 0, of an epoch in the future, and of a bad partition."""
    yield produce(ctx, "t", batch(ctx.t0, 3))

    def q(epoch: int, label: str, partition: int = 0) -> Any:
        return ctx.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, replica_id=-1, label=label, topics=[
            {"topic": ctx.topic("t"), "partitions": [
                {"partition": partition, "current_leader_epoch": -1, "leader_epoch": epoch}]}])
    yield q(0, "OffsetForLeaderEpoch")
    yield q(5, "OffsetForLeaderEpoch future epoch")
    yield q(0, "OffsetForLeaderEpoch bad partition", partition=6)


@_sc(ApiKey.CONSUMER_GROUP_DESCRIBE, topics=[_t("t")])
def consumer_group_describe(ctx: Context) -> ScenarioGen:
    """A KIP-848 group with one member; a classic group; an unknown group."""
    g = ctx.group()
    yield ctx.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, group_id=g, member_id="kproto-conformance-mem01",
                   member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                   subscribed_topic_names=[ctx.topic("t")], subscribed_topic_regex=None,
                   server_assignor=None, topic_partitions=[])
    classic = ctx.group("classic")
    yield from join_sync(ctx, classic)
    yield ctx.call(ApiKey.CONSUMER_GROUP_DESCRIBE, group_ids=[g, classic, ctx.group("none")],
                   include_authorized_operations=False)


@_sc(ApiKey.DESCRIBE_TOPIC_PARTITIONS, topics=[_t("t", 3), _t("u", 1)])
def describe_topic_partitions(ctx: Context) -> ScenarioGen:
    """A topic with three partitions, two at a time (a cursor), and an unknown topic; a limit
    ending exactly at a topic's end (the cursor at the next topic), a cursor past the last
    partition, an invalid name; errors refusing the whole request: a cursor naming a topic
    not asked for, a negative cursor partition."""
    t, u = ctx.topic("t"), ctx.topic("u")

    def describe(label: str, topics: List[str], limit: int, cursor: Optional[tuple] = None) -> Any:
        return ctx.call(ApiKey.DESCRIBE_TOPIC_PARTITIONS, label=label, response_partition_limit=limit,
                        cursor=None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]},
                        topics=[{"name": n} for n in topics])
    first = yield describe("DescribeTopicPartitions", [t, ctx.topic("missing")], 2)
    if first.next_cursor is not None:
        yield describe("DescribeTopicPartitions next", [t],  2,
                       (first.next_cursor.topic_name, first.next_cursor.partition_index))
    yield describe("DescribeTopicPartitions limit at topic end", [u, t], 3)
    yield describe("DescribeTopicPartitions cursor past end", [t, u], 0, (t, 7))
    yield describe("DescribeTopicPartitions invalid name", ["bad/name", u], 10)
    yield describe("DescribeTopicPartitions cursor not asked", [t], 10, (u, 0))
    yield describe("DescribeTopicPartitions negative cursor", [t], 10, (t, -1))


@_sc(ApiKey.LIST_CONFIG_RESOURCES, topics=[_t("t")])
def list_config_resources(ctx: Context) -> ScenarioGen:
    """Every config resource (the brokers, this run's topic: other runs' topics and groups with
    configs are left out of the comparison), topics only, and (v1) a type that is not listed."""
    def mine(tree: Any) -> Any:
        # keyed by name unless two types share one (a broker is BROKER and BROKER_LOGGER)
        res = tree["config_resources"]
        res = [r for r in (res.values() if isinstance(res, dict) else res)
               if r.get("resource_type") not in (2, 32) or r["resource_name"].startswith(ctx.prefix)]
        return {**tree, "config_resources": sorted(res, key=lambda r: (r.get("resource_type", 0), r["resource_name"]))}
    yield ctx.call(ApiKey.LIST_CONFIG_RESOURCES, resource_types=[], view=mine)
    if ctx.version >= 1:
        yield ctx.call(ApiKey.LIST_CONFIG_RESOURCES, resource_types=[2], view=mine,
                       label="ListConfigResources topics")
        yield ctx.call(ApiKey.LIST_CONFIG_RESOURCES, resource_types=[4, 99], view=mine,
                       label="ListConfigResources unknown type")


@_sc(ApiKey.LIST_PARTITION_REASSIGNMENTS, topics=[_t("t")])
def list_partition_reassignments(ctx: Context) -> ScenarioGen:
    """No reassignment in progress for the run's topic; an unknown partition and an unknown
    topic are left out of the answer."""
    yield ctx.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, timeout_ms=10000,
                   topics=[{"name": ctx.topic("t"), "partition_indexes": [0]}])
    yield ctx.call(ApiKey.LIST_PARTITION_REASSIGNMENTS, timeout_ms=10000, label="ListPartitionReassignments unknown",
                   topics=[{"name": ctx.topic("t"), "partition_indexes": [9]},
                           {"name": ctx.topic("missing"), "partition_indexes": [0]}])


@_sc(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def describe_user_scram_credentials(ctx: Context) -> ScenarioGen:
    """A user without SCRAM credentials."""
    yield ctx.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, users=[{"name": ctx.group("user")}])


@_sc(ApiKey.CREATE_DELEGATION_TOKEN)
def delegation_tokens(ctx: Context) -> ScenarioGen:
    """The four token APIs from a connection that may not ask for tokens (no authentication):
    each refused as Kafka refuses it, before it looks at whether tokens are enabled."""
    owner = f"User:{ctx.group('owner')}"
    yield ctx.call(ApiKey.CREATE_DELEGATION_TOKEN, owner_principal_type="User", owner_principal_name=ctx.group("owner"),
                   renewers=[{"principal_type": "User", "principal_name": ctx.group("renewer")}],
                   max_lifetime_ms=3_600_000)
    yield ctx.call(ApiKey.RENEW_DELEGATION_TOKEN, hmac=b"\x01" * 64, renew_period_ms=60_000)
    yield ctx.call(ApiKey.EXPIRE_DELEGATION_TOKEN, hmac=b"\x01" * 64, expiry_time_period_ms=-1)
    yield ctx.call(ApiKey.DESCRIBE_DELEGATION_TOKEN, label="DescribeDelegationToken of an owner",
                   owners=[{"principal_type": "User", "principal_name": owner.split(":", 1)[1]}])


@_sc(ApiKey.DESCRIBE_CLIENT_QUOTAS)
def describe_client_quotas(ctx: Context) -> ScenarioGen:
    """The quotas of a client id nobody has configured."""
    yield ctx.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, strict=False, components=[
        {"entity_type": "client-id", "match_type": 0, "match": ctx.group("client")}])


# -- client quotas -----------------------------------------------------------------------------
def _run_ip(ctx: Context) -> str:
    """An ip address of this run's own (ip entities are shared by every run)."""
    h = zlib.crc32(ctx.prefix.encode())
    return f"10.{h % 250 + 1}.{(h >> 8) % 250 + 1}.{(h >> 16) % 250 + 1}"


def _quota_view(ctx: Context) -> Any:
    """Entries in one order (Kafka answers them in its hash maps' order), each entity's parts and
    values by name; a describe's entries only those of this run (its names and ip)."""
    ip = _run_ip(ctx)

    def mine(entry: Any) -> bool:
        names = [e["entity_name"] for e in entry["entity"]]
        return any(n is not None and (n.startswith(ctx.prefix) or n == ip) for n in names)

    def view(tree: Any) -> Any:
        entries = tree.get("entries")
        if entries is None:
            return tree
        out = []
        for e in entries:
            e = {**e, "entity": sorted(e["entity"], key=lambda d: (d["entity_type"], d["entity_name"] or ""))}
            if "values" in e:
                e["values"] = sorted(e["values"], key=lambda v: v["key"])
            out.append(e)
        if "error_code" in tree:  # a describe: other runs' entities are not this run's answer
            out = [e for e in out if mine(e)]
        return {**tree, "entries": sorted(out, key=lambda e: repr(e["entity"]))}
    return view


def _ent(*pairs: Any) -> List[Dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in pairs]


def _op(key: str, value: float = 0.0, remove: bool = False) -> Dict[str, Any]:
    return {"key": key, "value": value, "remove": remove}


def _alter(ctx: Context, *entries: Any, validate_only: bool = False, label: str = "AlterClientQuotas",
           **kw: Any) -> Any:
    return ctx.call(ApiKey.ALTER_CLIENT_QUOTAS, validate_only=validate_only, label=label,
                    entries=[{"entity": e, "ops": o} for e, o in entries], view=_quota_view(ctx), **kw)


def _describe(ctx: Context, *components: Any, strict: bool = False, label: str = "DescribeClientQuotas",
              until: Optional[Dict[Any, Dict[str, float]]] = None, **kw: Any) -> Any:
    """``until``: asked again while this run's entities and values in the answer are not these
    (entity as (type, name) pairs -> values): Kafka's broker learns a change from its metadata
    log a moment after the controller answered."""
    ip = _run_ip(ctx)

    def pending(r: Any) -> bool:
        got = {tuple(sorted((d.entity_type, d.entity_name) for d in e.entity)): {v.key: v.value for v in e.values}
               for e in r.entries or ()}
        got = {e: v for e, v in got.items() if any(n is not None and (n.startswith(ctx.prefix) or n == ip)
                                                    for _, n in e)}
        return r.error_code == 0 and got != until
    return ctx.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, strict=strict, label=label, view=_quota_view(ctx),
                    retry=None if until is None else pending,
                    components=[{"entity_type": t, "match_type": m, "match": s} for t, m, s in components], **kw)


@_sc(ApiKey.ALTER_CLIENT_QUOTAS)
def alter_client_quotas(ctx: Context) -> ScenarioGen:
    """Quotas of a user, a user and client id, a user with the default client id and an ip
    set, one changed and one removed; validate_only on the default user (nothing changes);
    then every refusal: no entity, an unknown entity type, an empty name, ip with a user, an
    unknown key, a key of another kind of entity, a fraction for a byte rate, a zero, a key or
    an entity given twice, a host that does not resolve."""
    user, client, ip = ctx.group("user"), ctx.group("client"), _run_ip(ctx)
    yield _alter(ctx, (_ent(("user", user)), [_op("producer_byte_rate", 1024)]),
                 (_ent(("user", user), ("client-id", client)), [_op("consumer_byte_rate", 2048),
                                                                 _op("request_percentage", 12.5)]),
                 (_ent(("user", user), ("client-id", None)), [_op("controller_mutation_rate", 3.5)]),
                 (_ent(("ip", ip)), [_op("connection_creation_rate", 10)]))
    yield _alter(ctx, (_ent(("user", user)), [_op("producer_byte_rate", 4096), _op("consumer_byte_rate", 1, True)]),
                 (_ent(("ip", ip)), [_op("connection_creation_rate", 0, True)]), label="AlterClientQuotas change")
    yield _alter(ctx, (_ent(("user", None)), [_op("producer_byte_rate", 1)]), validate_only=True,
                 label="AlterClientQuotas validate only")
    yield _describe(ctx, ("user", 0, user), label="DescribeClientQuotas after", until={
        (("user", user),): {"producer_byte_rate": 4096.0},
        (("client-id", client), ("user", user)): {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
        (("client-id", None), ("user", user)): {"controller_mutation_rate": 3.5}})
    yield _describe(ctx, ("user", 1, None), strict=True, label="DescribeClientQuotas default user")
    for label, entry in [
        ("no entity", (_ent(), [_op("producer_byte_rate", 1)])),
        ("unknown type", (_ent(("group", user)), [_op("producer_byte_rate", 1)])),
        ("empty name", (_ent(("client-id", "")), [_op("producer_byte_rate", 1)])),
        ("ip with user", (_ent(("user", user), ("ip", ip)), [_op("producer_byte_rate", 1)])),
        ("unknown key", (_ent(("user", user)), [_op("nope", 1), _op("producer_byte_rate", 2)])),
        ("key of another kind", (_ent(("client-id", client)), [_op("connection_creation_rate", 1)])),
        ("fraction", (_ent(("user", user)), [_op("producer_byte_rate", 1.5)])),
        ("fraction of a connection rate", (_ent(("ip", None)), [_op("connection_creation_rate", 2.5)])),
        ("zero", (_ent(("user", user)), [_op("request_percentage", 0)])),
        ("negative", (_ent(("user", user)), [_op("producer_byte_rate", -5)])),
        ("key twice", (_ent(("user", user)), [_op("producer_byte_rate", 1), _op("producer_byte_rate", 2)])),
        ("unresolvable host", (_ent(("ip", "no such host")), [_op("connection_creation_rate", 1)])),
    ]:
        yield _alter(ctx, entry, label=f"AlterClientQuotas {label}")
    yield _alter(ctx, (_ent(("user", user)), [_op("producer_byte_rate", 7)]),
                 (_ent(("user", user)), [_op("consumer_byte_rate", 8)]), label="AlterClientQuotas entity twice")
    yield _describe(ctx, ("user", 0, user), strict=True, label="DescribeClientQuotas after refusals",
                    until={(("user", user),): {"producer_byte_rate": 7.0}})


@_sc(ApiKey.DESCRIBE_CLIENT_QUOTAS)
def describe_client_quotas_filters(ctx: Context) -> ScenarioGen:
    """Every match type over a run's own entities: exact, default, any specified name, strict
    and not; an ip; then every refused filter: an empty or unknown entity type, a type twice,
    exact without a name, default or specified with one, an unknown match type, ip with user."""
    user, client, ip = ctx.group("user"), ctx.group("client"), _run_ip(ctx)
    yield _alter(ctx, (_ent(("user", user)), [_op("producer_byte_rate", 1024)]),
                 (_ent(("user", user), ("client-id", client)), [_op("consumer_byte_rate", 2048)]),
                 (_ent(("user", user), ("client-id", None)), [_op("request_percentage", 50)]),
                 (_ent(("ip", ip)), [_op("connection_creation_rate", 5)]), compare=False)
    yield _describe(ctx, ("user", 0, user), until={
        (("user", user),): {"producer_byte_rate": 1024.0},
        (("client-id", client), ("user", user)): {"consumer_byte_rate": 2048.0},
        (("client-id", None), ("user", user)): {"request_percentage": 50.0}})
    yield _describe(ctx, ("user", 0, user), strict=True, label="DescribeClientQuotas strict")
    yield _describe(ctx, ("user", 0, user), ("client-id", 1, None), label="DescribeClientQuotas default client")
    yield _describe(ctx, ("user", 0, user), ("client-id", 2, None), label="DescribeClientQuotas any client")
    yield _describe(ctx, ("client-id", 0, client), label="DescribeClientQuotas client")
    yield _describe(ctx, ("client-id", 0, client), strict=True, label="DescribeClientQuotas client strict")
    yield _describe(ctx, ("ip", 0, ip), until={(("ip", ip),): {"connection_creation_rate": 5.0}},
                    label="DescribeClientQuotas ip")
    yield _describe(ctx, ("ip", 2, None), label="DescribeClientQuotas any ip")
    refused: List[Any] = [
        ("empty type", [("", 0, user)]),
        ("type twice", [("user", 0, user), ("user", 2, None)]),
        ("unknown type", [("group", 0, user)]),
        ("exact without name", [("user", 0, None)]),
        ("default with name", [("user", 1, user)]),
        ("specified with name", [("user", 2, user)]),
        ("unknown match type", [("user", 5, None)]),
        ("ip with user", [("user", 0, user), ("ip", 2, None)]),
    ]
    for label, comps in refused:
        yield _describe(ctx, *comps, label=f"DescribeClientQuotas {label}")
    yield _alter(ctx, *[(e, [_op(k, 0, True)]) for e, k in [
        (_ent(("user", user)), "producer_byte_rate"), (_ent(("user", user), ("client-id", client)), "consumer_byte_rate"),
        (_ent(("user", user), ("client-id", None)), "request_percentage"), (_ent(("ip", ip)), "connection_creation_rate")]],
        compare=False, label="AlterClientQuotas clean up")


# -- share groups (KIP-932) ----------------------------------------------------------------------
SHARE_MEMBER = "kproto-conformance-shr01"
#: How long a share fetch that expects records may wait: Kafka hands out records (and answers for
#: a share-partition it initializes) once its persister has answered, after a fetch of 0 ms
WAIT = 3000


def share_hb(ctx: Context, g: str, epoch: int, label: str, member: str = SHARE_MEMBER,
             topics: Optional[List[str]] = None, **kw: Any) -> Any:
    return ctx.call(ApiKey.SHARE_GROUP_HEARTBEAT, group_id=g, member_id=member, member_epoch=epoch,
                    rack_id=None, subscribed_topic_names=topics, label=label, **kw)


def share_join(ctx: Context, g: str, suffix: str = "t", member: str = SHARE_MEMBER,
               compare: Optional[bool] = False) -> ScenarioGen:
    """Join a share group and heartbeat until the topic's partitions are assigned (Kafka assigns
    them once their share-partition state is initialized, about a second later); returns the
    member epoch."""
    first = yield share_hb(ctx, g, 0, "ShareGroupHeartbeat join", member, [ctx.topic(suffix)], compare=compare,
                           retry=_coordinator_loading)
    last = yield share_hb(ctx, g, first.member_epoch, "ShareGroupHeartbeat assigned", member, compare=compare,
                          retry=lambda r: r.error_code in TRANSIENT_COORDINATOR_ERRORS or
                          (r.error_code == 0 and r.assignment is None))
    return last.member_epoch


def share_fetch(ctx: Context, g: str, epoch: int, label: str, suffix: str = "t", partitions: Any = (0,),
                acks: Optional[Dict[int, list]] = None, wait: int = 0, compare: Optional[bool] = None,
                **kw: Any) -> Any:
    acks = acks or {}
    return ctx.call(ApiKey.SHARE_FETCH, label=label, compare=compare, group_id=g, member_id=SHARE_MEMBER,
                    share_session_epoch=epoch, max_wait_ms=wait, min_bytes=1, max_bytes=MB, max_records=500,
                    batch_size=500, forgotten_topics_data=[], topics=[{"topic_id": ctx.topic_id(suffix), "partitions": [
                        {"partition_index": p, "partition_max_bytes": MB, "acknowledgement_batches": [
                            {"first_offset": a, "last_offset": z, "acknowledge_types": list(t)}
                            for a, z, t in acks.get(p, [])]} for p in sorted(set(partitions) | set(acks))]}], **kw)


@_sc(ApiKey.SHARE_GROUP_HEARTBEAT, topics=[_t("t", 2)])
def share_group_heartbeat(ctx: Context) -> ScenarioGen:
    """Join (epoch 2, nothing assigned until the partitions' state is initialized), the
    assignment, invalid requests, a greater epoch (fenced), an unknown member, leave twice."""
    g = ctx.group()
    yield share_hb(ctx, g, 0, "ShareGroupHeartbeat no member id", "", [ctx.topic("t")])
    yield share_hb(ctx, g, 0, "ShareGroupHeartbeat no subscription", topics=[])
    yield share_hb(ctx, g, 3, "ShareGroupHeartbeat unknown group")
    yield share_hb(ctx, g, -1, "ShareGroupHeartbeat leave unknown group")
    epoch = yield from share_join(ctx, g, compare=True)
    yield share_hb(ctx, g, epoch, "ShareGroupHeartbeat steady")
    yield share_hb(ctx, g, epoch + 5, "ShareGroupHeartbeat fenced epoch")
    yield share_hb(ctx, g, 3, "ShareGroupHeartbeat unknown member", "kproto-conformance-none")
    yield share_hb(ctx, g, -1, "ShareGroupHeartbeat leave")
    yield share_hb(ctx, g, -1, "ShareGroupHeartbeat leave again")


@_sc(ApiKey.SHARE_GROUP_DESCRIBE, topics=[_t("t", 2)])
def share_group_describe(ctx: Context) -> ScenarioGen:
    """A share group with one member and its assignment; with authorized operations; a classic
    group, an unknown group and the empty group id."""
    g = ctx.group()
    yield from share_join(ctx, g)
    classic = ctx.group("classic")
    yield from join_sync(ctx, classic)
    yield ctx.call(ApiKey.SHARE_GROUP_DESCRIBE, group_ids=[g, classic, ctx.group("none"), ""],
                   include_authorized_operations=False)
    yield ctx.call(ApiKey.SHARE_GROUP_DESCRIBE, group_ids=[g], include_authorized_operations=True,
                   label="ShareGroupDescribe authorized operations")


@_sc(ApiKey.SHARE_FETCH, topics=[_t("t")])
def share_fetch_acknowledge(ctx: Context) -> ScenarioGen:
    """A share session: opened (the share-partition initialized at the latest offset), records
    acquired, acknowledged in the next fetch (accept, release, reject: the released record is
    delivered again), an acknowledgement past the acquired records, a fetch with nothing left,
    a wrong session epoch, the session closed with a final acknowledgement, then gone."""
    g = ctx.group()
    yield from share_join(ctx, g)
    yield share_fetch(ctx, g, 0, "ShareFetch open session", wait=WAIT)
    yield produce(ctx, "t", batch(ctx.t0, 3))
    yield share_fetch(ctx, g, 1, "ShareFetch acquire", wait=WAIT)
    yield share_fetch(ctx, g, 2, "ShareFetch accept release reject", acks={0: [(0, 2, [1, 2, 3])]}, wait=WAIT)
    yield share_fetch(ctx, g, 3, "ShareFetch past acquired", acks={0: [(7, 7, [1])]})
    yield share_fetch(ctx, g, 4, "ShareFetch nothing left", acks={0: [(1, 1, [1])]}, wait=100)
    yield share_fetch(ctx, g, 9, "ShareFetch wrong epoch")
    yield share_fetch(ctx, g, 0, "ShareFetch acknowledgements on open", acks={0: [(0, 0, [1])]})
    yield share_fetch(ctx, g, -1, "ShareFetch close", partitions=())
    yield share_fetch(ctx, g, 1, "ShareFetch closed session")


@_sc(ApiKey.SHARE_ACKNOWLEDGE, topics=[_t("t")])
def share_acknowledge(ctx: Context) -> ScenarioGen:
    """ShareAcknowledge in a session: accept and reject what a fetch acquired, the same again
    (the records are no longer acquired), epoch 0 and a wrong epoch, close with -1."""
    g = ctx.group()
    yield from share_join(ctx, g)
    yield share_fetch(ctx, g, 0, "ShareFetch open session", compare=False, wait=WAIT)
    yield produce(ctx, "t", batch(ctx.t0, 2))
    yield share_fetch(ctx, g, 1, "ShareFetch acquire", compare=False, wait=WAIT)

    def ack(epoch: int, label: str, batches: list) -> Any:
        return ctx.call(ApiKey.SHARE_ACKNOWLEDGE, label=label, group_id=g, member_id=SHARE_MEMBER,
                        share_session_epoch=epoch, topics=[{"topic_id": ctx.topic_id("t"), "partitions": [
                            {"partition_index": 0, "acknowledgement_batches": [
                                {"first_offset": a, "last_offset": z, "acknowledge_types": list(t)}
                                for a, z, t in batches]}]}] if batches else [])
    yield ack(2, "ShareAcknowledge", [(0, 1, [1, 3])])
    yield ack(3, "ShareAcknowledge again", [(0, 0, [1])])
    yield ack(0, "ShareAcknowledge epoch 0", [])
    yield ack(9, "ShareAcknowledge wrong epoch", [])
    yield ack(-1, "ShareAcknowledge close", [])
    yield ack(5, "ShareAcknowledge closed session", [])


def _share_start_below(offset: int) -> Any:
    def below(resp: Any) -> bool:
        parts = [p for g in resp.groups for t in g.topics for p in t.partitions]
        return any(p.start_offset < offset for p in parts)
    return below


def _share_offsets_setup(ctx: Context, g: str) -> ScenarioGen:
    """A member that acquires three records, accepts the first and leaves (its last two are
    released)."""
    epoch = yield from share_join(ctx, g)
    yield share_fetch(ctx, g, 0, "ShareFetch open session", compare=False, wait=WAIT)
    yield produce(ctx, "t", batch(ctx.t0, 3))
    yield share_fetch(ctx, g, 1, "ShareFetch acquire", compare=False, wait=WAIT)
    yield share_fetch(ctx, g, 2, "ShareFetch accept", acks={0: [(0, 0, [1])]}, compare=False, wait=50)
    return epoch


@_sc(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, topics=[_t("t")])
def describe_share_group_offsets(ctx: Context) -> ScenarioGen:
    """A share group's start offset and lag after one record of three was accepted (all topics
    and by name); an unknown topic; an unknown group."""
    g = ctx.group()
    yield from _share_offsets_setup(ctx, g)
    # Kafka answers the fetch before its persister has the acknowledgement: the call is
    # repeated until the state is written (the start offset is -1 before)
    yield ctx.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, groups=[{"group_id": g, "topics": None}],
                   label="DescribeShareGroupOffsets all", retry=_share_start_below(0))
    yield ctx.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, groups=[{"group_id": g, "topics": [
        {"topic_name": ctx.topic("t"), "partitions": [0]}]}, {"group_id": ctx.group("none"), "topics": None}])


@_sc(ApiKey.ALTER_SHARE_GROUP_OFFSETS, topics=[_t("t")])
def alter_share_group_offsets(ctx: Context) -> ScenarioGen:
    """Alter a share group's start offset while it has a member (refused), after it left, for an
    unknown topic; an unknown group."""
    g = ctx.group()
    epoch = yield from _share_offsets_setup(ctx, g)

    def alter(group: str, label: str, topic: str = "t") -> Any:
        return ctx.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, label=label, group_id=group, topics=[
            {"topic_name": ctx.topic(topic), "partitions": [{"partition_index": 0, "start_offset": 2}]}])
    yield alter(g, "AlterShareGroupOffsets member")
    yield share_hb(ctx, g, -1, "ShareGroupHeartbeat leave", compare=False)
    yield alter(g, "AlterShareGroupOffsets")
    yield alter(g, "AlterShareGroupOffsets unknown topic", "missing")
    yield alter(ctx.group("none"), "AlterShareGroupOffsets unknown group")
    yield ctx.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, groups=[{"group_id": g, "topics": None}],
                   label="DescribeShareGroupOffsets after", compare=True)


@_sc(ApiKey.DELETE_SHARE_GROUP_OFFSETS, topics=[_t("t")])
def delete_share_group_offsets(ctx: Context) -> ScenarioGen:
    """Delete a share group's offsets while it has a member (refused), after it left, an
    unknown topic; an unknown group."""
    g = ctx.group()
    yield from _share_offsets_setup(ctx, g)

    def delete(group: str, label: str, *topics: str) -> Any:
        return ctx.call(ApiKey.DELETE_SHARE_GROUP_OFFSETS, label=label, group_id=group,
                        topics=[{"topic_name": ctx.topic(t)} for t in topics])
    yield delete(g, "DeleteShareGroupOffsets member", "t")
    yield share_hb(ctx, g, -1, "ShareGroupHeartbeat leave", compare=False)
    yield delete(g, "DeleteShareGroupOffsets", "t", "missing")
    yield delete(ctx.group("none"), "DeleteShareGroupOffsets unknown group", "t")
    yield ctx.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, groups=[{"group_id": g, "topics": None}],
                   label="DescribeShareGroupOffsets after", compare=True)


@_sc(ApiKey.LIST_GROUPS, topics=[_t("t")], versions=range(5, 6))
def list_groups_share(ctx: Context) -> ScenarioGen:
    """A share group by type filter (and not under another type), then empty after its member left."""
    g = ctx.group()
    yield from share_join(ctx, g)
    yield ctx.call(ApiKey.LIST_GROUPS, states_filter=[], types_filter=["share"], view=_own("groups", g),
                   label="ListGroups share")
    yield ctx.call(ApiKey.LIST_GROUPS, states_filter=[], types_filter=["consumer"], view=_own("groups", g),
                   label="ListGroups consumer")
    yield share_hb(ctx, g, -1, "ShareGroupHeartbeat leave", compare=False)
    yield ctx.call(ApiKey.LIST_GROUPS, states_filter=["Empty"], types_filter=[], view=_own("groups", g),
                   label="ListGroups empty")


@_sc(ApiKey.DELETE_GROUPS, topics=[_t("t")])
def delete_groups_share(ctx: Context) -> ScenarioGen:
    """DescribeGroups of a share group (not a classic group), DeleteGroups of it with a member
    (refused) and after the member left; ShareGroupDescribe once it is gone."""
    g = ctx.group()
    yield from share_join(ctx, g)
    yield ctx.call(ApiKey.DESCRIBE_GROUPS, groups=[g], include_authorized_operations=False,
                   label="DescribeGroups share group", compare=True)
    yield ctx.call(ApiKey.DELETE_GROUPS, groups_names=[g], label="DeleteGroups member")
    yield share_hb(ctx, g, -1, "ShareGroupHeartbeat leave", compare=False)
    yield ctx.call(ApiKey.DELETE_GROUPS, groups_names=[g])
    yield ctx.call(ApiKey.SHARE_GROUP_DESCRIBE, group_ids=[g], include_authorized_operations=False,
                   label="ShareGroupDescribe deleted", compare=True)


def _state_loading(resp: Any) -> bool:
    """A share coordinator still loading its partition of ``__share_group_state`` (a new node
    creates the topic at the first FindCoordinator for a share-partition key)."""
    return any(p.error_code in TRANSIENT_COORDINATOR_ERRORS for r in resp.results for p in r.partitions)


def _state_call(ctx: Context, api: int, g: str, label: str, compare: bool = True, **partition: Any) -> Any:
    return ctx.call(api, label=label, group_id=g, compare=compare, retry=_state_loading, topics=[
        {"topic_id": ctx.topic_id("t"), "partitions": [{"partition": 0, **partition}]}])


@_sc(ApiKey.INITIALIZE_SHARE_GROUP_STATE, topics=[_t("t")])
def share_group_state_rpcs(ctx: Context) -> ScenarioGen:
    """The persister's RPCs as a broker sends them to the share coordinator: initialize a
    share-partition's state, read it, write it (a stale state epoch, then a good write), its
    summary, delete it and read again."""
    g = ctx.group()
    key = f"{g}:{ctx.topic_id('t')}:0"
    yield ctx.call(ApiKey.FIND_COORDINATOR, key_type=2, key=key, coordinator_keys=[key], compare=False,
                   retry=lambda r: any(c.error_code in TRANSIENT_COORDINATOR_ERRORS for c in r.coordinators))
    I, R, W = ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE
    yield _state_call(ctx, R, g, "ReadShareGroupState uninitialized", leader_epoch=0)
    yield _state_call(ctx, I, g, "InitializeShareGroupState", state_epoch=1, start_offset=5)
    yield _state_call(ctx, R, g, "ReadShareGroupState", leader_epoch=0)
    batches = [{"first_offset": 6, "last_offset": 7, "delivery_state": 2, "delivery_count": 1}]
    yield _state_call(ctx, W, g, "WriteShareGroupState stale state epoch", state_epoch=0, leader_epoch=0,
                      start_offset=6, delivery_complete_count=2, state_batches=batches)
    yield _state_call(ctx, W, g, "WriteShareGroupState", state_epoch=1, leader_epoch=0,
                      start_offset=6, delivery_complete_count=2, state_batches=batches)
    yield _state_call(ctx, R, g, "ReadShareGroupState written", leader_epoch=0)
    yield _state_call(ctx, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, g, "ReadShareGroupStateSummary",
                      leader_epoch=0)
    yield _state_call(ctx, ApiKey.DELETE_SHARE_GROUP_STATE, g, "DeleteShareGroupState")
    yield _state_call(ctx, R, g, "ReadShareGroupState deleted", leader_epoch=0)


@_sc(ApiKey.INCREMENTAL_ALTER_CONFIGS)
def group_configs(ctx: Context) -> ScenarioGen:
    """A group's configs (resource type GROUP): a share setting set, a value out of range, an
    unknown name, the default group; then the group's configs described."""
    g = ctx.group()

    def alter(label: str, group: str, name: str, value: str) -> Any:
        return ctx.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, label=label, validate_only=False, resources=[
            {"resource_type": 32, "resource_name": group, "configs": [
                {"name": name, "config_operation": 0, "value": value}]}])
    yield alter("IncrementalAlterConfigs group", g, "share.auto.offset.reset", "earliest")
    yield alter("IncrementalAlterConfigs group bad value", g, "share.record.lock.duration.ms", "500")
    yield alter("IncrementalAlterConfigs group unknown config", g, "nope", "1")
    yield alter("IncrementalAlterConfigs default group", "", "share.auto.offset.reset", "earliest")
    # Kafka's brokers learn a group config from the metadata log: asked again until it is there
    yield ctx.call(ApiKey.DESCRIBE_CONFIGS, label="DescribeConfigs group", compare=True, include_synonyms=True,
                   include_documentation=False, resources=[
                       {"resource_type": 32, "resource_name": g, "configuration_keys": None}],
                   retry=lambda r: not any(c.name == "share.auto.offset.reset" and c.value == "earliest"
                                           for res in r.results for c in res.configs))


@_sc(ApiKey.SHARE_GROUP_HEARTBEAT, topics=[_t("t")])
def share_group_id_of_other_type(ctx: Context) -> ScenarioGen:
    """One id per group type: a consumer group's id in ShareGroupHeartbeat; a share group's id in
    ConsumerGroupHeartbeat, ConsumerGroupDescribe, JoinGroup and OffsetCommit."""
    share, consumer = ctx.group("share"), ctx.group("consumer")
    yield share_hb(ctx, share, 0, "ShareGroupHeartbeat join", topics=[ctx.topic("t")])

    def cg_hb(g: str, label: str) -> Any:
        return ctx.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, group_id=g, member_id="kproto-conformance-mem01",
                        member_epoch=0, instance_id=None, rack_id=None, rebalance_timeout_ms=30000,
                        subscribed_topic_names=[ctx.topic("t")], subscribed_topic_regex=None, server_assignor=None,
                        topic_partitions=[], label=label, compare=True)
    yield cg_hb(consumer, "ConsumerGroupHeartbeat consumer group")
    yield share_hb(ctx, consumer, 0, "ShareGroupHeartbeat consumer group's id", topics=[ctx.topic("t")])
    yield cg_hb(share, "ConsumerGroupHeartbeat share group's id")
    yield ctx.call(ApiKey.CONSUMER_GROUP_DESCRIBE, group_ids=[share], include_authorized_operations=False,
                   label="ConsumerGroupDescribe share group's id", compare=True)
    yield ctx.call(ApiKey.JOIN_GROUP, group_id=share, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                   member_id="", group_instance_id=None, protocol_type="consumer", reason=None,
                   protocols=[{"name": "range", "metadata": b""}], label="JoinGroup share group's id",
                   compare=True)
    yield _commit(ctx, share, -1, "", 1, "OffsetCommit share group's id", compare=True)
