"""A scriptable in-process broker for the connection tests (asyncio, loopback only).

It decodes requests with kproto's codec and answers through a handler, so the tests can make
it slow, silent, rude (wrong correlation ids, closed sockets) or picky (ApiVersions ranges,
SASL), which real brokers will not do on demand.
"""
from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
import re
import ssl
from pathlib import Path
from typing import Any, Callable, Optional

import kproto
from kproto.client import sasl as S
from kproto.framing import FrameBuffer, ResponseHeader, decode_request, encode_response


def api_versions_response(ranges: dict[int, tuple[int, int]], error_code: int = 0) -> Any:
    cls = kproto.response(18).cls
    return cls(error_code=error_code, api_keys=[
        cls.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(ranges.items())])


def metadata_response(port: int, topics: dict[str, tuple[Any, int]]) -> Any:
    """A MetadataResponse naming this one broker (node 1) as leader of every partition;
    ``topics``: name -> (topic id or None, partition count)."""
    cls = kproto.response(3).cls
    return cls(cluster_id="kproto-fake", controller_id=1,
               brokers=[cls.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port)],
               topics=[cls.MetadataResponseTopic(name=name, topic_id=tid, partitions=[
                   cls.MetadataResponsePartition(partition_index=p, leader_id=1, leader_epoch=0,
                                                 replica_nodes=[1], isr_nodes=[1])
                   for p in range(count)]) for name, (tid, count) in topics.items()])


#: What the fake advertises by default: every API kproto knows, at every version.
def all_versions() -> dict[int, tuple[int, int]]:
    out = {}
    for k in range(0, 100):
        try:
            v = kproto.request(k).valid_versions
        except KeyError:
            continue
        out[k] = (v.start, v[-1])
    return out


REFERENCE = Path(os.environ.get("KPROTO_REFERENCE",
                                 Path(__file__).resolve().parents[3] / "shared" / "reference"))


def kafka_ranges(release: str) -> dict[int, tuple[int, int]]:
    """API key -> (min, max) of every request Apache Kafka ``release`` (``3.9``, ``4.3.1``)
    defines, read from its own specs in ``$KPROTO_REFERENCE/kafka-<release>/message``: what a
    broker of that release advertises (4.x: KIP-896's raised minimums, e.g. Produce 3-13)."""
    out = {}
    for path in sorted((REFERENCE / f"kafka-{release}" / "message").glob("*Request.json")):
        text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)
        spec = json.loads(text)
        if spec.get("type") != "request" or spec.get("validVersions") in (None, "none"):
            continue
        lo, _, hi = spec["validVersions"].partition("-")
        out[spec["apiKey"]] = (int(lo), int(hi or lo))
    assert out, f"no Kafka {release} specs under {REFERENCE} (set KPROTO_REFERENCE)"
    return out


class ScramServer:
    """Server half of SCRAM (what Kafka's ``ScramSaslServer`` checks)."""

    def __init__(self, mechanism: str, users: dict[str, str], iterations: int = 4096) -> None:
        self.hash_name = S.SCRAM_MECHANISMS[mechanism][0]
        self.users = users
        self.iterations = iterations
        self.state = "first"
        self.complete = False

    def step(self, data: bytes) -> tuple[bytes, bool]:
        """(server message, ok)."""
        text = data.decode()
        if self.state == "first":
            gs2, _, bare = text.partition(",,")
            fields = dict(f.split("=", 1) for f in bare.split(","))
            self.user = S.username_from_sasl_name(fields["n"])
            if self.user not in self.users:
                return b"e=unknown-user", False
            self.salt = os.urandom(16)
            self.nonce = fields["r"] + "srv" + base64.b64encode(os.urandom(9)).decode()
            self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={self.iterations}"
            self.client_first_bare = bare
            self.state = "final"
            return self.server_first.encode(), True
        without_proof, _, proof_b64 = text.rpartition(",p=")
        fields = dict(f.split("=", 1) for f in without_proof.split(","))
        if fields.get("r") != self.nonce:
            return b"e=invalid-nonce", False
        salted = S.salted_password(self.hash_name, self.users[self.user], self.salt, self.iterations)
        auth = S.auth_message(self.client_first_bare, self.server_first, without_proof)
        stored = S.stored_key(self.hash_name, S.client_key(self.hash_name, salted))
        signature = S.client_signature(self.hash_name, stored, auth)
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof_b64), signature))
        if not hmac.compare_digest(S.digest(self.hash_name, client_key), stored):
            return b"e=invalid-proof", False
        self.complete = True
        server_sig = S.server_signature(self.hash_name, S.server_key(self.hash_name, salted), auth)
        return b"v=" + base64.b64encode(server_sig), True


Handler = Callable[[Any, Any], Any]


