"""Fuzz both ends of KIP-227 fetch sessions with wire bytes.

The first byte picks the side and version:
- broker: the rest is a FetchRequest body, decoded by kproto's codec and served by a
  FetchSessionCache that holds one open session (a flag bit retargets the request at that
  session, so the incremental paths are reached); the response must encode.
- client: the rest is a FetchResponse body, handed to a FetchSessionHandler that has a request
  outstanding (full or incremental); it must answer True/False and build the next request.

Only DecodeError may escape. Run: ``python fuzz/fuzz_fetch_session.py -runs=2000``.
"""
from __future__ import annotations

import os
import random
import sys

import atheris

# runnable from a checkout without installing kproto
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    import kproto
    from kproto.codecs.primitives import Uuid
    from kproto.errors import DecodeError
    from kproto.fetch_session import FetchSessionCache, FetchSessionHandler, PartitionData, TopicPartition
    from kproto.fetch_session.messages import build_fetch_request
    from kproto.fetch_session.sim import SimulatedBroker

TOPIC_ID = Uuid(bytes(range(1, 17)))
REQ = kproto.request(1)
RESP = kproto.response(1)


def _wanted(n: int) -> dict[TopicPartition, PartitionData]:
    return {TopicPartition("t", p): PartitionData(TOPIC_ID, 10 + p, -1, 1000, 1, None) for p in range(n)}


def _fuzz_broker(version: int, retarget: bool, body: bytes) -> None:
    broker = SimulatedBroker(FetchSessionCache(max_entries=2, rng=random.Random(0)), record_bytes=3)
    broker.create_topic("t", 4, TOPIC_ID)
    for log in broker.logs.values():
        log.high_watermark = 20
    # Open a session the fuzzed request may continue.
    handler = FetchSessionHandler(0)
    builder = handler.new_builder()
    for tp, data in _wanted(3).items():
        builder.add(tp, data)
    opening = REQ.encode(build_fetch_request(builder.build(), version), version)
    handler.handle_response(RESP.decode(broker.handle(opening, version, 0), version), version)
    try:
        request = REQ.decode(body, version)
    except DecodeError:
        return
    if retarget and handler.next_metadata.session_id:
        request.session_id, request.session_epoch = handler.next_metadata
    try:
        data = REQ.encode(request, version)
    except kproto.EncodeError:
        return  # decoded values that this version cannot write back (e.g. tagged fields)
    RESP.decode(broker.handle(data, version, 1), version)


def _fuzz_client(version: int, incremental: bool, body: bytes) -> None:
    try:
        response = RESP.decode(body, version)
    except DecodeError:
        return
    handler = FetchSessionHandler(0)
    if incremental:
        handler.next_metadata = handler.next_metadata.new_incremental(12345)
    builder = handler.new_builder()
    for tp, data in _wanted(3).items():
        builder.add(tp, data)
    builder.build()
    result = handler.handle_response(response, version)
    assert result is True or result is False
    builder = handler.new_builder()
    for tp, data in _wanted(2).items():
        builder.add(tp, data)
    built = builder.build()
    assert set(built.session_partitions) == set(_wanted(2))


def TestOneInput(data: bytes) -> None:
    if len(data) < 1:
        return
    head, body = data[0], data[1:]
    version = 7 + (head >> 2) % 11          # 7..17: the versions with sessions
    flag = bool(head & 2)
    if head & 1:
        _fuzz_broker(version, flag, body)
    else:
        _fuzz_client(version, flag, body)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
