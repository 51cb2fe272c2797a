"""KIP-599's ``controller_mutation_rate``: partitions created, grown or deleted per second,
held in a token bucket of rate x 11 windows of 1 s. Topics past an exhausted quota are refused
THROTTLING_QUOTA_EXCEEDED from CreateTopics v6, CreatePartitions v3, DeleteTopics v5 (strict);
older versions are served and throttled (permissive); the answer carries the time until the
bucket is back at zero and the connection is muted that long. The same sequence on kproto's
broker and on Apache Kafka 4.4.0."""
from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from typing import Any

import pytest

import kproto
from kproto.broker.quotas import MutationQuota, TokenBucket
from kproto.client.connection import Connection
from kproto.conformance.scenario import build
from kproto.error_codes import ErrorCode as E
from kproto.framing import RequestHeader, decode_response, encode_request
from kproto.schemas.api_keys import ApiKey as K

THROTTLED = E.THROTTLING_QUOTA_EXCEEDED


# ------------------------------------------------------------------ sans-I/O
def test_a_new_bucket_is_full_and_refills_at_the_rate_up_to_the_burst() -> None:
    b = TokenBucket()
    assert b.measure(2.0, 22.0, 1_000) == 22.0
    b.record(30, 2.0, 22.0, 1_000)
    assert b.measure(2.0, 22.0, 1_000) == -8.0
    assert b.measure(2.0, 22.0, 2_500) == -5.0          # 1.5 s at 2 a second
    assert b.measure(2.0, 22.0, 100_000) == 22.0        # never above the burst


def test_strict_takes_any_amount_while_credit_is_left_then_refuses() -> None:
    now = [0]
    bucket = TokenBucket()
    q = MutationQuota(bucket, 2.0, 22.0, True, lambda: now[0])
    assert q.record(10) and q.record(10) and q.record(10)   # 22 -> 12 -> 2 -> -8
    assert q.throttle_time_ms() == 0
    assert not q.record(1)                                   # nothing taken
    assert q.throttle_time_ms() == 4000                      # 8 owed at 2 a second
    now[0] += 1500
    assert q.throttle_time_ms() == 2500                      # less the time since it was measured
    assert bucket.measure(2.0, 22.0, now[0]) == -5.0


def test_permissive_takes_everything_and_throttles_once_over() -> None:
    now = [0]
    q = MutationQuota(TokenBucket(), 2.0, 22.0, False, lambda: now[0])
    assert q.record(20) and q.throttle_time_ms() == 0        # 2 left
    assert q.record(5) and q.throttle_time_ms() == 1500      # 3 owed
    assert MutationQuota(None, 0.0, 0.0, True, lambda: 0).record(10**6)  # no quota: unbounded