class FakeBroker:
    """``async with FakeBroker(handler) as fb: ... fb.port``.

    ``handler(header, body)`` returns a response body, ``None`` for no answer, ``"close"`` to
    drop the connection, or ``(correlation_id, body)`` to answer with another correlation id.
    ApiVersions, SaslHandshake and SaslAuthenticate are answered by the fake itself unless the
    handler answers them. ``delay`` holds every answer back that many seconds.
    """

    def __init__(self, handler: Optional[Handler] = None, *, versions: Optional[dict[int, tuple[int, int]]] = None,
                 sasl_users: Optional[dict[str, str]] = None, mechanisms: tuple[str, ...] = (),
                 ssl_context: Optional[ssl.SSLContext] = None, delay: float = 0.0) -> None:
        self.handler = handler or (lambda h, b: NotImplemented)
        self.versions = versions if versions is not None else all_versions()
        self.sasl_users = sasl_users or {}
        self.mechanisms = mechanisms
        self.ssl_context = ssl_context
        self.delay = delay
        self.requests: list[tuple[Any, Any]] = []
        self.max_queued = 0
        self.authenticated: list[str] = []
        self.oauth_tokens: dict[str, str] = {}
        self.oauth_extensions: list[dict[str, str]] = []

    async def __aenter__(self) -> "FakeBroker":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.server.close()
        await self.server.wait_closed()

    def _builtin(self, header: Any, body: Any, conn_state: dict) -> Any:
        key = header.request_api_key
        if key == 18:
            ver = header.request_api_version
            lo, hi = self.versions.get(18, (0, 0))
            if ver > hi:
                # KIP-511: answer in v0 form naming the ApiVersions range we support
                return ("v0", api_versions_response({18: (lo, hi)}, error_code=35))
            return api_versions_response(self.versions)
        if key == 17:
            ok = body.mechanism in self.mechanisms
            if ok and body.mechanism.startswith("SCRAM-"):
                conn_state["scram"] = ScramServer(body.mechanism, self.sasl_users)
            conn_state["mechanism"] = body.mechanism
            return kproto.response(17).cls(error_code=0 if ok else 33, mechanisms=list(self.mechanisms))
        if key == 36:
            cls = kproto.response(36).cls
            data = bytes(body.auth_bytes)
            if conn_state.get("mechanism") == "PLAIN":
                _, user, password = data.decode().split("\0")
                if self.sasl_users.get(user) != password:
                    return cls(error_code=58, error_message="Authentication failed: Invalid username or password")
                self.authenticated.append(user)
                return cls(auth_bytes=b"")
            if conn_state.get("mechanism") == "OAUTHBEARER":
                return self._oauthbearer(cls, data, conn_state)
            scram: ScramServer = conn_state["scram"]
            msg, ok = scram.step(data)
            if not ok:
                return cls(error_code=58, error_message=msg.decode())
            if scram.complete:
                self.authenticated.append(scram.user)
            return cls(auth_bytes=msg)
        return NotImplemented

    # Kafka's OAuthBearerClientInitialResponse grammar (RFC 7628), as its server parses it
    _OAUTH = re.compile(r"n,(a=(?P<authzid>[^,=]+))?,\x01(?P<kvpairs>([A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01")
    _AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")

    def _oauthbearer(self, cls: Any, data: bytes, conn_state: dict) -> Any:
        """OAuthBearerSaslServer: tokens in ``oauth_tokens`` (token -> principal) pass; a bad
        token gets the error document, then the client's ^A gets the failure."""
        if conn_state.get("oauth_failed"):
            assert data == b"\x01", data
            return cls(error_code=58, error_message="invalid_token")
        m = self._OAUTH.fullmatch(data.decode("utf-8"))
        assert m, f"malformed OAUTHBEARER initial response {data!r}"
        pairs = dict(kv.split("=", 1) for kv in m.group("kvpairs").split("\x01") if kv)
        auth = self._AUTH.fullmatch(pairs.pop("auth", ""))
        principal = self.oauth_tokens.get(auth.group("token")) if auth and auth.group("scheme") == "Bearer" else None
        if principal is None:
            conn_state["oauth_failed"] = True
            return cls(auth_bytes=b'{"status":"invalid_token"}')
        self.authenticated.append(principal)
        self.oauth_extensions.append(pairs)
        return cls(auth_bytes=b"")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameBuffer()
        state: dict = {}
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                frames.feed(data)
                batch = list(frames.frames())
                self.max_queued = max(self.max_queued, len(batch))
                for frame in batch:
                    header, body = decode_request(frame, size_prefix=False)
                    self.requests.append((header, body))
                    answer = self.handler(header, body)
                    if answer is NotImplemented:
                        answer = self._builtin(header, body, state)
                    if answer is NotImplemented or answer is None:
                        continue
                    if answer == "close":
                        return
                    key, ver, cid = header.request_api_key, header.request_api_version, header.correlation_id
                    if isinstance(answer, tuple) and answer[0] == "v0":
                        answer, ver = answer[1], 0
                    elif isinstance(answer, tuple):
                        cid, answer = answer
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    writer.write(encode_response(ResponseHeader(correlation_id=cid), answer, key, ver))
                    await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
