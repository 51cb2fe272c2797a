"""API versions newer than the schemas: decoded with the newest layout kproto knows, honestly.
(A real capture's exchanges relabelled newer than the schemas: test_capture_versions.py.)"""
from __future__ import annotations

import json

import kproto

from kproto.capture import BodyDecoder, CaptureDecoder, iter_exchanges
from kproto.codecs import KAFKA_VERSION
from capture_support import decode_pcap_cli
from pcapgen import Conversation, packets_of, request_frame, response_frame, write_pcap

PORT = 9092
HEARTBEAT = 12
_RESP_HEADER = kproto.message("ResponseHeader")
KAFKA = f"Kafka {KAFKA_VERSION}"


def _body(data: bytes, header, header_version: int) -> bytes:
    return data[header.decode_from(data, 0, header_version)[1]:]


def _heartbeat(version: int, corr: int, *, error_code: int = 0, req_extra: bytes = b"",
               resp_extra: bytes = b"", group_id: str = "g") -> tuple[bytes, bytes]:
    """A Heartbeat exchange at the newest known version, relabelled ``version``, bytes appended."""
    known = kproto.request(HEARTBEAT).valid_versions[-1]
    req = kproto.request(HEARTBEAT).cls(group_id=group_id, generation_id=7, member_id="m-1")
    frame = request_frame(HEARTBEAT, known, corr, req)
    frame = frame[:6] + version.to_bytes(2, "big") + frame[8:] + req_extra
    resp = response_frame(HEARTBEAT, known, corr, kproto.response(HEARTBEAT).cls(error_code=error_code))
    resp += resp_extra

    def resize(f: bytes) -> bytes:
        return (len(f) - 4).to_bytes(4, "big") + f[4:]
    return resize(frame), resize(resp)


def _run(pairs, **kw):
    conv = Conversation()
    for req, resp in pairs:
        conv.send(True, req)
        conv.send(False, resp)
    conv.close()
    dec = CaptureDecoder([PORT], decode=BodyDecoder(**kw))
    return {e.correlation_id: e for e in dec.feed_all(packets_of(conv.frames()))}, conv


def test_newer_version_fully_read_gets_a_note_not_a_problem():
    known = kproto.request(HEARTBEAT).valid_versions[-1]
    got, _ = _run([_heartbeat(known + 3, 1, error_code=27)])
    ex = got[1]
    assert not ex.problems and ex.unread == {} and ex.decoded_as == known
    assert ex.notes.reasons() == [
        f"Heartbeat v{known + 3} is newer than kproto's schemas ({KAFKA}, v0-{known}); request "
        f"and response decoded with the v{known} layout"]
    assert (ex.request.group_id, ex.request.generation_id, ex.request.member_id) == ("g", 7, "m-1")
    assert ex.errors == ["REBALANCE_IN_PROGRESS"]
    doc = ex.to_json()
    assert doc["api_version"] == known + 3 and doc["decoded_as"] == known and doc["unread"] is None
    assert doc["request"] == kproto.request(HEARTBEAT).to_json(ex.request, known)
    assert doc["response"]["errorCode"] == 27 and doc["notes"] == ex.notes.reasons()


def test_bytes_the_known_layout_leaves_are_reported_with_offset_and_hex():
    known = kproto.request(HEARTBEAT).valid_versions[-1]
    tail = bytes(range(1, 80))  # longer than what is kept
    got, _ = _run([_heartbeat(known + 1, 1, error_code=27, resp_extra=tail),
                   _heartbeat(known + 1, 2, req_extra=b"\xab\xcd")])
    ex = got[1]
    off, n, head = ex.unread["response"]
    body = _body(ex.response_data, _RESP_HEADER, 1)
    assert n == len(tail) and off == len(body) - len(tail) and head == tail[:64]
    assert ex.problems.reasons() == [
        f"response: {n} bytes at body offset {off} not understood: Heartbeat v{known + 1} is newer "
        f"than kproto's schemas ({KAFKA}, v0-{known}), and the v{known} layout explains only the "
        "bytes before them"]
    assert ex.response.error_code == 27 and ex.errors == ["REBALANCE_IN_PROGRESS"]  # part kept
    assert ex.notes and "request decoded" in ex.notes[0].reason
    assert "response" not in ex.notes[0].reason
    assert ex.to_json()["unread"] == {"response": {"offset": off, "length": n, "hex": tail[:64].hex()}}
    ex = got[2]
    assert list(ex.unread) == ["request"] and ex.unread["request"][1:] == (2, b"\xab\xcd")
    assert ex.problems[0].reason.startswith("request: 2 bytes at body offset")
    assert ex.request.member_id == "m-1" and "response decoded" in ex.notes[0].reason


def test_newer_apiversions_answered_with_a_v0_body():
    known = kproto.request(18).valid_versions[-1]
    req = request_frame(18, known, 1)
    req = req[:6] + (known + 1).to_bytes(2, "big") + req[8:]
    api = kproto.response(18).classes["ApiVersion"](api_key=18, min_version=0, max_version=known)
    resp = response_frame(18, 0, 1, kproto.response(18).cls(error_code=35, api_keys=[api]))
    ex = _run([(req, resp)])[0][1]
    assert not ex.problems and ex.decoded_as == known and ex.response_version == 0
    assert ex.errors == ["UNSUPPORTED_VERSION"] and ex.response.api_keys == [api]


