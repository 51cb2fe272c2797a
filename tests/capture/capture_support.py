"""Shared helpers: the captures of $KPROTO_CAPTURES with their truth and tshark summaries."""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CAPTURES = Path(os.environ.get("KPROTO_CAPTURES", REPO.parent / "shared" / "captures"))


def capture_names() -> list[str]:
    """Every capture file of the directory (each has NAME.truth.json beside it)."""
    if not CAPTURES.is_dir():
        return []
    return sorted(p.name for p in CAPTURES.iterdir() if p.suffix in (".pcap", ".pcapng"))


def stem(name: str) -> str:
    return name.rsplit(".", 1)[0]


@functools.lru_cache(maxsize=None)
def truth(name: str) -> dict:
    return json.loads((CAPTURES / f"{stem(name)}.truth.json").read_text())


@functools.lru_cache(maxsize=None)
def tshark_summary(name: str) -> dict:
    return json.loads((CAPTURES / "tshark" / f"{stem(name)}.summary.json").read_text())


@functools.lru_cache(maxsize=None)
def decoded(name: str, guess_ports: bool = False) -> tuple:
    """(exchanges, decoder) of a capture, decoded once per test session."""
    from kproto.capture import BodyDecoder, CaptureDecoder, read_packets

    ports = None if guess_ports else truth(name)["kafka_ports"]
    dec = CaptureDecoder(ports, decode=BodyDecoder())
    return tuple(dec.feed_all(read_packets(CAPTURES / name))), dec


ALL = capture_names()


def decode_pcap_cli(tmp_path, *argv) -> str:
    """What ``kproto decode-pcap ARGV`` writes (run in-process; it must exit 0)."""
    import argparse

    from kproto.cli import decode_pcap

    parser = argparse.ArgumentParser()
    decode_pcap.register(parser.add_subparsers())
    out = tmp_path / "out.txt"
    args = parser.parse_args(["decode-pcap", *argv, "-o", str(out)])
    assert args.func(args) == 0
    return out.read_text()
