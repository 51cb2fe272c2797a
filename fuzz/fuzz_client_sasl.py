"""Fuzz the SCRAM client with arbitrary server-first and server-final messages, and the
OAUTHBEARER client with arbitrary server answers.

Only DecodeError (malformed message) and SaslAuthenticationError (rejected exchange) may escape.
Run: ``python fuzz/fuzz_client_sasl.py -runs=2000``.
"""
from __future__ import annotations

import base64
import os
import sys

import atheris

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    from kproto.client.sasl import OAuthBearerClient, SaslAuthenticationError, ScramClient
    from kproto.errors import DecodeError


def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    if fdp.ConsumeIntInRange(0, 3) == 0:
        o = OAuthBearerClient("eyJ.e30.sig")
        o.initial()
        try:
            answer = o.step(fdp.ConsumeBytes(fdp.remaining_bytes()))
            assert (answer is None) == o.complete and answer in (None, b"\x01")
            if answer is not None:
                o.step(b"")
                raise AssertionError("a second answer after a server error must be refused")
        except (DecodeError, SaslAuthenticationError):
            return
        return
    mech = "SCRAM-SHA-512" if fdp.ConsumeBool() else "SCRAM-SHA-256"
    c = ScramClient(mech, "user", "pencil", nonce="fyko", min_iterations=1, max_iterations=64)
    c.initial()
    # The parsers are regular expressions, which give coverage no gradient: a structured
    # server (well-formed pieces, fuzzed values, a correct signature now and then) reaches
    # every state; raw bytes still test the refusals.
    shape = fdp.ConsumeIntInRange(0, 2)
    if shape == 0:
        first = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200))
    else:
        nonce = b"fyko" + fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 12))
        salt = base64.b64encode(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16)))
        first = b"r=" + nonce + b",s=" + salt + b",i=%d" % fdp.ConsumeIntInRange(-2, 80)
        if shape == 2:
            first += fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8))
    try:
        final = c.step(first)
    except (DecodeError, SaslAuthenticationError):
        return
    assert final is not None and final.startswith(b"c=biws,r=fyko") and b",p=" in final
    ending = fdp.ConsumeIntInRange(0, 3)
    if ending == 0:  # the right signature: the exchange completes
        assert c._expected_server_signature is not None
        c.step(b"v=" + base64.b64encode(c._expected_server_signature))
        assert c.complete
        return
    if ending == 1:
        last = b"e=" + fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 20))
    elif ending == 2:
        last = b"v=" + base64.b64encode(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64)))
    else:
        last = fdp.ConsumeBytes(fdp.remaining_bytes())
    try:
        c.step(last)
    except (DecodeError, SaslAuthenticationError):
        return
    assert c.complete  # only a forged signature that matches could get here


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
