"""Loading the fetch-session golden vectors (``$KPROTO_VECTORS/client/fetch-sessions.jsonl.gz``)."""
from __future__ import annotations

import gzip
import json
import os
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

from kproto.codecs.primitives import Uuid
from kproto.fetch_session import PartitionData, TopicPartition

REPO = Path(__file__).resolve().parents[2]
VECTORS = Path(os.environ.get("KPROTO_VECTORS", REPO.parent / "shared" / "vectors"))
FETCH_SESSIONS = VECTORS / "client" / "fetch-sessions.jsonl.gz"
EXPECTED_TRACES = 200  # the README's line count; a truncated file must fail, not pass quietly


@lru_cache(maxsize=1)
def load_traces() -> tuple[dict, ...]:
    with gzip.open(FETCH_SESSIONS, "rt", encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def partition_of(p: dict) -> tuple[TopicPartition, PartitionData]:
    return (TopicPartition(p["topic"], p["partition"]),
            PartitionData(Uuid(p["topic_id"]), p["fetch_offset"], p["log_start_offset"],
                          p["max_bytes"], p["current_leader_epoch"], p["last_fetched_epoch"]))


def response_namespace(r: dict) -> SimpleNamespace:
    """The vector's response as an object with the FetchResponse message's attribute names."""
    return SimpleNamespace(
        error_code=r["error_code"], throttle_time_ms=r["throttle_time_ms"], session_id=r["session_id"],
        responses=[SimpleNamespace(
            topic=t["topic"], topic_id=Uuid(t["topic_id"]),
            partitions=[SimpleNamespace(partition_index=p["partition"], error_code=p["error_code"],
                                        high_watermark=p["high_watermark"],
                                        last_stable_offset=p["last_stable_offset"],
                                        log_start_offset=p["log_start_offset"],
                                        records=bytes(p["records_size"]))
                        for p in t["partitions"]])
            for t in r["topics"]])


def response_bytes(r: dict, version: int) -> bytes:
    """The vector's response encoded with kproto's codec at ``version`` (filler records)."""
    import kproto

    codec = kproto.response(1)
    cls = codec.cls
    msg = cls(error_code=r["error_code"], throttle_time_ms=r["throttle_time_ms"], session_id=r["session_id"],
              responses=[cls.FetchableTopicResponse(
                  topic=t["topic"], topic_id=Uuid(t["topic_id"]),
                  partitions=[cls.PartitionData(partition_index=p["partition"], error_code=p["error_code"],
                                                high_watermark=p["high_watermark"],
                                                last_stable_offset=p["last_stable_offset"],
                                                log_start_offset=p["log_start_offset"],
                                                records=bytes(p["records_size"]))
                              for p in t["partitions"]])
                  for t in r["topics"]])
    return codec.encode(msg, version)
