"""Fuzz the SCRAM client with arbitrary server-first and server-final messages.

Only DecodeError (malformed message) and SaslAuthenticationError (rejected exchange) may escape.
Run: ``python fuzz/fuzz_client_sasl.py -runs=2000``.
"""
from __future__ import annotations

import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.client.sasl import SaslAuthenticationError, ScramClient
    from kproto.errors import DecodeError


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mech = "SCRAM-SHA-512" if fdp.ConsumeBool() else "SCRAM-SHA-256"
    c = ScramClient(mech, "user", "pencil", nonce="fyko", min_iterations=1, max_iterations=64)
    c.initial()
    first = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200))
    if fdp.ConsumeBool():
        first = b"r=fyko" + first  # get past the nonce check more often
    try:
        final = c.step(first)
        assert final.startswith(b"c=biws,r=fyko")
        c.step(fdp.ConsumeRemainingBytes())
        assert c.complete
    except (DecodeError, SaslAuthenticationError):
        return


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
