"""Fuzz the four assignors with random groups and check the invariants every result must keep:
every member appears, only existing subscribed partitions are given, no partition twice, and range,
round-robin and sticky cover every subscribed partition. (The sticky assignors may hand a partition
back to its owner of an older generation even if that member no longer subscribes to the topic:
Kafka's general path does so too, so for them only existence is checked.)

Run: ``python fuzz/fuzz_client_assignors.py -runs=2000``.
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.client.assignors import ASSIGNORS, Subscription, encode_sticky_user_data

RACKS = [None, "r0", "r1", "r2"]


def build(fdp: "atheris.FuzzedDataProvider"):
    topics = [f"t{i}" for i in range(fdp.ConsumeIntInRange(1, 4))]
    racked = fdp.ConsumeBool()
    cluster = {}
    for t in topics:
        n = fdp.ConsumeIntInRange(1, 12)
        if racked:
            cluster[t] = [[RACKS[fdp.ConsumeIntInRange(0, 3)] for _ in range(fdp.ConsumeIntInRange(1, 3))]
                          for _ in range(n)]
        else:
            cluster[t] = n
    counts = {t: (v if isinstance(v, int) else len(v)) for t, v in cluster.items()}
    subs = {}
    for m in range(fdp.ConsumeIntInRange(1, 6)):
        mine = [t for t in topics + ["ghost"] if fdp.ConsumeBool()] or [topics[0]]
        owned = sorted({(t, fdp.ConsumeIntInRange(0, counts[t] - 1))
                        for t in topics for _ in range(fdp.ConsumeIntInRange(0, 3))})
        gen = fdp.ConsumeIntInRange(-1, 3)
        gen = None if gen < 0 else gen
        subs[f"member-{fdp.ConsumeIntInRange(0, 999)}-{m}"] = Subscription(
            topics=mine, owned_partitions=owned, generation_id=gen,
            user_data=encode_sticky_user_data(owned, gen) if owned else None,
            rack_id=RACKS[fdp.ConsumeIntInRange(0, 3)],
            group_instance_id=f"i{m}" if fdp.ConsumeBool() else None)
    return cluster, counts, subs


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    cluster, counts, subs = build(fdp)
    wanted = {(t, p) for s in subs.values() for t in s.topics if t in counts for p in range(counts[t])}
    for name, fn in ASSIGNORS.items():
        result = fn(cluster, subs)
        assert set(result) == set(subs), name
        flat = [tp for parts in result.values() for tp in parts]
        assert len(flat) == len(set(flat)), (name, "assigned twice")
        for member, parts in result.items():
            for tp in parts:
                assert tp in wanted, (name, member, tp)
                assert tp[0] in subs[member].topics or "sticky" in name, (name, member, tp)
        if name != "cooperative-sticky":
            assert set(flat) == wanted, (name, "not covered")


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
