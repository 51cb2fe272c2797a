"""Connection: framing, correlation, pipelining, timeouts, version negotiation, SASL and TLS.

The sans-I/O core is tested on bytes; the asyncio layer against the scriptable fake broker of
``client_io_fakebroker`` (real brokers cannot be told to misbehave on cue).
"""
from __future__ import annotations

import asyncio
import shutil
import ssl
import struct
import subprocess

import pytest

import kproto
from kproto.client.connection import Connection
from kproto.client.protocol import (ApiVersionTable, BrokerError, ClientProtocol,
                                    ConnectionClosedError, NoCommonVersionError,
                                    RequestTimeoutError, SaslConfig, raise_for_error)
from kproto.client.sasl import SaslAuthenticationError
from kproto.errors import DecodeError, KprotoError
from kproto.framing import ResponseHeader, encode_response

from client_io_fakebroker import FakeBroker, api_versions_response

METADATA = kproto.request(3)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def metadata_request():
    return METADATA.cls(topics=None)


def response_frame(cid: int, body, api_key: int, version: int) -> bytes:
    return encode_response(ResponseHeader(correlation_id=cid), body, api_key, version)


# ---- sans-I/O ------------------------------------------------------------------------------

def test_protocol_correlates_split_and_coalesced_frames():
    proto = ClientProtocol("t")
    frames = [proto.encode(metadata_request(), 12, token=i) for i in range(3)]
    cids = [struct.unpack_from(">i", f, 8)[0] for f in frames]
    assert cids == [0, 1, 2]
    answers = b"".join(response_frame(c, kproto.response(3).cls(controller_id=c + 7), 3, 12) for c in cids)
    got = []
    for i in range(0, len(answers), 5):  # dribble the bytes in 5 at a time
        got += proto.feed(answers[i:i + 5])
    assert [t for t, _ in got] == [0, 1, 2]
    assert [r.controller_id for _, r in got] == [7, 8, 9]
    assert not proto.in_flight


def test_protocol_reports_the_throttle_the_client_must_wait_out():
    proto = ClientProtocol()
    cids = [struct.unpack_from(">i", proto.encode(metadata_request(), v, token=v), 8)[0] for v in (12, 5, 12)]
    answers = [response_frame(c, kproto.response(3).cls(throttle_time_ms=ms), 3, v)
               for c, v, ms in zip(cids, (12, 5, 12), (200, 900, 100))]
    proto.feed(answers[0] + answers[1])
    # v5 answers predate KIP-219: the broker delayed them itself, the client does not wait again
    assert proto.take_throttle() == 200 and proto.take_throttle() == 0
    proto.feed(answers[2])
    assert proto.take_throttle() == 100


def test_protocol_rejects_out_of_order_correlation_id():
    proto = ClientProtocol()
    for token in "abc":
        proto.encode(metadata_request(), 12, token=token)
    # "a" is answered, then an answer to "c" arrives before "b"'s: the stream is broken
    stream = response_frame(0, kproto.response(3).cls(), 3, 12) + response_frame(2, kproto.response(3).cls(), 3, 12)
    assert [t for t, _ in proto.feed(stream)] == ["a"]
    assert "correlation id 2, expected 1" in str(proto.broken)
    with pytest.raises(DecodeError):
        proto.feed(b"")


def test_protocol_rejects_unsolicited_response():
    proto = ClientProtocol()
    assert proto.feed(response_frame(0, kproto.response(3).cls(), 3, 12)) == []
    assert "no request in flight" in str(proto.broken)


def test_protocol_rejects_oversized_frame():
    proto = ClientProtocol(max_frame=1000)
    proto.encode(metadata_request(), 12, token=0)
    assert proto.feed(struct.pack(">i", 10**9)) == []  # nothing allocated for it
    assert "out of range" in str(proto.broken)


def test_protocol_decode_error_stays_with_its_request():
    proto = ClientProtocol()
    proto.encode(metadata_request(), 12, token="bad")
    proto.encode(metadata_request(), 12, token="good")
    bad = struct.pack(">ii", 5, 0) + b"\x00"  # a correlation id and one useless byte
    good = response_frame(1, kproto.response(3).cls(cluster_id="c"), 3, 12)
    (t1, r1), (t2, r2) = proto.feed(bad + good)
    assert t1 == "bad" and isinstance(r1, DecodeError)
    assert t2 == "good" and r2.cluster_id == "c"


