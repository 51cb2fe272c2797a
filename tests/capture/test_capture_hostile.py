"""Hostile captures (issue 19): a packet time past any calendar, packets of a link type kproto
does not read, a decompression bomb inside a Produce request. Each is reported, none crashes,
and the CLI's exit status says when the file itself could not be read."""
from __future__ import annotations

import io
import json
import struct
import time
from contextlib import redirect_stdout

import pytest

import kproto
from kproto.capture import iter_exchanges
from kproto.capture.records_view import records_json
from kproto.cli.main import main

from fuzz_support import zstd_bomb
from pcapgen import Conversation, request_frame, response_frame, write_pcap, write_pcapng


def _cli(path, *argv):
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["decode-pcap", "--no-progress", *argv, str(path)])
    return rc, buf.getvalue()


def _conversation():
    conv = Conversation()
    conv.send(True, request_frame(18, 0, 1))
    conv.send(False, response_frame(18, 0, 1))
    conv.close()
    return conv


def test_packet_time_past_any_calendar(tmp_path):
    frames = _conversation().frames()
    # a damaged pcapng block: a time in seconds (tsresol 10^0) far past year 9999
    frames = [(1e15 if i == 3 else ts, f) for i, (ts, f) in enumerate(frames)]
    path = tmp_path / "future.pcapng"
    path.write_bytes(write_pcapng(frames, tsresol=0))
    (ex,) = iter_exchanges(str(path))
    assert ex.to_json()["ts"] == "1000000000000000.0s"
    for fmt in ("jsonl", "text"):
        rc, out = _cli(path, "--format", fmt)
        assert rc == 0 and "1000000000000000.0s" in out


def test_unknown_link_type_is_a_problem_and_a_non_zero_exit(tmp_path, capsys):
    path = tmp_path / "odd.pcap"
    frames = _conversation().frames()
    path.write_bytes(write_pcap(frames, linktype=147))  # a user DLT
    rc, out = _cli(path, "--format", "jsonl", "--port", "9092")
    assert rc == 1 and out == ""
    assert f"link type 147 is not one kproto reads: {len(frames)} packets not read" in \
        capsys.readouterr().err


def test_bomb_in_a_produce_request_is_reported_quickly(tmp_path):
    req = kproto.request(0)
    part = req.classes["PartitionProduceData"](index=0, records=zstd_bomb(255))
    body = req.cls(acks=1, timeout_ms=100, topic_data=[
        req.classes["TopicProduceData"](name="t", partition_data=[part])])
    conv = Conversation()
    conv.send(True, request_frame(0, 9, 1, body))
    conv.send(False, response_frame(0, 9, 1))
    conv.close()
    path = tmp_path / "bomb.pcap"
    path.write_bytes(write_pcap(conv.frames()))
    t = time.monotonic()
    rc, out = _cli(path, "--format", "jsonl", "--records")
    assert rc == 0 and time.monotonic() - t < 10
    (doc,) = map(json.loads, out.splitlines())
    view = doc["request"]["topicData"][0]["partitionData"][0]["records"]
    assert view["records"] == [] and "budget" in view["errors"][0]["error"]
    assert records_json(zstd_bomb(255))["errors"]


# -- the same classes on the shared real captures, mutated ---------------------------------------

def _shared(name: str) -> bytes:
    from capture_support import CAPTURES

    return (CAPTURES / name).read_bytes()


def test_shared_capture_with_a_bogus_link_type(tmp_path, capsys):
    data = bytearray(_shared("kafka_python_tansu.pcap"))
    struct.pack_into("<I", data, 20, 147)  # the global header's link type
    path = tmp_path / "bogus.pcap"
    path.write_bytes(bytes(data))
    rc, out = _cli(path, "--format", "jsonl")
    assert rc == 1 and out == ""
    assert "link type 147 is not one kproto reads" in capsys.readouterr().err


def test_shared_pcapng_with_a_damaged_timestamp(tmp_path):
    data = bytearray(_shared("java_tansu.pcapng"))
    pos = 0
    while pos < len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        if btype == 6:  # an enhanced packet block: a timestamp high word past year 9999
            struct.pack_into("<I", data, pos + 12, 0xFFFF0000 | struct.unpack_from("<I", data, pos + 12)[0])
        pos += blen
    path = tmp_path / "damaged-time.pcapng"
    path.write_bytes(bytes(data))
    for fmt in ("jsonl", "text"):
        rc, out = _cli(path, "--format", fmt)
        assert rc == 0 and out.count("\n") > 10  # the rest of the capture is decoded
    exchanges = list(iter_exchanges(str(path)))
    assert exchanges and all(e.to_json()["ts"].endswith("s") for e in exchanges)
    assert sum(1 for e in exchanges if e.response is not None) > 10


@pytest.mark.parametrize("declared, written", [(1, 101), (101, 0), (276, 12)])
def test_packets_that_do_not_parse_under_their_link_type_are_a_capture_problem(
        tmp_path, capsys, declared, written):
    frames = _conversation().frames(written)  # raw IP called Ethernet, and the like
    path = tmp_path / "mislabelled.pcap"
    path.write_bytes(write_pcap(frames, linktype=declared))
    rc, out = _cli(path, "--format", "jsonl", "--port", "9092")
    assert rc == 1 and out == ""
    assert (f"{len(frames)} of {len(frames)} packets do not parse under link type {declared}"
            in capsys.readouterr().err)


def test_a_few_unparseable_packets_are_no_capture_problem(tmp_path, capsys):
    frames = _conversation().frames()
    frames[1:1] = [(frames[0][0], b"\x00" * 10)]  # one runt frame among many
    path = tmp_path / "runt.pcap"
    path.write_bytes(write_pcap(frames))
    rc, out = _cli(path, "--format", "jsonl", "--port", "9092")
    assert rc == 0 and out and "do not parse" not in capsys.readouterr().err
