"""Helpers for the interop tests: the third-party peers in ``$KPROTO_PEERS`` (default
``../shared/peers``) and a blocking request/response socket for driving a broker from a test."""
from __future__ import annotations

import importlib
import os
import socket
import sys

import kproto
from kproto.framing import FrameBuffer, decode_response, encode_request

from _client_vectors import REPO

PEERS = os.environ.get("KPROTO_PEERS", str(REPO.parent / "shared" / "peers"))


def peer_module(name: str):
    """Import a launcher from the peers directory (``tansu``, ``mock_cluster``)."""
    sys.path.insert(0, PEERS)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(PEERS)


class Conn:
    """Blocking request/response over one socket (test scaffolding, not a client)."""

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.frames = FrameBuffer()
        self.correlation = 0

    def call(self, api_key: int, version: int, body):
        self.correlation += 1
        header = kproto.RequestHeader(request_api_key=api_key, request_api_version=version,
                                      correlation_id=self.correlation, client_id="kproto-test")
        self.sock.sendall(encode_request(header, body))
        while True:
            for frame in list(self.frames.frames()):
                h, resp = decode_response(frame, api_key, version, size_prefix=False)
                assert h.correlation_id == self.correlation
                return resp
            chunk = self.sock.recv(65536)
            assert chunk, "broker closed the connection"
            self.frames.feed(chunk)