def test_protocol_ignores_trailing_bytes_like_kafka_clients():
    # librdkafka's mock appends a stray byte to flexible responses; Kafka's clients read past it.
    proto = ClientProtocol()
    proto.encode(metadata_request(), 12, token=0)
    frame = response_frame(0, kproto.response(3).cls(cluster_id="x"), 3, 12)
    frame = struct.pack(">i", len(frame) - 4 + 1) + frame[4:] + b"\x00"
    [(_, resp)] = proto.feed(frame)
    assert resp.cluster_id == "x"


@pytest.mark.parametrize("version", [0, 1, 3])
def test_sync_group_error_with_a_null_assignment_keeps_the_error(version):
    # librdkafka's mock answers every SyncGroup error with assignment -1, which the field does
    # not allow: the error is kept; a null beside no error stays a DecodeError.
    req = kproto.request(14).cls(group_id="g", generation_id=1, member_id="m")
    throttle = struct.pack(">i", 7) if version >= 1 else b""
    for error, expected in ((42, 42), (0, DecodeError)):
        proto = ClientProtocol()
        proto.encode(req, version, token=0)
        body = struct.pack(">i", 0) + throttle + struct.pack(">hi", error, -1)
        [(_, resp)] = proto.feed(struct.pack(">i", len(body)) + body)
        if expected is DecodeError:
            assert isinstance(resp, DecodeError) and "null" in str(resp)
        else:
            assert resp.error_code == expected and resp.assignment == b""
            assert resp.throttle_time_ms == (7 if version >= 1 else 0)
    proto = ClientProtocol()  # anything else that does not decode is still refused
    proto.encode(req, version, token=0)
    body = struct.pack(">i", 0) + throttle + struct.pack(">hi", 42, -2)
    [(_, resp)] = proto.feed(struct.pack(">i", len(body)) + body)
    assert isinstance(resp, DecodeError)


def test_protocol_correlation_id_wraps():
    proto = ClientProtocol()
    proto._next_id = 2**31 - 1
    a = proto.encode(metadata_request(), 1, expect_response=False)
    b = proto.encode(metadata_request(), 1, expect_response=False)
    assert struct.unpack_from(">i", a, 8)[0] == 2**31 - 1
    assert struct.unpack_from(">i", b, 8)[0] == 0
    assert not proto.in_flight  # no response expected, nothing to correlate


def test_api_versions_unsupported_version_answers():
    proto = ClientProtocol()
    req = kproto.request(18).cls()
    # A broker answering in v0 form (KIP-511) with its ApiVersions range.
    proto.encode(req, 3, token=0)
    v0 = response_frame(0, api_versions_response({18: (0, 2)}, error_code=35), 18, 0)
    [(_, resp)] = proto.feed(v0)
    assert resp.error_code == 35 and [(a.api_key, a.max_version) for a in resp.api_keys] == [(18, 2)]
    # The malformed body librdkafka's mock sends: error, compact count "0", an entry, throttle.
    proto.encode(req, 3, token=1)
    body = struct.pack(">hB", 35, 1) + struct.pack(">hhh", 18, 0, 2) + struct.pack(">i", 0)
    [(_, resp)] = proto.feed(struct.pack(">ii", 4 + len(body), 1) + body)
    assert resp.error_code == 35 and resp.api_keys == []


def test_version_table_picks_highest_common():
    table = ApiVersionTable({3: range(0, 20), 1: range(4, 8), 18: range(0, 3)})
    # the client's own top (Metadata 13), not whatever the broker or the schemas go up to
    assert table.pick(3) == min(13, kproto.request(3).valid_versions[-1])
    assert table.pick(1) == 7
    assert table.pick(1, range(0, 8)) == 7
    assert table.supported(18) == range(0, 3)
    with pytest.raises(NoCommonVersionError):
        table.pick(1, range(0, 6))  # the client fetches from v7 (sessions)
    with pytest.raises(NoCommonVersionError):
        table.pick(0)  # the broker lists no Produce
    capped = ApiVersionTable(table.broker, caps={3: 9})
    assert capped.pick(3) == 9


def test_raise_for_error_names_the_code():
    raise_for_error(0)
    with pytest.raises(BrokerError, match=r"NOT_LEADER_OR_FOLLOWER \[6\]") as e:
        raise_for_error(6, "Produce")
    assert e.value.code == 6 and isinstance(e.value, KprotoError)


# ---- asyncio -------------------------------------------------------------------------------

