"""FetchSessionHandler against the 200 traces recorded from Kafka 3.9.1's Java handler."""
from __future__ import annotations

import pytest

from kproto.fetch_session import FetchSessionHandler, TopicIdPartition

from fetch_session_vectors import EXPECTED_TRACES, load_traces, partition_of, response_bytes, response_namespace


def _partition_json(tp, data) -> dict:
    return {"topic": tp.topic, "topic_id": str(data.topic_id), "partition": tp.partition,
            "fetch_offset": data.fetch_offset, "log_start_offset": data.log_start_offset,
            "max_bytes": data.max_bytes, "current_leader_epoch": data.current_leader_epoch,
            "last_fetched_epoch": data.last_fetched_epoch}


def _tip_json(tip: TopicIdPartition) -> dict:
    return {"topic_id": str(tip.topic_id), "topic": tip.topic, "partition": tip.partition}


def run_trace(trace: dict, respond) -> int:
    """Drive a fresh handler through one trace, asserting every step; returns the step count.
    ``respond(step)`` turns the step's recorded response into what handle_response receives."""
    handler = FetchSessionHandler(trace["node"])
    for step in trace["steps"]:
        where = f"trace {trace['trace']} step {step['step']}"
        if step["notify_close"]:
            handler.notify_close()
        builder = handler.new_builder()
        for p in step["want"]:
            builder.add(*partition_of(p))
        built = builder.build()
        exp = step["built"]
        got = {
            "session_id": built.metadata.session_id, "epoch": built.metadata.epoch,
            "is_full": built.is_full, "can_use_topic_ids": built.can_use_topic_ids,
            "to_send": [_partition_json(tp, d) for tp, d in built.to_send.items()],
            "to_forget": [_tip_json(t) for t in built.to_forget],
            "to_replace": [_tip_json(t) for t in built.to_replace],
            "session_partitions": [_partition_json(tp, d) for tp, d in built.session_partitions.items()],
        }
        assert got == exp, where

        if step["response"] is None:
            handler.handle_error(ConnectionError("disconnected"))
            assert step["result"] is None, where
        else:
            result = handler.handle_response(respond(step), step["version"])
            assert result is step["result"], where
        after = step["after"]
        meta = handler.next_metadata
        got_after = {
            "session_id": meta.session_id, "epoch": meta.epoch, "is_full": meta.is_full,
            "session_partitions": [{"topic": tp.topic, "partition": tp.partition}
                                   for tp in handler.session_partitions],
            "session_topic_names": dict(sorted((str(i), n)
                                               for i, n in handler.session_topic_names.items())),
        }
        assert got_after == after, where
    return len(trace["steps"])


def test_vector_file_complete():
    traces = load_traces()
    assert len(traces) == EXPECTED_TRACES
    assert [t["trace"] for t in traces] == list(range(EXPECTED_TRACES))


@pytest.mark.parametrize("index", range(EXPECTED_TRACES))
def test_trace(index):
    trace = load_traces()[index]
    assert run_trace(trace, lambda step: response_namespace(step["response"])) == len(trace["steps"]) > 0


@pytest.mark.parametrize("index", range(EXPECTED_TRACES))
def test_trace_through_codec(index):
    """The same trace, with each response encoded and decoded by kproto's codec first."""
    import kproto

    codec = kproto.response(1)
    trace = load_traces()[index]

    def respond(step):
        return codec.decode(response_bytes(step["response"], step["version"]), step["version"])

    assert run_trace(trace, respond) == len(trace["steps"])
