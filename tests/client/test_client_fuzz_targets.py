"""Run the client fuzz targets' TestOneInput over mutations of valid consumer-protocol and SCRAM
inputs (random bytes for every target, fuzz_client_assignors included: tests/test_fuzz_targets_all.py)."""
from __future__ import annotations

import random

import pytest

from kproto.client.assignors import Subscription, encode_sticky_user_data
from kproto.client.consumer_protocol import encode_assignment, encode_subscription


def _seeds(name):
    if name == "fuzz_client_protocol":
        sub = Subscription(["a", "b"], b"u", [("a", 0), ("b", 2)], 4, "r")
        return [b"\x00" + encode_subscription(sub, v) for v in range(4)] + \
               [b"\x01" + encode_assignment([("a", 1), ("b", 0)], v) for v in range(4)] + \
               [b"\x02" + encode_sticky_user_data([("a", 1)], 3)]
    assert name == "fuzz_client_sasl"
    return [b"\x01\x20\x01,s=QSXCR+Q6sek8bf92,i=4096", b"\x00\x10\x01xyz,s=AAAA,i=1v=AAAA"]


@pytest.mark.parametrize("name", ["fuzz_client_protocol", "fuzz_client_sasl"])
def test_fuzz_target(name, fuzz_target):
    target = fuzz_target(name).TestOneInput
    rng = random.Random(f"kproto-{name}")
    inputs = list(_seeds(name))
    for seed in list(inputs):  # mutations of valid inputs reach deeper than pure noise
        for _ in range(40):
            b = bytearray(seed)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            inputs.append(bytes(b[: rng.randint(1, len(b))]))
    for data in inputs:
        target(data)
