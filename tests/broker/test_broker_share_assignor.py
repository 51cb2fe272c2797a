"""The share-group assignor (Kafka 4.4's SimpleAssignor): its balance and stickiness rules on
their own, then the same membership changes on kproto's broker and on Apache Kafka 4.4.0 (the
session's ``apache_kafka`` node), the assignments ShareGroupDescribe shows after each compared.

The members heartbeat with ShareGroupHeartbeat themselves, with fixed member ids (a share
group member names itself), so that both brokers see the same group: Kafka's tie-breaking
follows the Java hash order of the member ids and topic-partitions."""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from kproto.broker.coordinators.share_assignor import share_assign
from kproto.client.admin import Admin
from kproto.client.cluster import Cluster
from kproto.codecs import request as request_codec
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.schemas.api_keys import ApiKey

T, U = Uuid(b"\x01" * 16), Uuid(b"\x02" * 16)


def sizes(a: dict) -> list[int]:
    return sorted(sum(len(ps) for ps in x.values()) for x in a.values())


def test_balanced_then_sticky():
    """Balance first (sizes differ by at most one; a partition shared only when members
    outnumber partitions), then each member keeps what it had: a joining member takes from
    the fullest, a leaving one's partitions go to the others, nobody else moves."""
    parts = {T: list(range(6))}
    one = share_assign({"m1": [T]}, parts, {})
    assert one == {"m1": {T: set(range(6))}}
    two = share_assign({"m1": [T], "m2": [T]}, parts, one)
    assert sizes(two) == [3, 3]
    assert two["m1"][T] <= one["m1"][T]                            # m1 only gave up partitions
    three = share_assign({"m1": [T], "m2": [T], "m3": [T]}, parts, two)
    assert sizes(three) == [2, 2, 2]
    assert all(three[m][T] <= two[m][T] for m in ("m1", "m2"))
    after = share_assign({"m1": [T], "m3": [T]}, parts, three)       # m2 leaves
    assert sizes(after) == [3, 3]
    assert all(three[m][T] <= after[m][T] for m in ("m1", "m3"))
    # more members than partitions: each partition shared by ceil(members / partitions)
    many = share_assign({f"m{i}": [T] for i in range(8)}, {T: [0, 1, 2]}, {})
    assert sizes(many) == [1, 1, 1, 1, 1, 1, 1, 2]
    shared = [sum(p in a.get(T, ()) for a in many.values()) for p in range(3)]
    assert sorted(shared) == [3, 3, 3]


def test_members_subscribed_differently_balance_each_topic_among_its_subscribers():
    parts = {T: [0, 1, 2, 3], U: [0, 1]}
    got = share_assign({"a": [T], "b": [T, U], "c": [U]}, parts, {})
    assert sorted(got["a"][T] | got["b"].get(T, set())) == [0, 1, 2, 3]
    assert len(got["a"][T]) == len(got["b"][T]) == 2
    assert len(got["b"][U]) == len(got["c"][U]) == 1 and got["b"][U] | got["c"][U] == {0, 1}
    # a member unsubscribing from a topic loses its partitions of it, the others keep theirs
    again = share_assign({"a": [T], "b": [U], "c": [U]}, parts, got)
    assert again["a"][T] == {0, 1, 2, 3} and T not in again["b"] and again["c"][U] == got["c"][U]


# ---- the same membership changes on kproto's broker and Apache Kafka --------------------------
HB = request_codec(ApiKey.SHARE_GROUP_HEARTBEAT).cls
DESCRIBE = request_codec(ApiKey.SHARE_GROUP_DESCRIBE).cls


def member_id(n: int) -> str:
    return str(Uuid(uuid.uuid5(uuid.NAMESPACE_OID, f"kproto-share-assignor-{n}")))