def test_pipelined_requests_are_matched_in_order():
    async def main():
        def handler(header, body):
            if header.request_api_key == 3:
                return kproto.response(3).cls(controller_id=header.correlation_id)
            return NotImplemented

        async with FakeBroker(handler, delay=0.001) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            futs = [conn.send(metadata_request()) for _ in range(50)]
            assert conn.in_flight == 50
            answers = await asyncio.gather(*futs)
            await conn.close()
            return fb, answers, futs

    fb, answers, _ = run(main())
    assert [a.controller_id for a in answers] == list(range(1, 51))  # id 0 was ApiVersions
    assert fb.max_queued > 1  # requests really were in flight together


@pytest.mark.parametrize("version, held", [(12, True), (5, False)])
def test_a_throttled_answer_holds_the_next_requests_back(version, held):
    async def main():
        seen = []

        def handler(header, body):
            if header.request_api_key == 3:
                seen.append(asyncio.get_running_loop().time())
                return kproto.response(3).cls(throttle_time_ms=400 if len(seen) == 1 else 0)
            return NotImplemented

        async with FakeBroker(handler) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            await conn.request(metadata_request(), version)
            pipelined = [conn.send(metadata_request(), version) for _ in range(2)]
            await asyncio.gather(*pipelined)
            await conn.close()
        return seen

    seen = run(main())
    assert len(seen) == 3 and seen[1] <= seen[2]
    assert (seen[1] - seen[0] >= 0.38) == held


def test_negotiates_versions_and_uses_them():
    async def main():
        versions = {18: (0, 3), 3: (1, 9)}
        async with FakeBroker(lambda h, b: kproto.response(3).cls() if h.request_api_key == 3 else NotImplemented,
                              versions=versions) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            await conn.request(metadata_request())
            await conn.close()
            return [(h.request_api_key, h.request_api_version) for h, _ in fb.requests]

    # ApiVersions v4 is refused (v0-form answer naming v3), then v3, then Metadata at v9.
    assert run(main()) == [(18, 4), (18, 3), (3, 9)]


def test_api_versions_falls_back_to_v0_when_answer_names_nothing():
    async def main():
        def handler(header, body):
            if header.request_api_key == 18 and header.request_api_version > 0:
                cls = kproto.response(18).cls
                return ("v0", cls(error_code=35))
            return NotImplemented

        async with FakeBroker(handler, versions={18: (0, 0), 3: (0, 12)}) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            await conn.close()
            return conn.versions, [h.request_api_version for h, _ in fb.requests]

    versions, sent = run(main())
    assert sent == [4, 0]
    assert versions.pick(3) == 12


def test_timeout_closes_connection_and_fails_followers():
    async def main():
        async with FakeBroker(lambda h, b: None if h.request_api_key == 3 else NotImplemented) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            other = conn.send(metadata_request())
            with pytest.raises(RequestTimeoutError):
                await conn.request(metadata_request(), timeout=0.2)
            assert conn.closed
            with pytest.raises(RequestTimeoutError):
                await other  # lost with the connection
            with pytest.raises(ConnectionClosedError):
                conn.send(metadata_request())
            await conn.close()

    run(main())


def test_broker_closing_fails_requests_in_flight():
    async def main():
        async with FakeBroker(lambda h, b: "close" if h.request_api_key == 3 else NotImplemented) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            with pytest.raises(ConnectionClosedError, match="closed the connection"):
                await conn.request(metadata_request())
            await conn.close()

    run(main())


def test_wrong_correlation_id_breaks_the_connection():
    async def main():
        def handler(header, body):
            if header.request_api_key == 3:
                return (header.correlation_id + 5, kproto.response(3).cls())
            return NotImplemented

        async with FakeBroker(handler) as fb:
            conn = await Connection.open("127.0.0.1", fb.port)
            with pytest.raises(ConnectionClosedError, match="correlation id"):
                await conn.request(metadata_request())
            assert conn.closed
            await conn.close()

    run(main())


def test_connect_refused_is_a_kproto_error():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(KprotoError, match="cannot connect"):
            await Connection.open("127.0.0.1", port, connect_timeout=2)

    run(main())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_authentication(mechanism):
    async def main():
        async with FakeBroker(sasl_users={"alice": "s3cret"}, mechanisms=(mechanism,)) as fb:
            conn = await Connection.open("127.0.0.1", fb.port, sasl=SaslConfig(mechanism, "alice", "s3cret"))
            await conn.close()
            with pytest.raises(SaslAuthenticationError):
                await Connection.open("127.0.0.1", fb.port, sasl=SaslConfig(mechanism, "alice", "wrong"))
            return fb.authenticated, [h.request_api_key for h, _ in fb.requests]

    authenticated, keys = run(main())
    assert authenticated == ["alice"]
    # ApiVersions, SaslHandshake, then one (PLAIN) or two (SCRAM) SaslAuthenticate round trips
    rounds = 1 if mechanism == "PLAIN" else 2
    assert keys[:2 + rounds] == [18, 17] + [36] * rounds


