"""Fuzz the client-side parsers: consumer-protocol subscription/assignment bytes and the sticky
assignor's user data. Only DecodeError may escape, and whatever decodes must survive a round trip.

Run: ``python fuzz/fuzz_client_protocol.py -runs=2000``.
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.client.assignors import decode_sticky_user_data, encode_sticky_user_data
    from kproto.client.consumer_protocol import (
        decode_assignment, decode_subscription, encode_assignment, encode_subscription)
    from kproto.errors import DecodeError


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    kind, body = data[0] % 3, data[1:]
    if kind == 2:
        parts, gen = decode_sticky_user_data(body)  # never raises: Kafka falls back instead
        assert decode_sticky_user_data(encode_sticky_user_data(parts, gen))[0] == parts
        return
    decode, encode = (decode_subscription, encode_subscription) if kind == 0 else \
        (decode_assignment, encode_assignment)
    try:
        obj, version = decode(body)
    except DecodeError:
        return
    again, v2 = decode(encode(obj, version))
    assert v2 == min(version, 3)
    if kind == 1:
        # partitions may come back regrouped by topic, never changed
        assert sorted(again.partitions) == sorted(obj.partitions) and again.user_data == obj.user_data
    else:
        assert sorted(again.topics) == sorted(obj.topics)
        assert sorted(again.owned_partitions) == sorted(obj.owned_partitions)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