# ------------------------------------------------------------------ against Apache Kafka
class Probe:
    """One client id's requests, each on a new connection (no mute in between)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.client_id = f"mut-{uuid.uuid4().hex[:8]}"
        self.tag = uuid.uuid4().hex[:8]

    def ask(self, key: int, version: int, **body: Any) -> Any:
        async def go() -> Any:
            async with await Connection.open(self.host, self.port, client_id=self.client_id) as conn:
                return await conn.request(build(key, **body), version)
        return asyncio.run(go())

    def name(self, short: str) -> str:
        return f"{self.tag}-{short}"

    def remove_rate(self) -> None:
        """The quota gone again (the broker may be shared with other tests)."""
        self.ask(K.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[{
            "entity": [{"entity_type": "client-id", "entity_name": self.client_id}],
            "ops": [{"key": "controller_mutation_rate", "value": 0.0, "remove": True}]}])

    def set_rate(self, rate: float) -> None:
        """The client id's quota, once the broker describes it (Kafka's controller has it
        then, or a moment later)."""
        entity = [{"entity_type": "client-id", "entity_name": self.client_id}]
        resp = self.ask(K.ALTER_CLIENT_QUOTAS, 1, validate_only=False, entries=[{
            "entity": entity, "ops": [{"key": "controller_mutation_rate", "value": rate, "remove": False}]}])
        assert [e.error_code for e in resp.entries] == [0]
        deadline = time.monotonic() + 10
        while not self.ask(K.DESCRIBE_CLIENT_QUOTAS, 1, strict=True, components=[
                {"entity_type": "client-id", "match_type": 0, "match": self.client_id}]).entries:
            assert time.monotonic() < deadline, "the quota was never described"
            time.sleep(0.1)
        time.sleep(0.5)

    def create(self, version: int, topics: list[tuple[str, int]], validate_only: bool = False) -> tuple[int, list]:
        resp = self.ask(K.CREATE_TOPICS, version, timeout_ms=30_000, validate_only=validate_only, topics=[
            {"name": self.name(n), "num_partitions": p, "replication_factor": 1, "assignments": [], "configs": []}
            for n, p in topics])
        return resp.throttle_time_ms, sorted((t.name[9:], t.error_code, t.error_message) for t in resp.topics)

    def grow(self, version: int, topics: list[tuple[str, int]]) -> tuple[int, list]:
        resp = self.ask(K.CREATE_PARTITIONS, version, timeout_ms=30_000, validate_only=False, topics=[
            {"name": self.name(n), "count": c, "assignments": None} for n, c in topics])
        return resp.throttle_time_ms, sorted((t.name[9:], t.error_code, t.error_message) for t in resp.results)

    def delete(self, version: int, names: list[str]) -> tuple[int, list]:
        resp = self.ask(K.DELETE_TOPICS, version, timeout_ms=30_000, topic_names=[self.name(n) for n in names])
        return resp.throttle_time_ms, sorted((t.name[9:], t.error_code) for t in resp.responses)


def test_mutations_over_the_quota_are_refused_or_throttled_as_kafkas(any_broker: Any) -> None:
    """1 partition a second, a burst of 11: the same answers from kproto and Kafka 4.4.0 (the
    throttle times within the time the steps take)."""
    mutation_sequence(any_broker.bootstrap)


def mutation_sequence(bootstrap: str) -> None:
    """The steps of :func:`test_mutations_over_the_quota_are_refused_or_throttled_as_kafkas`
    and their answers, on the broker(s) of ``bootstrap``."""
    p = Probe(bootstrap)
    p.set_rate(1.0)
    try:
        _steps(p)
    finally:
        p.remove_rate()


def _steps(p: Probe) -> None:
    throttle, topics = p.create(7, [("probe", 5)], validate_only=True)  # validate_only counts: 11 -> 6
    assert (throttle, topics) == (0, [("probe", 0, None)])

    def owed(seconds: float) -> Any:  # a throttle time, less what the steps took so far
        return pytest.approx(seconds * 1000 - 1000, abs=1000)
    # a strict quota takes a topic while any credit is left: 6 -> 0 -> -4; c and d refused
    throttle, topics = p.create(7, [("a", 6), ("b", 4), ("c", 1), ("d", 1)])
    assert topics == [("a", 0, None), ("b", 0, None), ("c", THROTTLED, None), ("d", THROTTLED, None)]
    assert throttle == owed(4)
    throttle, topics = p.create(6, [("e", 1)], validate_only=True)
    assert (throttle, topics) == (owed(4), [("e", THROTTLED, None)])
    # v5 and before: permissive, done and throttled (-4 -> -6)
    assert p.create(5, [("f", 2)]) == (owed(6), [("f", 0, None)])
    assert p.grow(3, [("a", 8)]) == (owed(6), [("a", THROTTLED, None)])      # strict from v3
    assert p.grow(2, [("a", 8)]) == (owed(8), [("a", 0, None)])               # permissive: -8
    assert p.delete(5, ["b", "zz"]) == (owed(8), [("b", THROTTLED), ("zz", E.UNKNOWN_TOPIC_OR_PARTITION)])
    assert p.delete(4, ["b", "f"]) == (owed(14), [("b", 0), ("f", 0)])        # permissive: -14


def test_a_throttled_answer_mutes_its_connection(any_broker: Any) -> None:
    """KIP-219: the answer comes at once with throttle_time_ms; the next request on the
    connection is read only once that time is over (also for a version older than the ones
    whose clients throttle themselves)."""
    p = Probe(any_broker.bootstrap)
    p.set_rate(1.0)
    try:
        _pipelined(p)
    finally:
        p.remove_rate()


def _pipelined(p: Probe) -> None:
    assert p.create(7, [("probe", 1)], validate_only=True) == (0, [("probe", 0, None)])  # 11 -> 10
    req = kproto.request(K.CREATE_TOPICS).cls

    def create(name: str, partitions: int) -> Any:
        return req(timeout_ms=30_000, validate_only=True, topics=[req.CreatableTopic(
            name=p.name(name), num_partitions=partitions, replication_factor=1, assignments=[], configs=[])])
    api = kproto.request(K.API_VERSIONS).cls(client_software_name="t", client_software_version="1")
    asked = [(K.CREATE_TOPICS, 2, create("x", 12)), (K.CREATE_TOPICS, 2, create("y", 1)), (K.API_VERSIONS, 3, api)]
    with socket.create_connection((p.host, p.port)) as s:
        s.settimeout(20)
        sent = time.monotonic()
        for cid, (key, ver, obj) in enumerate(asked):  # all three at once
            s.sendall(encode_request(RequestHeader(request_api_key=key, request_api_version=ver,
                                                   correlation_id=cid, client_id=p.client_id), obj))
        got = []
        for key, ver, _ in asked:
            size = struct.unpack(">i", _read(s, 4))[0]
            _, resp = decode_response(_read(s, size), key, ver, size_prefix=False)
            got.append((time.monotonic() - sent, getattr(resp, "throttle_time_ms", None)))
    # 10 - 12: 2 s owed, answered at once (v2 too); the second request is read 2 s later, its
    # 1 more: 1 s owed; the third waits for that
    (t1, th1), (t2, th2), (t3, _) = got
    assert t1 < 1.0 and th1 == pytest.approx(2000, abs=300)
    assert t2 == pytest.approx(2.0, abs=0.5) and th2 == pytest.approx(1000, abs=300)
    assert t3 == pytest.approx(3.0, abs=0.6)


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out