def test_switched_off():
    known = kproto.request(HEARTBEAT).valid_versions[-1]
    got, conv = _run([_heartbeat(known + 1, 1)], best_effort=False)
    ex = got[1]
    assert ex.request is ex.response is ex.decoded_as is None and not ex.notes
    assert ex.problems.reasons() == [f"Heartbeat v{known + 1} is not a version {KAFKA} defines "
                                     f"(valid 0-{known}): body not decoded"]
    frames = packets_of(conv.frames())
    assert [e.decoded_as for e in iter_exchanges(frames, [PORT], best_effort=False)] == [None]
    assert [e.decoded_as for e in iter_exchanges(frames, [PORT])] == [known]


def test_cli_text_jsonl_and_switch(tmp_path):
    known = kproto.request(HEARTBEAT).valid_versions[-1]
    _, conv = _run([_heartbeat(known + 1, 1, resp_extra=b"\x01\x02")])
    pcap = tmp_path / "newer.pcap"
    pcap.write_bytes(write_pcap(conv.frames()))
    text = decode_pcap_cli(tmp_path, str(pcap), "--port", str(PORT), "--format", "text")
    assert f"Heartbeat v{known + 1} (as v{known}) corr=1" in text
    assert "i Heartbeat" in text and "! response: 2 bytes" in text and "0102" in text
    (doc,) = map(json.loads, decode_pcap_cli(tmp_path, str(pcap), "--port", str(PORT)).splitlines())
    assert doc["decoded_as"] == known and doc["unread"]["response"]["hex"] == "0102"
    assert doc["request"]["memberId"] == "m-1"
    (doc,) = map(json.loads, decode_pcap_cli(tmp_path, str(pcap), "--port", str(PORT),
                                  "--no-best-effort").splitlines())
    assert doc["decoded_as"] is None and doc["request"] is None and doc["unread"] is None
    assert "not a version" in doc["problems"][0]


def test_every_api_above_its_schema_with_mangled_bytes_never_raises():
    """Each API key at its newest version + 1, bodies cut, extended or flipped: the decoder keeps
    to its contract (DecodeErrors become problems; unread bytes always come with a problem)."""
    import random

    from kproto.capture import Endpoint, Exchange
    from kproto.codecs import api_keys

    rnd = random.Random(13)
    bd = BodyDecoder()
    client, broker = Endpoint(b"\x7f\0\0\1", 40000), Endpoint(b"\x7f\0\0\1", PORT)
    tried = decoded_as = 0
    for key in sorted(api_keys()):
        top = kproto.request(key).valid_versions[-1]
        req = request_frame(key, top, 5)[4:]
        req = req[:2] + (top + 1).to_bytes(2, "big") + req[4:]
        resp = response_frame(key, top, 5)[4:]
        for _ in range(4):
            r, s = bytearray(req), bytearray(resp)
            for b in (r, s):
                op = rnd.random()
                if op < 0.3:
                    b += rnd.randbytes(rnd.randrange(1, 9))
                elif op < 0.6 and len(b) > 10:
                    del b[rnd.randrange(10, len(b)):]
                elif len(b) > 10:
                    b[rnd.randrange(10, len(b))] ^= 0xFF
            ex = Exchange(client, broker, api_key=key, api_version=top + 1, correlation_id=5,
                          request_data=bytes(r), response_data=bytes(s))
            bd(ex)
            tried += 1
            decoded_as += ex.decoded_as == top
            for side in ("request", "response"):
                if side in ex.unread:
                    assert getattr(ex, side) is not None
                    assert any(p.startswith(f"{side}: {ex.unread[side][1]} bytes at body offset")
                               for p in ex.problems.reasons())
            json.dumps(ex.to_json())
    assert tried and decoded_as == tried


def test_resync_after_a_gap_finds_requests_newer_than_the_schemas():
    """A hole hides a frame boundary, and what follows is Heartbeat at versions the schemas do not
    define yet: the cutter still takes them as frame starts, they are paired and decoded."""
    from kproto.capture.frames import NEWER_VERSIONS

    known = kproto.request(HEARTBEAT).valid_versions[-1]
    pairs = [_heartbeat(known + 1 + i % NEWER_VERSIONS, 10 + i, group_id=f"group-{i}-" + "g" * 150)
             for i in range(6)]
    conv = Conversation()
    idx = conv.send(True, b"".join(q for q, _ in pairs), 50, ack=False)
    conv._pkt(False, conv.bseq, conv.cseq, 0x10)  # the broker acknowledges all of it
    conv.send(False, b"".join(r for _, r in pairs), 1000)
    conv.close()
    size = len(pairs[0][0])
    cut = size + size // 2  # inside request 11
    lost = set(idx[cut // 50:(2 * size + 20) // 50 + 1])  # its end and the start of request 12
    frames = [f for i, f in enumerate(conv.frames()) if i not in lost]
    for best_effort in (True, False):
        dec = CaptureDecoder([PORT], decode=BodyDecoder(best_effort=best_effort))
        by = {e.correlation_id: e for e in dec.feed_all(packets_of(frames))}
        assert any("not captured" in p for p in by[11].problems.reasons())
        assert 12 not in by or by[12].request_data is None  # its start is gone
        assert all(13 + i in by for i in range(3))  # every later one is found again
        for corr in (10, 13, 14, 15):
            ex = by[corr]
            assert ex.request_data is not None and ex.response_data is not None
            assert ex.api_version == known + 1 + (corr - 10) % NEWER_VERSIONS
            if best_effort:
                assert not ex.problems or corr == 13  # 13 carries the resync note
                assert ex.decoded_as == known and ex.request.member_id == "m-1"
            else:
                assert ex.decoded_as is None and "not a version" in ex.problems[-1].reason
        assert any("resynchronise" in p for p in by[13].problems.reasons())
