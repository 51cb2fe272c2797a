"""Captures read as streams (``tcpdump -w - | kproto decode-pcap -``): the same packets,
problems and exchanges as the whole file, each as soon as its record has arrived."""
from __future__ import annotations

import io
import json
import random
import select
import subprocess
import sys

import pytest

from capture_support import CAPTURES, capture_names
from kproto.capture import iter_exchanges
from kproto.capture.api import exchange_to_json
from kproto.capture.pcap import Packet, iter_packets, stream_packets


class Trickle(io.RawIOBase):
    """A pipe: reads return at most a few (random) bytes at a time."""

    def __init__(self, data: bytes, seed: int) -> None:
        self.data, self.pos, self.rnd = data, 0, random.Random(seed)

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        k = self.rnd.randint(1, 3000) if n < 0 else min(n, self.rnd.randint(1, 3000))
        out = self.data[self.pos:self.pos + k]
        self.pos += len(out)
        return out


def _norm(items) -> list:
    return [("packet", x.ts, x.linktype, bytes(x.data), x.orig_len, x.index) if isinstance(x, Packet)
            else ("problem", x.reason, x.index, x.position) for x in items]


@pytest.mark.parametrize("name", capture_names())
def test_stream_gives_what_the_file_gives_even_cut_anywhere(name):
    data = (CAPTURES / name).read_bytes()
    rnd = random.Random(name)
    for cut in [len(data)] + sorted(rnd.randrange(1, len(data)) for _ in range(12)):
        whole = _norm(iter_packets(data[:cut]))
        assert _norm(stream_packets(Trickle(data[:cut], cut))) == whole, cut
        if cut == len(data):
            assert all(x[0] == "packet" for x in whole) and len(whole) > 10


def test_implausible_lengths_and_empty_streams_are_problems():
    import struct

    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    [problem] = stream_packets(io.BytesIO(head + struct.pack("<IIII", 0, 0, 1 << 30, 60)))
    assert "not plausible" in problem.reason and problem.position == 24
    assert [p.reason for p in stream_packets(io.BytesIO(b""))] == ["empty stream"]
    assert "not a pcap" in next(stream_packets(io.BytesIO(b"GET / HTTP/1.1\r\n"))).reason


def test_iter_exchanges_reads_a_binary_stream():
    name = "kafka_python_tansu.pcap"
    data = (CAPTURES / name).read_bytes()
    from_file = [exchange_to_json(ex) for ex in iter_exchanges(str(CAPTURES / name))]
    from_stream = [exchange_to_json(ex) for ex in iter_exchanges(Trickle(data, 7))]
    assert from_stream == from_file and len(from_file) == 25


def test_cli_decodes_stdin_as_it_arrives():
    name = "java_tansu.pcapng"
    data = (CAPTURES / name).read_bytes()
    want = subprocess.run([sys.executable, "-m", "kproto.cli.main", "decode-pcap", str(CAPTURES / name),
                           "--format", "jsonl"], capture_output=True, check=True).stdout.splitlines()
    proc = subprocess.Popen([sys.executable, "-m", "kproto.cli.main", "decode-pcap", "-", "--format", "jsonl"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        proc.stdin.write(data[: len(data) * 3 // 4])
        proc.stdin.flush()
        # exchanges come out while the stream is still open
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "nothing decoded before the end of the stream"
        first = proc.stdout.readline()
        assert json.loads(first)["api_name"]
        proc.stdin.write(data[len(data) * 3 // 4:])
        proc.stdin.close()
        rest = proc.stdout.read().splitlines()
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    assert [first.rstrip(b"\n")] + rest == want


def test_damaged_captures_give_the_same_problems_as_streams():
    # bytes flipped in the first records of every capture: the stream stops where the whole
    # file stops, with the same problem (or, for a length no stream could wait for, at once)
    rnd = random.Random(5)
    heads = [(CAPTURES / n).read_bytes()[:4000] for n in capture_names()]
    differ = 0
    for _ in range(600):
        d = bytearray(rnd.choice(heads)[: rnd.randint(4, 4000)])
        for _ in range(rnd.randint(1, 4)):
            d[rnd.randrange(len(d))] = rnd.randrange(256)
        whole, streamed = _norm(iter_packets(bytes(d))), _norm(stream_packets(Trickle(bytes(d), 3)))
        if streamed != whole:
            # "not plausible" (pcap) or "implausible" (pcapng)
            assert streamed[:-1] == whole[:-1] and "plausible" in streamed[-1][1], \
                (whole[-1:], streamed[-1:])
            differ += 1
    assert differ < 60