def test_sasl_mechanism_refused():
    async def main():
        async with FakeBroker(mechanisms=("PLAIN",)) as fb:
            with pytest.raises(SaslAuthenticationError, match="broker offers PLAIN"):
                await Connection.open("127.0.0.1", fb.port, sasl=SaslConfig("SCRAM-SHA-256", "a", "b"))

    run(main())


def test_tls(tmp_path):
    openssl = shutil.which("openssl")
    assert openssl, "the TLS test needs the openssl command to make a throwaway certificate"
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))

    async def main():
        async with FakeBroker(lambda h, b: kproto.response(3).cls(cluster_id="tls") if h.request_api_key == 3
                              else NotImplemented, ssl_context=server_ctx) as fb:
            conn = await Connection.open("127.0.0.1", fb.port, ssl=client_ctx)
            resp = await conn.request(metadata_request())
            await conn.close()
            # A client that does not trust the certificate must not get through.
            with pytest.raises(KprotoError):
                await Connection.open("127.0.0.1", fb.port, ssl=ssl.create_default_context(), connect_timeout=5)
            return resp

    assert run(main()).cluster_id == "tls"


def test_oauthbearer():
    async def main():
        async with FakeBroker(mechanisms=("OAUTHBEARER",)) as fb:
            fb.oauth_tokens["eyJhbGciOi.J9.sig-_x"] = "svc-orders"
            conf = SaslConfig("OAUTHBEARER", token="eyJhbGciOi.J9.sig-_x",
                              extensions={"traceId": "abc 123", "logicalCluster": "lkc-1"})
            conn = await Connection.open("127.0.0.1", fb.port, sasl=conf)
            await conn.close()
            with pytest.raises(SaslAuthenticationError,
                               match=r'SASL_AUTHENTICATION_FAILED: invalid_token; server said \{"status":"invalid_token"\}'):
                await Connection.open("127.0.0.1", fb.port, sasl=SaslConfig("OAUTHBEARER", token="expired"))
            return fb.authenticated, fb.oauth_extensions, [h.request_api_key for h, _ in fb.requests]

    authenticated, extensions, keys = run(main())
    assert authenticated == ["svc-orders"]
    assert extensions == [{"logicalCluster": "lkc-1", "traceId": "abc 123"}]
    # the refused one: ApiVersions, SaslHandshake, the initial response, then ^A after the error
    assert keys[-4:] == [18, 17, 36, 36]
    with pytest.raises(ValueError, match="needs a token"):
        SaslConfig("OAUTHBEARER")  # before any connection
    with pytest.raises(ValueError, match="b64token"):
        SaslConfig("OAUTHBEARER", token="not a token")


def test_cli_oauthbearer_token_from_a_file(tmp_path, capsys):
    from kproto.cli.main import main as cli_main

    token_file = tmp_path / "token"
    token_file.write_text("eyJ0b2tlbiJ9.e30.c2ln\n")

    port = {}

    def metadata(header, body):
        if header.request_api_key != 3:
            return NotImplemented
        cls = kproto.response(3).cls
        return cls(brokers=[cls.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=port["fb"])])

    async def main():
        async with FakeBroker(metadata, mechanisms=("OAUTHBEARER",)) as fb:
            port["fb"] = fb.port
            fb.oauth_tokens["eyJ0b2tlbiJ9.e30.c2ln"] = "cli-user"
            common = ["api-versions", "--bootstrap", f"127.0.0.1:{fb.port}", "--sasl-mechanism", "OAUTHBEARER"]
            ok = await asyncio.to_thread(cli_main, [*common, "--sasl-token", f"@{token_file}"])
            bad = await asyncio.to_thread(cli_main, [*common, "--sasl-token", "wrong"])
            return ok, bad, fb.authenticated

    ok, bad, authenticated = run(main())
    assert (ok, bad, authenticated) == (0, 1, ["cli-user"])
    assert "SASL_AUTHENTICATION_FAILED" in capsys.readouterr().err
