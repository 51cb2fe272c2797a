"""A fetcher and a broker talking Fetch through fetch sessions, for measuring bandwidth.

Both ends are kproto's own pieces: :class:`FetchSessionHandler` builds the requests,
:class:`FetchSessionCache` serves them, and every request and response is encoded and decoded
with kproto's codec, so the byte counts are those of the real wire format (message body, without
the size prefix and request/response header, which do not depend on sessions).

This reproduces KIP-227's motivating figure: with 1,000 partitions a sessionless FetchRequest
lists all of them every time, an incremental one only those whose fetch position moved.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from kproto.codecs.primitives import Uuid
from kproto.fetch_session.cache import FetchSessionCache
from kproto.fetch_session.handler import FetchSessionHandler, response_data
from kproto.fetch_session.messages import (
    build_fetch_request,
    build_fetch_response,
    request_fetch_data,
    request_metadata,
    request_replica_id,
)
from kproto.fetch_session.model import (
    FetchMetadata,
    PartitionData,
    TopicPartition,
)
from kproto.error_codes import ErrorCode


@dataclass
class SimulatedLog:
    """The broker-side state of one partition that a fetch reads."""

    high_watermark: int = 0
    log_start_offset: int = 0


class SimulatedBroker:
    """Serves FetchRequest bytes from in-memory partition logs through a :class:`FetchSessionCache`.

    A fetch at offset ``o`` of a partition with log start ``ls <= o <= hw`` (high watermark)
    returns ``min(hw - o, max_records) * record_bytes`` filler bytes of records (capped by the
    partition's max bytes); the records are not a valid batch, only their size matters here.
    Other offsets get OFFSET_OUT_OF_RANGE.
    """

    def __init__(self, cache: Optional[FetchSessionCache] = None, record_bytes: int = 100,
                 max_records: int = 100) -> None:
        from kproto.codecs import request, response

        self.cache = cache if cache is not None else FetchSessionCache()
        self.logs: dict[TopicPartition, SimulatedLog] = {}
        self.topic_ids: dict[Uuid, str] = {}
        self.record_bytes = record_bytes
        self.max_records = max_records
        self._req = request(1)
        self._resp = response(1)

    def create_topic(self, name: str, partitions: int, topic_id: Uuid) -> None:
        self.topic_ids[topic_id] = name
        for p in range(partitions):
            self.logs[TopicPartition(name, p)] = SimulatedLog()

    def handle(self, request_bytes: bytes, version: int, now_ms: int) -> bytes:
        """Decode a FetchRequest body, serve it, and return the encoded FetchResponse body."""
        request = self._req.decode(request_bytes, version)
        names = self.topic_ids if version >= 13 else {}
        fetch_data, to_forget = request_fetch_data(request, version, names)
        ctx = self.cache.new_context(version, request_metadata(request),
                                     request_replica_id(request, version) >= 0,
                                     fetch_data, to_forget, names, now_ms)
        PartitionData_ = self._resp.cls.PartitionData
        updates: dict[Any, Any] = {}
        for tip, data in ctx.partitions():
            log = self.logs.get(TopicPartition(tip.topic, tip.partition)) if tip.topic is not None else None
            if log is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if tip.topic is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                updates[tip] = PartitionData_(error_code=code, high_watermark=-1)
                continue
            if not log.log_start_offset <= data.fetch_offset <= log.high_watermark:
                updates[tip] = PartitionData_(error_code=ErrorCode.OFFSET_OUT_OF_RANGE, high_watermark=-1)
                continue
            records = min(log.high_watermark - data.fetch_offset, self.max_records)
            size = min(records * self.record_bytes, max(data.max_bytes, 0))
            updates[tip] = PartitionData_(high_watermark=log.high_watermark,
                                          last_stable_offset=log.high_watermark,
                                          log_start_offset=log.log_start_offset, records=bytes(size))
        answer = ctx.update_and_generate_response_data(updates)
        return self._resp.encode(build_fetch_response(answer, version), version)


@dataclass
class RoundStats:
    """Sizes of one fetch round trip."""

    request_bytes: int
    response_bytes: int
    request_partitions: int
    response_partitions: int
    full: bool


@dataclass
class Fetcher:
    """A consumer (or, with ``replica_id`` >= 0, a follower) fetching a fixed set of partitions
    through a :class:`FetchSessionHandler`, advancing its offsets past the records it gets."""

    partitions: dict[TopicPartition, PartitionData]
    use_sessions: bool = True
    replica_id: int = -1
    handler: FetchSessionHandler = field(default_factory=FetchSessionHandler)

    def __post_init__(self) -> None:
        from kproto.codecs import request, response

        self._req = request(1)
        self._resp = response(1)

    def fetch(self, broker: SimulatedBroker, version: int, now_ms: int) -> RoundStats:
        if not self.use_sessions:
            # A sessionless fetcher always sends epoch FINAL: full request, no session created.
            self.handler.next_metadata = FetchMetadata.LEGACY  # type: ignore[attr-defined]
        builder = self.handler.new_builder()
        for tp, data in self.partitions.items():
            builder.add(tp, data)
        built = builder.build()
        request = build_fetch_request(built, version, replica_id=self.replica_id)
        req_bytes = self._req.encode(request, version)
        resp_bytes = broker.handle(req_bytes, version, now_ms)
        response = self._resp.decode(resp_bytes, version)
        returned = response_data(response, version, self.handler.session_topic_names)
        self.handler.handle_response(response, version)
        for tp, p in returned.items():
            cur = self.partitions.get(tp)
            if cur is not None and p.records:
                got = len(p.records) // broker.record_bytes
                self.partitions[tp] = cur._replace(fetch_offset=cur.fetch_offset + got)
        return RoundStats(len(req_bytes), len(resp_bytes), len(built.to_send), len(returned), built.is_full)


def consumer_partitions(topics: int, partitions_per_topic: int, rng: random.Random,
                        max_bytes: int = 1_048_576) -> tuple[dict[TopicPartition, PartitionData], dict[Uuid, str]]:
    """``topics`` x ``partitions_per_topic`` partitions (names ``topic-NNN``) with random topic ids,
    as a Java consumer would fetch them (current leader epoch known, no last fetched epoch)."""
    wanted: dict[TopicPartition, PartitionData] = {}
    ids: dict[Uuid, str] = {}
    for t in range(topics):
        name = f"topic-{t:03d}"
        tid = Uuid(rng.randbytes(16))
        ids[tid] = name
        for p in range(partitions_per_topic):
            wanted[TopicPartition(name, p)] = PartitionData(tid, 0, -1, max_bytes, rng.randrange(0, 30), None)
    return wanted, ids


def simulate(version: int, *, topics: int = 100, partitions_per_topic: int = 10, changed: int = 0,
             rounds: int = 5, use_sessions: bool = True, replica_id: int = -1, seed: int = 0,
             record_bytes: int = 100) -> list[RoundStats]:
    """One fetcher, one broker, ``rounds`` fetches after the first; before each, ``changed``
    random partitions receive one new record (so their fetch offsets move after the fetch).
    Returns the stats of every round, the first (full) one included."""
    rng = random.Random(seed)
    wanted, ids = consumer_partitions(topics, partitions_per_topic, rng)
    if version < 13:
        wanted = {tp: d._replace(topic_id=Uuid.ZERO) for tp, d in wanted.items()}
    broker = SimulatedBroker(FetchSessionCache(rng=random.Random(seed)), record_bytes=record_bytes)
    for tid, name in ids.items():
        broker.create_topic(name, partitions_per_topic, tid)
    fetcher = Fetcher(dict(wanted), use_sessions=use_sessions, replica_id=replica_id,
                      handler=FetchSessionHandler(0))
    keys = list(broker.logs)
    stats = [fetcher.fetch(broker, version, 0)]
    for r in range(1, rounds + 1):
        for tp in rng.sample(keys, min(changed, len(keys))):
            broker.logs[tp].high_watermark += 1
        stats.append(fetcher.fetch(broker, version, r * 500))
    return stats


@dataclass
class BandwidthRow:
    version: int
    changed: int
    sessionless_request: int
    full_request: int
    incremental_request: int
    sessionless_response: int
    incremental_response: int


def bandwidth_table(versions: Sequence[int], changed: Iterable[int], *, topics: int = 100,
                    partitions_per_topic: int = 10, replica_id: int = -1, seed: int = 0) -> list[BandwidthRow]:
    """Average request/response body bytes per fetch, with and without a session, for each
    version (7 or more) and each number of partitions changed between fetches."""
    rows = []
    for v in versions:
        for k in changed:
            common = dict(topics=topics, partitions_per_topic=partitions_per_topic, changed=k, rounds=4,
                          replica_id=replica_id, seed=seed)
            with_s = simulate(v, use_sessions=True, **common)
            without = simulate(v, use_sessions=False, **common)
            inc = with_s[1:]
            rows.append(BandwidthRow(
                v, k,
                sessionless_request=_avg(s.request_bytes for s in without[1:]),
                full_request=with_s[0].request_bytes,
                incremental_request=_avg(s.request_bytes for s in inc),
                sessionless_response=_avg(s.response_bytes for s in without[1:]),
                incremental_response=_avg(s.response_bytes for s in inc)))
    return rows


def _avg(values: Iterable[int]) -> int:
    vals = list(values)
    return round(sum(vals) / len(vals)) if vals else 0
