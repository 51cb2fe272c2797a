"""Run each client fuzz target's TestOneInput over a few hundred inputs so CI exercises them."""
from __future__ import annotations

import importlib.util
import random

import pytest

from kproto.client.assignors import Subscription, encode_sticky_user_data
from kproto.client.consumer_protocol import encode_assignment, encode_subscription

from _client_vectors import REPO

TARGETS = ["fuzz_client_protocol", "fuzz_client_sasl", "fuzz_client_assignors"]


def _load(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "fuzz" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _seeds(name):
    if name == "fuzz_client_protocol":
        sub = Subscription(["a", "b"], b"u", [("a", 0), ("b", 2)], 4, "r")
        return [b"\x00" + encode_subscription(sub, v) for v in range(4)] + \
               [b"\x01" + encode_assignment([("a", 1), ("b", 0)], v) for v in range(4)] + \
               [b"\x02" + encode_sticky_user_data([("a", 1)], 3)]
    if name == "fuzz_client_sasl":
        return [b"\x01\x20\x01,s=QSXCR+Q6sek8bf92,i=4096", b"\x00\x10\x01xyz,s=AAAA,i=1v=AAAA"]
    return []


@pytest.mark.parametrize("name", TARGETS)
def test_fuzz_target(name):
    target = _load(name).TestOneInput
    rng = random.Random(f"kproto-{name}")
    inputs = list(_seeds(name))
    for seed in list(inputs):  # mutations of valid inputs reach deeper than pure noise
        for _ in range(40):
            b = bytearray(seed)
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            inputs.append(bytes(b[: rng.randint(1, len(b))]))
    inputs += [rng.randbytes(rng.randint(0, 300)) for _ in range(300)]
    for data in inputs:
        target(data)