async def scenario(bootstrap: str) -> tuple[list[dict[str, dict[str, list[int]]]], Uuid, Uuid]:
    """Members join one by one (past the partition count), one leaves, one joins subscribed
    to a second topic too: the assignments after each change, by member and topic name."""
    suffix = uuid.uuid4().hex[:8]
    t, u, group = f"sa-t-{suffix}", f"sa-u-{suffix}", f"sa-g-{suffix}"
    async with Cluster(bootstrap) as cluster:
        admin = Admin(cluster)
        await admin.create_topics({t: 4, u: 2})
        await admin.alter_configs({("group", group): {"share.assignment.interval.ms": "0",
                                                      "share.session.timeout.ms": "60000"}})
        coordinator = await cluster.coordinator(group)
        epochs: dict[str, int] = {}
        subs: dict[str, list[str]] = {}

        async def heartbeat(mid: str) -> None:
            nonlocal coordinator
            joining = mid not in epochs
            for _ in range(50):  # a new broker's __consumer_offsets may still be loading
                resp = await coordinator.request(HB(group_id=group, member_id=mid, member_epoch=epochs.get(mid, 0),
                                                    subscribed_topic_names=subs[mid] if joining else None), 1)
                if resp.error_code not in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                           ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                    break
                await asyncio.sleep(0.2)
                cluster.forget_coordinator(group)
                coordinator = await cluster.coordinator(group)
            assert resp.error_code == 0, resp
            epochs[mid] = resp.member_epoch

        async def settle() -> dict[str, dict[str, list[int]]]:
            last = None
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for mid in list(epochs):
                    await heartbeat(mid)
                g = (await coordinator.request(DESCRIBE(group_ids=[group], include_authorized_operations=False), 1)).groups[0]
                now = {m.member_id: {tp.topic_name: sorted(tp.partitions) for tp in m.assignment.topic_partitions
                                     if tp.partitions} for m in g.members}
                # every subscribed partition assigned: their share state is initialized
                wanted = {(n, p) for m in epochs for n in subs[m] for p in range(4 if n == t else 2)}
                done = g.assignment_epoch == g.group_epoch and all(m.member_epoch == g.assignment_epoch
                                                                   for m in g.members) and \
                    wanted == {(n, p) for a in now.values() for n, ps in a.items() for p in ps}
                if done and now == last:
                    return now
                last = now
                await asyncio.sleep(0.2)
            raise AssertionError(f"share group {group} did not settle: {last}")

        steps = []
        for n in range(1, 7):
            mid = member_id(n)
            subs[mid] = [t]
            await heartbeat(mid)
            steps.append(await settle())
        leaving = member_id(2)
        await coordinator.request(HB(group_id=group, member_id=leaving, member_epoch=-1), 1)
        del epochs[leaving]
        steps.append(await settle())
        mid = member_id(7)
        subs[mid] = [t, u]
        await heartbeat(mid)
        steps.append(await settle())
        for m in list(epochs):
            await coordinator.request(HB(group_id=group, member_id=m, member_epoch=-1), 1)
        # topic names differ by run: "t" and "u"
        named = [{m: {k.split("-")[1]: v for k, v in a.items()} for m, a in s.items()} for s in steps]
        await cluster.refresh_metadata([t, u])
        return named, cluster.metadata.topic_id(t), cluster.metadata.topic_id(u)


def replay(t: Uuid, u: Uuid) -> list[dict[str, dict[str, list[int]]]]:
    """What :func:`share_assign` makes of the scenario's steps, given its topic ids (Kafka's
    choices between equal options follow their hashes). A member subscribing to a new topic
    is assigned twice: before the topic's share state is initialized, and after."""
    members: dict[str, list[Uuid]] = {}
    target: dict = {}
    out = []

    def assign(assignable: dict) -> None:
        nonlocal target
        target = share_assign(members, assignable, target)

    for n in range(1, 7):
        members[member_id(n)] = [t]
        assign({t: [0, 1, 2, 3]})
        out.append(target)
    del members[member_id(2)]
    target = {m: a for m, a in target.items() if m != member_id(2)}
    assign({t: [0, 1, 2, 3]})
    out.append(target)
    members[member_id(7)] = [t, u]
    assign({t: [0, 1, 2, 3], u: []})
    assign({t: [0, 1, 2, 3], u: [0, 1]})
    out.append(target)
    names = {t: "t", u: "u"}
    return [{m: {names[x]: sorted(ps) for x, ps in a.items()} for m, a in step.items()} for step in out]


def test_assignments_after_membership_changes_are_apache_kafkas(kafka_broker, apache_kafka):
    """Apache Kafka's assignments after each change are what kproto's assignor makes of the
    same steps with Apache's topic ids; kproto's broker assigns by it with its own."""
    theirs, t, u = asyncio.run(asyncio.wait_for(scenario(apache_kafka.bootstrap), 180))
    assert theirs == replay(t, u)
    ours, t, u = asyncio.run(asyncio.wait_for(scenario(kafka_broker.bootstrap), 180))
    assert ours == replay(t, u)
