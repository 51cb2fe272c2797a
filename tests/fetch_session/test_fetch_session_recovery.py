"""Session errors end to end: kproto's handler recovering from what kproto's cache answers.

Several fetchers share a small cache; the broker restarts, requests get duplicated, responses get
lost, fetchers switch versions across 13 and sessions get evicted. Whatever happens, the
handler must answer an error with a full request (as Kafka's client does), and whenever it
continues a session, the broker must hold that session at the same epoch with the same partitions.
"""
from __future__ import annotations

import random
from collections import Counter

import kproto
from kproto.codecs.primitives import Uuid
from kproto.error_codes import ErrorCode
from kproto.fetch_session import (
    FetchSessionCache,
    FetchSessionHandler,
    PartitionData,
    TopicPartition,
)
from kproto.fetch_session.messages import build_fetch_request
from kproto.fetch_session.sim import SimulatedBroker

REQ, RESP = kproto.request(1), kproto.response(1)


def run(seed: int, ticks: int = 120) -> Counter:
    rng = random.Random(seed)
    broker = SimulatedBroker(FetchSessionCache(max_entries=2, eviction_ms=1000, rng=random.Random(seed)),
                             record_bytes=5)
    fetchers = []
    for f in range(3):
        tid = Uuid(rng.randbytes(16))
        broker.create_topic(f"t{f}", 6, tid)
        fetchers.append((FetchSessionHandler(f), {TopicPartition(f"t{f}", p): PartitionData(tid, 0, -1, 1000, 1)
                                                 for p in range(6)}))
    seen: Counter = Counter()
    now = 0
    for _ in range(ticks):
        now += rng.choice((10, 10, 10, 700))
        handler, wanted = fetchers[rng.randrange(3)]
        if rng.random() < 0.03:
            broker.cache = FetchSessionCache(max_entries=2, eviction_ms=1000, rng=random.Random(now))
            seen["restart"] += 1
        version = rng.choice((12, 13, 13, 13, 16))
        for tp in rng.sample(list(broker.logs), 3):
            broker.logs[tp].high_watermark += 1
        if rng.random() < 0.3:  # wanted set changes
            tp = rng.choice(list(wanted))
            wanted[tp] = wanted[tp]._replace(max_bytes=rng.choice((500, 1000)))
        builder = handler.new_builder()
        for tp, d in wanted.items():
            builder.add(tp, d)
        built = builder.build()
        req = REQ.encode(build_fetch_request(built, version), version)
        event = rng.random()
        resp_bytes = broker.handle(req, version, now)
        if event < 0.05:
            resp_bytes = broker.handle(req, version, now)  # duplicated request; client sees the second answer
        if event > 0.95:
            handler.handle_error(TimeoutError())
            seen["lost"] += 1
        else:
            response = RESP.decode(resp_bytes, version)
            ok = handler.handle_response(response, version)
            seen[response.error_code] += 1
            assert ok == (response.error_code == 0)
            if not ok:
                assert handler.next_metadata.is_full  # an error always falls back to a full request
            if ok:
                # The fetcher advances past what it got.
                for t in response.responses:
                    for p in t.partitions:
                        tp = next(k for k in wanted if k.partition == p.partition_index)
                        if p.records:
                            wanted[tp] = wanted[tp]._replace(fetch_offset=wanted[tp].fetch_offset + len(p.records) // 5)
        meta = handler.next_metadata
        if not meta.is_full:
            seen["incremental"] += 1
            session = broker.cache.get(meta.session_id)
            if session is not None:  # (it may have been evicted by another fetcher meanwhile)
                assert session.epoch == meta.epoch
                assert {TopicPartition(c.topic, c.partition) for c in session.partition_map.values()} == \
                    set(handler.session_partitions)
    return seen


def test_recovery_from_every_session_error():
    total: Counter = Counter()
    for seed in range(25):
        total += run(seed)
    for what in (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                 ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, "restart", "lost", "incremental"):
        assert total[what] > 0, what
