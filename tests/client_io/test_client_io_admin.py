"""kproto.client.admin against real peers (checked through librdkafka's own admin and consumer),
through a scripted fake broker for what the peers do not implement, and the admin CLI."""
from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import pytest

import kproto
from kproto.cli.main import main
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.client.protocol import BrokerError, NoCommonVersionError
from kproto.client.consumer import Consumer
from kproto.client.consumer_protocol import encode_assignment
from kproto.client.producer import Producer
from kproto.errors import DecodeError

from client_io_fakebroker import FakeBroker, all_versions, metadata_response
from test_client_io_interop import PARTITIONS, cluster_for, consume_all, created_topic, new_topic, run


def ck_admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def ck_consumer(peer, group: str):
    from confluent_kafka import Consumer as CKConsumer

    return CKConsumer({"bootstrap.servers": peer.bootstrap, "group.id": group, "enable.auto.commit": False})


# -- real peers --------------------------------------------------------------------------------
def test_topics_and_configs_on_tansu(tansu):
    """tansu implements the topic and config APIs: what kproto creates, alters and deletes is
    what librdkafka's AdminClient then sees."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    a, b = new_topic("adm-a"), new_topic("adm-b")

    async def create():
        async with await cluster_for(tansu) as cluster:
            admin = Admin(cluster)
            await admin.create_topics({a: 3, b: 1}, configs={a: {"retention.ms": "123456"}})
            with pytest.raises(BrokerError) as e:
                await admin.create_topics({a: 3})
            assert e.value.name == "TOPIC_ALREADY_EXISTS"
            await admin.create_topics({a: 3}, exist_ok=True)
            await cluster.wait_for_leaders([a, b])
            described = await admin.describe_topics([a, b])
            assert sorted(described[a].partitions) == [0, 1, 2] and sorted(described[b].partitions) == [0]
            with pytest.raises(BrokerError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await admin.describe_topics([new_topic("missing")])
            return await admin.list_topics()

    names = run(create())
    assert {a, b} <= set(names)
    assert {a, b} <= set(ck_admin(tansu.bootstrap).list_topics(timeout=10).topics)

    ck = ck_admin(tansu.bootstrap)

    def ck_configs(topic):
        fut = ck.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
        return {k: v.value for k, v in list(fut.values())[0].result(10).items()}

    async def configs(changes=None):
        async with await cluster_for(tansu) as cluster:
            admin = Admin(cluster)
            if changes:
                await admin.alter_configs({("topic", a): changes})
            full = (await admin.describe_configs([("topic", a)]))[("topic", a)]
            picked = (await admin.describe_configs([("topic", a)], keys=["retention.ms"]))[("topic", a)]
            return {k: e.value for k, e in full.items()}, {k: e.value for k, e in picked.items()}

    full, picked = run(configs())
    assert full["retention.ms"] == "123456" and picked == {"retention.ms": "123456"}
    assert ck_configs(a) == full
    full, _ = run(configs({"retention.ms": "999", "cleanup.policy": "compact"}))
    assert full["retention.ms"] == "999" and full["cleanup.policy"] == "compact"
    assert ck_configs(a) == full
    full, picked = run(configs({"retention.ms": None}))
    assert "retention.ms" not in full and picked == {} and full["cleanup.policy"] == "compact"
    assert ck_configs(a) == full

    async def delete():
        async with await cluster_for(tansu) as cluster:
            admin = Admin(cluster)
            await admin.delete_topics([b])
            with pytest.raises(BrokerError, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await admin.delete_topics([b])
            await admin.delete_topics([b], missing_ok=True)
            return await admin.list_topics()

    names = run(delete())
    assert a in names and b not in names
    assert b not in ck_admin(tansu.bootstrap).list_topics(timeout=10).topics


def test_admin_apis_the_mock_lacks_fail_clearly(rdkafka_mock):
    async def go():
        async with await cluster_for(rdkafka_mock) as cluster:
            admin = Admin(cluster)
            with pytest.raises(NoCommonVersionError, match="API key 19"):
                await admin.create_topics({new_topic("x"): 1})
            with pytest.raises(NoCommonVersionError, match="API key 16"):
                await admin.list_groups()
            with pytest.raises(NoCommonVersionError, match="API key 32"):
                await admin.describe_configs([("topic", "x")])

    run(go())


@pytest.mark.apache
def test_list_offsets_agree_with_librdkafka(peer):
    from confluent_kafka import TopicPartition as CKTopicPartition

    topic = created_topic(peer, "adm-offsets")
    base = 1_700_000_000_000

    async def go():
        async with await cluster_for(peer) as cluster:
            producer = await Producer(cluster).start()
            for i in range(12):
                await producer.send(topic, b"v%d" % i, partition=i % 2, timestamp_ms=base + i * 1000)
            await producer.close()
            admin = Admin(cluster)
            tps = [(topic, p) for p in range(PARTITIONS)]
            return {spec: await admin.list_offsets(tps, spec) for spec in ("earliest", "latest", base + 5000)}

    ours = run(go())
    ck = ck_consumer(peer, "unused-" + topic)
    try:
        for p in range(PARTITIONS):
            low, high = ck.get_watermark_offsets(CKTopicPartition(topic, p), timeout=10)
            assert (ours["earliest"][(topic, p)], ours["latest"][(topic, p)]) == (low, high)
        at = ck.offsets_for_times([CKTopicPartition(topic, p, base + 5000) for p in range(PARTITIONS)], timeout=10)
        assert {(topic, tp.partition): tp.offset for tp in at} == ours[base + 5000]
    finally:
        ck.close()
    assert ours["latest"][(topic, 2)] == ours["earliest"][(topic, 2)] == 0
    assert ours["latest"][(topic, 0)] > 0


@pytest.mark.apache
def test_group_offsets_agree_with_librdkafka(peer):
    """OffsetFetch/OffsetCommit for a group: what kproto's consumer commits, librdkafka reads;
    what the admin writes for an empty group, librdkafka reads too."""
    from confluent_kafka import TopicPartition as CKTopicPartition

    topic = created_topic(peer, "adm-groups")
    group = "adm-" + topic

    def ck_committed(group=group):
        ck = ck_consumer(peer, group)
        try:
            got = ck.committed([CKTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
            return {(topic, tp.partition): tp.offset for tp in got if tp.offset >= 0}
        finally:
            ck.close()

    async def consume():
        async with await cluster_for(peer) as cluster:
            producer = await Producer(cluster).start()
            for i in range(8):
                await producer.send(topic, b"v%d" % i, partition=i % 3)
            await producer.close()
            consumer = await Consumer(cluster, [topic], group_id=group, auto_offset_reset="earliest",
                                      enable_auto_commit=False).start()
            got = await consume_all(consumer, 8)
            await consumer.commit()
            admin = Admin(cluster)
            if peer.name in ("tansu", "apache"):
                everything = await admin.list_group_offsets(group)
            else:
                # the mock answers an all-partitions OffsetFetch with a null topics array,
                # which the schema does not allow
                with pytest.raises(DecodeError, match="non-nullable field Topics was serialized as null"):
                    await admin.list_group_offsets(group)
                everything = await admin.list_group_offsets(group, [(topic, p) for p in range(PARTITIONS)])
            named = await admin.list_group_offsets(group, [(topic, 0), (topic, 3)])
            never = await admin.list_group_offsets("never-" + group, [(topic, 0)])
            live = (await admin.describe_groups([group]))[group] if peer.name in ("tansu", "apache") else None
            await consumer.close()
            return got, everything, named, never, live

    got, everything, named, never, live = run(consume())
    assert len(got) == 8
    committed = ck_committed()
    assert everything == committed and len(committed) == PARTITIONS  # the consumer commits every position
    assert named == {(topic, 0): committed[(topic, 0)], (topic, 3): 0} and committed[(topic, 0)] == 3
    assert never == {(topic, 0): -1}
    if live is not None:
        assert live.state == "Stable" and live.protocol_type == "consumer" and len(live.members) == 1

    # librdkafka's mock keeps the members that left and refuses a member-less commit to that
    # group (UNKNOWN_MEMBER_ID); a group without a past takes it
    reset_group = group if peer.name in ("tansu", "apache") else "fresh-" + group

    async def reset():
        async with await cluster_for(peer) as cluster:
            admin = Admin(cluster)
            await admin.alter_group_offsets(reset_group, {(topic, 0): 1, (topic, 1): 2})
            return await admin.list_group_offsets(reset_group, [(topic, 0), (topic, 1)])

    assert run(reset()) == {(topic, 0): 1, (topic, 1): 2}
    assert {tp: off for tp, off in ck_committed(reset_group).items() if tp[1] < 2} == {(topic, 0): 1, (topic, 1): 2}

    if peer.name not in ("tansu", "apache"):
        return  # the mock has no ListGroups/DescribeGroups/DeleteGroups

    async def groups():
        async with await cluster_for(peer) as cluster:
            admin = Admin(cluster)
            before = [g.group_id for g in await admin.list_groups()]
            described = (await admin.describe_groups([group]))[group]
            await admin.delete_groups([group])
            after = [g.group_id for g in await admin.list_groups()]
            return before, described, after

    before, described, after = run(groups())
    assert group in before and group not in after
    assert described.state == "Empty" and described.members == []
    assert ck_committed() == {}


# -- fake broker: what the peers do not implement ------------------------------------------------
class Scripted:
    """A handler answering Metadata (one topic, node 1 leads everything) plus scripted APIs."""

    def __init__(self, topic: str = "t", partitions: int = 2, **answers):
        self.topic, self.partitions, self.answers = topic, partitions, answers
        self.port = 0

    def __call__(self, header, body):
        key = header.request_api_key
        if key == 3:
            return metadata_response(self.port, {self.topic: (kproto.Uuid.ZERO, self.partitions)})
        answer = self.answers.get(kproto.request(key).name)
        return answer(body, header.request_api_version) if answer else NotImplemented


def admin_run(handler, test, versions=None):
    async def go():
        async with FakeBroker(handler, versions=versions) as fb:
            handler.port = fb.port
            async with Cluster(f"127.0.0.1:{fb.port}") as cluster:
                return await test(Admin(cluster), fb)

    return asyncio.run(asyncio.wait_for(go(), 30))


def test_create_partitions_and_errors_with_messages():
    cls = kproto.response(37).cls

    def create_partitions(body, version):
        return cls(results=[cls.CreatePartitionsTopicResult(
            name=t.name, error_code=37 if t.count < 2 else 0,
            error_message="Topic currently has 2 partitions" if t.count < 2 else None) for t in body.topics])

    async def test(admin, fb):
        await admin.create_partitions({"t": 4}, validate_only=True)
        with pytest.raises(BrokerError, match=r"CreatePartitions\(t\): INVALID_PARTITIONS \[37\] \(Topic currently"):
            await admin.create_partitions({"t": 1})
        return [b for h, b in fb.requests if h.request_api_key == 37]

    sent = admin_run(Scripted(CreatePartitionsRequest=create_partitions), test)
    assert [(t.name, t.count, t.assignments) for b in sent for t in b.topics] == [("t", 4, None), ("t", 1, None)]
    assert sent[0].validate_only and not sent[1].validate_only


@pytest.mark.parametrize("top", [5, 6])
def test_delete_topics_request_form_by_version(top):
    cls = kproto.response(20).cls

    def delete_topics(body, version):
        names = [t.name for t in body.topics] if version >= 6 else list(body.topic_names)
        return cls(responses=[cls.DeletableTopicResult(name=n, error_code=0) for n in names])

    async def test(admin, fb):
        await admin.delete_topics(["a", "b"])
        return [(h.request_api_version, b) for h, b in fb.requests if h.request_api_key == 20]

    versions = all_versions() | {20: (0, top)}
    [(version, body)] = admin_run(Scripted(DeleteTopicsRequest=delete_topics), test, versions)
    assert version == top
    assert ([t.name for t in body.topics] if top >= 6 else body.topic_names) == ["a", "b"]


def test_describe_configs_v0_defaults_and_key_filter():
    cls = kproto.response(32).cls

    def describe(body, version):
        return cls(results=[cls.DescribeConfigsResult(
            resource_type=r.resource_type, resource_name=r.resource_name, configs=[
                cls.DescribeConfigsResourceResult(name="retention.ms", value="1", is_default=False),
                cls.DescribeConfigsResourceResult(name="segment.bytes", value="1073741824", is_default=True),
                cls.DescribeConfigsResourceResult(name="ssl.key", value=None, read_only=True, is_sensitive=True),
            ]) for r in body.resources])

    async def test(admin, fb):
        full = await admin.describe_configs([("topic", "t"), ("broker", "1")])
        picked = await admin.describe_configs([("topic", "t"), ("topic", "u")], keys=["segment.bytes"])
        with pytest.raises(ValueError, match="resource type"):
            await admin.describe_configs([("cluster", "x")])
        return full, picked, [b for h, b in fb.requests if h.request_api_key == 32]

    full, picked, sent = admin_run(Scripted(DescribeConfigsRequest=describe), test, all_versions() | {32: (0, 0)})
    topic = full[("topic", "t")]
    assert not topic["retention.ms"].is_default and topic["segment.bytes"].is_default
    assert topic["segment.bytes"].source_name == "default" and topic["retention.ms"].source_name == "unknown"
    assert topic["ssl.key"].sensitive and topic["ssl.key"].read_only and topic["ssl.key"].value is None
    assert list(picked[("topic", "t")]) == list(picked[("topic", "u")]) == ["segment.bytes"]
    # one request per broker asked: broker 1's own configs apart, the topics together
    assert [[(r.resource_type, r.resource_name, r.configuration_keys) for r in b.resources] for b in sent] == \
        [[(2, "t", None)], [(4, "1", None)], [(2, "t", None), (2, "u", None)]]


def test_alter_configs_sets_and_deletes():
    cls = kproto.response(44).cls

    def alter(body, version):
        return cls(responses=[cls.AlterConfigsResourceResponse(
            resource_type=r.resource_type, resource_name=r.resource_name,
            error_code=40 if r.resource_name == "bad" else 0, error_message="Invalid config" if r.resource_name == "bad" else None)
            for r in body.resources])

    async def test(admin, fb):
        await admin.alter_configs({("topic", "t"): {"retention.ms": "5", "cleanup.policy": None}})
        with pytest.raises(BrokerError, match="INVALID_CONFIG"):
            await admin.alter_configs({("topic", "bad"): {"x": "y"}})
        return [b for h, b in fb.requests if h.request_api_key == 44][0]

    body = admin_run(Scripted(IncrementalAlterConfigsRequest=alter), test)
    [res] = body.resources
    assert [(c.name, c.config_operation, c.value) for c in res.configs] == [
        ("retention.ms", 0, "5"), ("cleanup.policy", 1, None)]


def test_list_offsets_specs_and_max_timestamp_version():
    cls = kproto.response(2).cls

    def list_offsets(body, version):
        return cls(topics=[cls.ListOffsetsTopicResponse(name=t.name, partitions=[
            cls.ListOffsetsPartitionResponse(partition_index=p.partition_index, offset=100 + p.timestamp, timestamp=-1)
            for p in t.partitions]) for t in body.topics])

    async def test(admin, fb):
        out = {}
        for spec in ("earliest", "latest", "max_timestamp", 7):
            out[spec] = await admin.list_offsets([("t", 1)], spec)
        with pytest.raises(ValueError):
            await admin.list_offsets([("t", 1)], "newest")
        with pytest.raises(ValueError):
            await admin.list_offsets([("t", 1)], -5)
        with pytest.raises(BrokerError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await admin.list_offsets([("t", 9)])
        return out, [(h.request_api_version, b) for h, b in fb.requests if h.request_api_key == 2]

    out, sent = admin_run(Scripted(ListOffsetsRequest=list_offsets), test)
    assert out == {"earliest": {("t", 1): 98}, "latest": {("t", 1): 99}, "max_timestamp": {("t", 1): 97},
                   7: {("t", 1): 107}}
    assert [b.topics[0].partitions[0].timestamp for _, b in sent] == [-2, -1, -3, 7]

    async def capped(admin, fb):
        with pytest.raises(NoCommonVersionError):
            await admin.list_offsets([("t", 0)], "max_timestamp")
        return await admin.list_offsets([("t", 0)], "earliest", isolation="read_committed")

    got = admin_run(Scripted(ListOffsetsRequest=list_offsets), capped, all_versions() | {2: (0, 6)})
    assert got == {("t", 0): 98}


def test_delete_records_goes_to_leaders():
    cls = kproto.response(21).cls

    def delete_records(body, version):
        return cls(topics=[cls.DeleteRecordsTopicResult(name=t.name, partitions=[
            cls.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                             low_watermark=50 if p.offset == -1 else p.offset)
            for p in t.partitions]) for t in body.topics])

    async def test(admin, fb):
        return await admin.delete_records({("t", 0): 10, ("t", 1): -1})

    assert admin_run(Scripted(DeleteRecordsRequest=delete_records), test) == {("t", 0): 10, ("t", 1): 50}


T_ID = kproto.Uuid(bytes(range(16)))


def consumer_group_describe(body, version):
    """Kafka's answer: a consumer-protocol group "g3" (KIP-848) is described; any other group is
    GROUP_ID_NOT_FOUND ("not a consumer group"), after which the admin asks DescribeGroups."""
    cd = kproto.response(69).cls

    def parts(ps):
        return cd.Assignment(topic_partitions=[cd.TopicPartitions(topic_id=T_ID, topic_name="t", partitions=ps)])

    return cd(groups=[cd.DescribedGroup(
        group_id=g, group_state="Reconciling", group_epoch=7, assignment_epoch=7, assignor_name="uniform",
        members=[cd.Member(member_id="m-a", client_id="ca", client_host="/127.0.0.1", member_epoch=7,
                           subscribed_topic_names=["t"], assignment=parts([0]), target_assignment=parts([0])),
                 cd.Member(member_id="m-b", client_id="cb", client_host="/127.0.0.1", member_epoch=6,
                           instance_id="host-b", subscribed_topic_names=[], subscribed_topic_regex="^t$",
                           assignment=parts([1, 2]), target_assignment=parts([1]))])
        if g == "g3" else cd.DescribedGroup(group_id=g, error_code=69, error_message=f"Group {g} is not a consumer group.")
        for g in body.group_ids])


def test_groups_listing_and_consumer_assignments():
    lg, dg, dl = kproto.response(16).cls, kproto.response(15).cls, kproto.response(42).cls
    assignment = encode_assignment([("t", 0), ("t", 1)])

    def list_groups(body, version):
        return lg(groups=[lg.ListedGroup(group_id="g2", protocol_type="consumer", group_state="Empty",
                                         group_type="classic"),
                          lg.ListedGroup(group_id="g1", protocol_type="connect", group_state="Stable",
                                         group_type="classic"),
                          lg.ListedGroup(group_id="g3", protocol_type="consumer", group_state="Reconciling",
                                         group_type="consumer")])

    def describe_groups(body, version):
        return dg(groups=[dg.DescribedGroup(group_id=g, group_state="Stable", protocol_type="consumer",
                                            protocol_data="range", members=[dg.DescribedGroupMember(
                                                member_id="m1", client_id="c1", client_host="/127.0.0.1",
                                                member_assignment=assignment)]) if g == "g2" else
                          dg.DescribedGroup(group_id=g, error_code=69) for g in body.groups])

    def delete_groups(body, version):
        assert version == 3      # the broker's top (kproto's Scripted broker advertises the schemas')
        return dl(results=[dl.DeletableGroupResult(group_id=g, error_code=68 if g == "busy" else 0,
                                                   error_message="The group is not empty." if g == "busy" else None)
                           for g in body.groups_names])

    def find_coordinator(body, version):
        fc = kproto.response(10).cls
        if version < 4:
            return fc(node_id=1, host="127.0.0.1", port=handler.port)
        return fc(coordinators=[fc.Coordinator(key=k, node_id=1, host="127.0.0.1", port=handler.port)
                                for k in body.coordinator_keys])

    handler = Scripted(ListGroupsRequest=list_groups, DescribeGroupsRequest=describe_groups,
                       DeleteGroupsRequest=delete_groups, FindCoordinatorRequest=find_coordinator,
                       ConsumerGroupDescribeRequest=consumer_group_describe)

    async def test(admin, fb):
        listed = await admin.list_groups()
        described = await admin.describe_groups(["g2", "g3"])
        with pytest.raises(BrokerError, match="GROUP_ID_NOT_FOUND"):
            await admin.describe_groups(["gone"])
        await admin.delete_groups(["g2"])
        with pytest.raises(BrokerError, match=r"NON_EMPTY_GROUP \[68\] \(The group is not empty.\)"):
            await admin.delete_groups(["busy"])
        return listed, described

    listed, described = admin_run(handler, test)
    assert [(g.group_id, g.protocol_type, g.state, g.type) for g in listed] == [
        ("g1", "connect", "Stable", "classic"), ("g2", "consumer", "Empty", "classic"),
        ("g3", "consumer", "Reconciling", "consumer")]
    g = described["g2"]
    assert (g.type, g.state, g.protocol, g.members[0].client_id) == ("classic", "Stable", "range", "c1")
    assert g.members[0].assignment == [("t", 0), ("t", 1)]
    c = described["g3"]   # a KIP-848 group: ConsumerGroupDescribe
    assert (c.type, c.state, c.protocol, c.group_epoch, c.assignment_epoch) == ("consumer", "Reconciling", "uniform", 7, 7)
    a, b = c.members
    assert (a.member_epoch, a.subscribed_topics, a.assignment, a.target_assignment) == (7, ["t"], [("t", 0)], [("t", 0)])
    assert (b.group_instance_id, b.subscribed_topic_regex, b.assignment, b.target_assignment) == \
        ("host-b", "^t$", [("t", 1), ("t", 2)], [("t", 1)])


def test_groups_describe_cli_shows_both_protocols(capsys):
    of, lo = kproto.response(9).cls, kproto.response(2).cls
    port: list = []

    def handler(header, body):
        key, version = header.request_api_key, header.request_api_version
        if key == 3:
            return metadata_response(port[0], {"t": (T_ID, 3)})
        if key == 10:
            fc = kproto.response(10).cls
            return fc(coordinators=[fc.Coordinator(key=k, node_id=1, host="127.0.0.1", port=port[0])
                                    for k in body.coordinator_keys])
        if key == 69:
            return consumer_group_describe(body, version)
        if key == 16 and version < 5:
            raise AssertionError("ListGroups v5 is what names the group type")
        if key == 16:  # ListGroups v5: the type of each group
            lg = kproto.response(16).cls
            return lg(groups=[lg.ListedGroup(group_id=g, protocol_type="consumer", group_type=t)
                              for g, t in (("g3", "consumer"), ("g-classic", "classic"))])
        if key == 15:
            dg = kproto.response(15).cls
            return dg(groups=[dg.DescribedGroup(group_id=g, group_state="Empty", protocol_type="consumer")
                              for g in body.groups])
        if key == 9:
            return of(groups=[of.OffsetFetchResponseGroup(group_id=g.group_id, topics=[
                of.OffsetFetchResponseTopics(name="t", partitions=[
                    of.OffsetFetchResponsePartitions(partition_index=p, committed_offset=5) for p in range(3)])])
                for g in body.groups])
        if key == 2:
            return lo(topics=[lo.ListOffsetsTopicResponse(name=t.name, partitions=[
                lo.ListOffsetsPartitionResponse(partition_index=p.partition_index, offset=9)
                for p in t.partitions]) for t in body.topics])
        return NotImplemented

    # with ListGroups v5 (the group's type decides) and without it (ConsumerGroupDescribe first,
    # DescribeGroups for what it answers GROUP_ID_NOT_FOUND, as Kafka's admin reads it)
    for versions in ({}, {16: (0, 4)}):
        check_describe_cli(capsys, handler, versions, port)


def check_describe_cli(capsys, handler, versions, port):
    port.clear()
    with threaded_broker(handler, versions) as p:
        port.append(p)
        b = ["--bootstrap", f"127.0.0.1:{p}"]
        code, out, _ = cli(capsys, "groups", "describe", "g3", *b)
        assert code == 0
        assert "group g3 type consumer state Reconciling assignor uniform epoch 7 assignment epoch 7 members 2" in out
        assert "member m-a client ca host /127.0.0.1 epoch 7 assigned t-0\n" in out
        assert "member m-b client cb host /127.0.0.1 epoch 6 assigned t-1,t-2 target t-1\n" in out
        code, out, _ = cli(capsys, "groups", "describe", "g3", "--json", *b)
        doc = json.loads(out)
        assert (doc["type"], doc["group_epoch"], doc["members"][1]["subscribed_topic_regex"]) == ("consumer", 7, "^t$")
        assert [(o["partition"], o["lag"], o["member"]) for o in doc["offsets"]] == [(0, 4, "m-a"), (1, 4, "m-b"), (2, 4, "m-b")]
        code, out, _ = cli(capsys, "groups", "describe", "g-classic", "--json", *b)
        assert json.loads(out)["type"] == "classic" and json.loads(out)["state"] == "Empty"


def test_create_topics_arguments_checked():
    async def test(admin, fb):
        with pytest.raises(ValueError, match="configs for topics not being created"):
            await admin.create_topics({"a": 1}, configs={"b": {"x": "y"}})
        return [h for h, _ in fb.requests if h.request_api_key == 19]

    assert admin_run(Scripted(), test) == []


# -- CLI -----------------------------------------------------------------------------------------
def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_admin_cli_on_tansu(tansu, capsys):
    b = ["--bootstrap", tansu.bootstrap]
    topic = new_topic("cli-adm")
    group = "g-" + topic
    assert cli(capsys, "topics", "create", topic, "--partitions", "2", "--config", "retention.ms=777", *b)[0] == 0
    code, out, _ = cli(capsys, "topics", "list", "--json", *b)
    assert code == 0 and topic in json.loads(out)
    code, out, _ = cli(capsys, "topics", "describe", topic, "--all-configs", "--json", *b)
    [doc] = json.loads(out)
    assert [p["partition"] for p in doc["partitions"]] == [0, 1] and doc["configs"]["retention.ms"] == "777"
    code, _, err = cli(capsys, "topics", "create", topic, *b)
    assert code == 1 and "TOPIC_ALREADY_EXISTS" in err
    assert cli(capsys, "topics", "create", topic, "--if-not-exists", *b)[0] == 0

    assert cli(capsys, "produce", "--topic", topic, "--partition", "1", *b, "x", "y", "z")[0] == 0
    code, out, _ = cli(capsys, "offsets", "--topic", topic, "--time", "earliest", "--json", *b)
    assert [(o["partition"], o["offset"]) for o in json.loads(out)] == [(0, 0), (1, 0)]
    code, out, _ = cli(capsys, "consume", "--topic", topic, "--group", group, "--from-beginning",
                       "--idle-timeout", "1", *b)
    assert out.split() == ["x", "y", "z"]
    code, out, _ = cli(capsys, "groups", "list", *b)
    assert code == 0 and group in out
    code, out, _ = cli(capsys, "groups", "describe", group, "--json", *b)
    doc = json.loads(out)
    assert doc["state"] == "Empty" and {(o["partition"], o["committed"]) for o in doc["offsets"]} >= {(1, 3)}
    code, out, _ = cli(capsys, "groups", "reset", group, "--topic", topic, "--to", "earliest", *b)
    assert code == 0 and out.split("\n")[:2] == [f"{topic} 0 0", f"{topic} 1 0"]
    code, out, _ = cli(capsys, "groups", "describe", group, "--json", *b)
    assert {o["committed"] for o in json.loads(out)["offsets"]} == {0}

    code, out, _ = cli(capsys, "configs", "--topic", topic, "--set", "cleanup.policy=compact", "--all", "--json", *b)
    assert code == 0 and {"name": "cleanup.policy", "value": "compact"}.items() <= \
        next(c for c in json.loads(out) if c["name"] == "cleanup.policy").items()
    assert cli(capsys, "groups", "delete", group, *b)[0] == 0
    assert cli(capsys, "topics", "delete", topic, *b)[0] == 0
    code, _, err = cli(capsys, "topics", "delete", topic, *b)
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    assert cli(capsys, "topics", "delete", topic, "--if-exists", *b)[0] == 0
    code, _, err = cli(capsys, "offsets", "--topic", topic, "--time", "soon", *b)
    assert code == 2 and err.startswith("kproto offsets: expected earliest")


def test_admin_cli_reports_unsupported_apis(rdkafka_mock, capsys):
    code, _, err = cli(capsys, "topics", "create", new_topic("x"), "--bootstrap", rdkafka_mock.bootstrap)
    assert code == 1 and "CREATE_TOPICS (API key 19): broker supports none, kproto's client 0-7" in err


@contextlib.contextmanager
def threaded_broker(handler, versions):
    """A FakeBroker on its own thread and event loop (for synchronous clients); yields its port."""
    ready, stop, port = threading.Event(), threading.Event(), []

    def serve():
        async def main():
            async with FakeBroker(handler, versions=all_versions() | versions) as fb:
                port.append(fb.port)
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.02)
        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield port[0]
    finally:
        stop.set()
        thread.join(10)


ACL_V2 = {29: (0, 2), 30: (0, 2), 31: (0, 2)}  # what librdkafka 2.x sends: v2


class AclBroker:
    """Scripted ACL APIs over a stored list of bindings (wire codes); logs each request's v2
    bytes under ``who`` (the client talking now)."""

    STORED = [  # (resource type, name, pattern, principal, host, operation, permission)
        (2, "events", 3, "User:alice", "*", 3, 3), (3, "etl-", 4, "User:bob", "10.0.0.1", 8, 2)]

    def __init__(self) -> None:
        self.seen: dict[str, list] = {}
        self.who = "librdkafka"
        self.port = 0

    def __call__(self, header, body):
        key = header.request_api_key
        if key == 3:
            return metadata_response(self.port, {})
        if key not in (29, 30, 31):
            return NotImplemented
        self.seen.setdefault(self.who, []).append((key, kproto.request(key).encode(body, 2)))
        cls = kproto.response(key).cls
        if key == 30:
            return cls(results=[cls.AclCreationResult() for _ in body.creations])
        if key == 29:
            return cls(resources=[cls.DescribeAclsResource(resource_type=t, resource_name=n, pattern_type=pt, acls=[
                cls.AclDescription(principal=pr, host=h, operation=op, permission_type=pm)])
                for t, n, pt, pr, h, op, pm in self.STORED])
        return cls(filter_results=[cls.DeleteAclsFilterResult(matching_acls=[cls.DeleteAclsMatchingAcl(
            resource_type=t, resource_name=n, pattern_type=pt, principal=pr, host=h, operation=op,
            permission_type=pm) for t, n, pt, pr, h, op, pm in self.STORED[1:]]) for _ in body.filters])


# -- ACLs: tansu answers CreateAcls with an invalid (null) result array and the mock has no ACL
# APIs, so kproto is checked against librdkafka's AdminClient: both talk to the same scripted
# broker, which must see the same request bytes and whose answers both must read alike.
def test_acls_match_librdkafkas_requests_and_readings():
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)

    from kproto.client.admin import Acl, AclFilter

    broker = AclBroker()
    with threaded_broker(broker, ACL_V2) as bound:
        broker.port = bound
        ck = ck_admin(f"127.0.0.1:{bound}")
        [f.result(10) for f in ck.create_acls([
            AclBinding(ResourceType.TOPIC, "events", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.READ, AclPermissionType.ALLOW),
            AclBinding(ResourceType.GROUP, "etl-", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                       AclOperation.DESCRIBE, AclPermissionType.DENY)]).values()]
        ck_described = ck.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(10)
        ck_deleted = [b for f in ck.delete_acls([AclBindingFilter(
            ResourceType.GROUP, None, ResourcePatternType.MATCH, "User:bob", None, AclOperation.ANY,
            AclPermissionType.ANY)]).values() for b in f.result(10)]
        broker.who = "kproto"

        async def ours():
            async with Cluster(f"127.0.0.1:{bound}") as cluster:
                admin = Admin(cluster)
                await admin.create_acls([Acl("topic", "events", "User:alice", "read"),
                                         Acl("group", "etl-", "User:bob", "describe", "deny", "10.0.0.1", "prefixed")])
                described = await admin.describe_acls()
                deleted = await admin.delete_acls([AclFilter("group", principal="User:bob", pattern_type="match")])
                return described, deleted

        described, deleted = asyncio.run(asyncio.wait_for(ours(), 30))

    assert [k for k, _ in broker.seen["kproto"]] == [30, 29, 31]
    assert broker.seen["kproto"] == broker.seen["librdkafka"]  # the same request bytes

    def as_names(b):
        return (b.restype.name.lower(), b.name, b.principal, b.operation.name.lower(),
                b.permission_type.name.lower(), b.host, b.resource_pattern_type.name.lower())

    assert [tuple(vars(a).values()) for a in described] == [as_names(b) for b in ck_described]
    assert [tuple(vars(a).values()) for a in deleted] == [as_names(b) for b in ck_deleted]
    assert described[1] == Acl("group", "etl-", "User:bob", "describe", "deny", "10.0.0.1", "prefixed")



def test_acls_cli(capsys):
    broker = AclBroker()
    broker.who = "cli"
    with threaded_broker(broker, ACL_V2) as port:
        broker.port = port
        b = ["--bootstrap", f"127.0.0.1:{port}"]
        assert cli(capsys, "acls", "create", "--resource-type", "group", "--resource-name", "etl-", "--prefixed",
                   "--principal", "User:bob", "--operation", "describe", "--operation", "read", "--deny",
                   "--host", "10.0.0.1", *b)[0] == 0
        code, out, _ = cli(capsys, "acls", "list", "--json", *b)
        listed = json.loads(out)
        code, out, _ = cli(capsys, "acls", "delete", "--principal", "User:bob", "--pattern-type", "match", *b)
        deleted = out.splitlines()
    create, describe, delete = [kproto.request(k).decode(data, 2) for k, data in broker.seen["cli"]]
    assert [(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host, c.operation,
             c.permission_type) for c in create.creations] == [(3, "etl-", 4, "User:bob", "10.0.0.1", op, 2)
                                                              for op in (8, 3)]
    assert (describe.resource_type_filter, describe.pattern_type_filter, describe.operation) == (1, 1, 1)
    assert (delete.filters[0].principal_filter, delete.filters[0].pattern_type_filter) == ("User:bob", 2)
    assert [a["principal"] for a in listed] == ["User:alice", "User:bob"] and listed[0]["operation"] == "read"
    assert deleted == ["group:prefixed:etl-\tUser:bob@10.0.0.1\tdeny describe"]


def test_groups_delete_cli_shows_the_brokers_message_for_the_group(capsys):
    """DeleteGroups v3: ``kproto groups delete`` reports the broker's per-group message."""
    fc, dl = kproto.response(10).cls, kproto.response(42).cls
    port: list[int] = []

    def handler(header, body):
        key, version = header.request_api_key, header.request_api_version
        if key == 10:
            return fc(coordinators=[fc.Coordinator(key=k, node_id=1, host="127.0.0.1", port=port[0])
                                    for k in body.coordinator_keys])
        if key == 42:
            return dl(results=[dl.DeletableGroupResult(
                group_id=g, error_code=68, error_message="The group is not empty." if version >= 3 else None)
                for g in body.groups_names])
        if key == 3:
            return metadata_response(port[0], {})
        return NotImplemented

    for versions, detail in (({}, " (The group is not empty.)"), ({42: (0, 2)}, "")):
        port.clear()
        with threaded_broker(handler, versions) as p:
            port.append(p)
            code, _, err = cli(capsys, "groups", "delete", "busy", "--bootstrap", f"127.0.0.1:{p}")
        assert code == 1 and f"DeleteGroups(busy): NON_EMPTY_GROUP [68]{detail}" in err
