"""Properties Kafka documents for its assignors, checked on generated groups."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

from kproto.client.assignors import (
    ASSIGNORS, Subscription, cooperative_sticky_assign, range_assign, roundrobin_assign, sticky_assign)

TOPICS = ["alpha", "beta", "gamma", "delta"]


@st.composite
def groups(draw, same_subscription: bool):
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))
    cluster = {t: draw(st.integers(1, 12)) for t in topics}
    members = draw(st.lists(st.text("abcdefgh0123456789-", min_size=1, max_size=8),
                            min_size=1, max_size=7, unique=True))
    subs = {}
    for m in members:
        mine = topics if same_subscription else draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))
        static = draw(st.none() | st.sampled_from(["s1", "s2", "s3", "s4", "s5", "s6", "s7"]))
        subs[m] = Subscription(list(mine), group_instance_id=static)
    # static ids must be unique within a group
    seen = set()
    for m, s in subs.items():
        if s.group_instance_id in seen:
            s.group_instance_id = None
        seen.add(s.group_instance_id)
    return cluster, subs


def _wanted(cluster, subs):
    return {(t, p) for s in subs.values() for t in s.topics for p in range(cluster[t])}


def _flat(result):
    return [tp for parts in result.values() for tp in parts]


@settings(max_examples=120, deadline=None)
@given(groups(same_subscription=False))
def test_every_subscribed_partition_exactly_once(group):
    cluster, subs = group
    for fn in (range_assign, roundrobin_assign, sticky_assign):
        result = fn(cluster, subs)
        flat = _flat(result)
        assert sorted(flat) == sorted(_wanted(cluster, subs))
        for m, parts in result.items():
            assert all(t in subs[m].topics for t, _ in parts)


@settings(max_examples=120, deadline=None)
@given(groups(same_subscription=True))
def test_same_subscription_is_balanced_and_sticky(group):
    cluster, subs = group
    for name in ("roundrobin", "sticky", "cooperative-sticky"):
        result = ASSIGNORS[name](cluster, subs)
        sizes = [len(p) for p in result.values()]
        assert max(sizes) - min(sizes) <= 1, name
    # the sticky assignors keep a balanced assignment exactly as it is
    first = sticky_assign(cluster, subs)
    again = {m: Subscription(s.topics, owned_partitions=first[m], generation_id=5) for m, s in subs.items()}
    coop = cooperative_sticky_assign(cluster, again)
    assert {m: sorted(p) for m, p in coop.items()} == {m: sorted(p) for m, p in first.items()}


@settings(max_examples=120, deadline=None)
@given(groups(same_subscription=True), st.integers(0, 2**31 - 1))
def test_cooperative_never_moves_a_partition_directly(group, seed):
    cluster, subs = group
    import random

    rng = random.Random(seed)
    members = list(subs)
    first = sticky_assign(cluster, subs)
    # a member leaves and another joins: owners keep what they had
    leaving = rng.choice(members)
    now = {m: Subscription(subs[m].topics, owned_partitions=first[m], generation_id=3)
           for m in members if m != leaving}
    now["joiner"] = Subscription(list(cluster))
    owner = {tp: m for m, parts in first.items() for tp in parts if m != leaving}
    round1 = cooperative_sticky_assign(cluster, now)
    for m, parts in round1.items():
        for tp in parts:
            assert owner.get(tp, m) == m, "a partition moved without being revoked first"
    # round 2: members now own round1's result; everything is assigned, balanced
    after = {m: Subscription(s.topics, owned_partitions=round1[m], generation_id=4) for m, s in now.items()}
    round2 = cooperative_sticky_assign(cluster, after)
    assert sorted(_flat(round2)) == sorted(_wanted(cluster, now))
    sizes = [len(p) for p in round2.values()]
    assert max(sizes) - min(sizes) <= 1
