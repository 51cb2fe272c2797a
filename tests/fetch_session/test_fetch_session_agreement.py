"""kproto's FetchSessionCache serving kproto's FetchSessionHandler, driven by the vector traces.

Neither third-party peer grants fetch sessions, so the broker side is checked against the client
side: the wanted partitions, versions, close notifications and lost responses of each of the 200
Kafka traces are replayed over kproto's codec, and after every step both ends must agree on the
session (id, epoch, partitions and their fetch parameters).
"""
from __future__ import annotations

import random


import kproto
from kproto.error_codes import ErrorCode
from kproto.fetch_session import (
    FetchSessionCache,
    FetchSessionHandler,
    TopicPartition,
)
from kproto.fetch_session.messages import build_fetch_request
from kproto.fetch_session.sim import SimulatedLog, SimulatedBroker

from fetch_session_vectors import EXPECTED_TRACES, load_traces, partition_of


def replay(trace: dict, seed: int) -> dict:
    rng = random.Random(seed)
    broker = SimulatedBroker(FetchSessionCache(rng=random.Random(seed)), record_bytes=7)
    handler = FetchSessionHandler(trace["node"])
    req_codec, resp_codec = kproto.request(1), kproto.response(1)
    counts = {"incremental_ok": 0, "topic_id_errors": 0, "steps": 0}
    prev_version = None
    lost = 0  # a lost response to a full request may leave an orphan session on the broker
    for step in trace["steps"]:
        where = f"trace {trace['trace']} step {step['step']}"
        version = step["version"]
        if step["notify_close"]:
            handler.notify_close()
        builder = handler.new_builder()
        for p in step["want"]:
            tp, data = partition_of(p)
            # Ask only for what the version can carry: v<12 cannot carry a last fetched epoch
            # (Kafka's consumer never sends one), v<9 drops the current leader epoch.
            if version < 12:
                data = data._replace(last_fetched_epoch=None)
            if version < 9:
                data = data._replace(current_leader_epoch=None)
            builder.add(tp, data)
            if data.topic_id != data.topic_id.ZERO:
                broker.topic_ids[data.topic_id] = tp.topic
            if tp not in broker.logs:
                broker.logs[tp] = SimulatedLog(data.fetch_offset + rng.randrange(0, 3), rng.randrange(0, 50))
        for log in broker.logs.values():
            if rng.random() < 0.2:
                log.high_watermark += 1
        built = builder.build()
        if version >= 13 and not built.can_use_topic_ids:
            # This replay's session may differ from the trace's (another broker answered), and
            # Kafka's client caps the version at 12 when it cannot use topic ids.
            version = 12
        incremental = not built.is_full
        req = req_codec.encode(build_fetch_request(built, version), version)
        resp_bytes = broker.handle(req, version, now_ms=step["step"] * 1000)
        if step["outcome"] == "network_error":
            handler.handle_error(ConnectionError("response lost"))
            lost += 1
        else:
            response = resp_codec.decode(resp_bytes, version)
            ok = handler.handle_response(response, version)
            if not ok:
                # The only refusal a well-behaved pair can produce: the fetcher changed version
                # across 13 within a session (the session uses topic ids or not).
                assert response.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR, where
                assert incremental and (prev_version >= 13) != (version >= 13), where
                counts["topic_id_errors"] += 1
            elif incremental:
                counts["incremental_ok"] += 1
                # An incremental response carries only partitions of the session.
                sent = {(t.topic_id if version >= 13 else t.topic, p.partition_index)
                        for t in response.responses for p in t.partitions}
                assert len(sent) <= len(handler.session_partitions), where
        counts["steps"] += 1
        prev_version = version

        # Both ends agree on the session the next request continues.
        meta = handler.next_metadata
        assert broker.cache.size <= 1 + lost, where
        if not meta.is_full:
            session = broker.cache.get(meta.session_id)
            assert session is not None, where
            assert session.epoch == meta.epoch, where
            cached = {TopicPartition(cp.topic, cp.partition): cp.req_data()
                      for cp in session.partition_map.values()}
            assert set(cached) == set(handler.session_partitions), where
            for tp, data in handler.session_partitions.items():
                if not session.uses_topic_ids:
                    data = data._replace(topic_id=data.topic_id.ZERO)
                assert cached[tp] == data, where
    return counts


def test_all_traces_agree():
    assert len(load_traces()) == EXPECTED_TRACES
    totals = {"incremental_ok": 0, "topic_id_errors": 0, "steps": 0}
    for i, trace in enumerate(load_traces()):
        for k, v in replay(trace, seed=i).items():
            totals[k] += v
    assert totals["steps"] == sum(len(t["steps"]) for t in load_traces())
    # The traces exercise real sessions, not just full fetches.
    assert totals["incremental_ok"] > 500
    assert totals["topic_id_errors"] > 0
