"""Capture decoding throughput: kproto vs tshark on the largest capture of $KPROTO_CAPTURES.

Measures MB/s of capture file decoded (best of N runs) for:
  * kproto exchanges: reassembly, framing, pairing, every body decoded (the Python API);
  * kproto jsonl: the same plus one JSON line per exchange (what ``decode-pcap`` writes);
  * kproto jsonl+records: plus every records field expanded into batches and records;
  * tshark: ``tshark -r FILE -d tcp.port==P,kafka -Y kafka -T json`` to /dev/null (a process,
    so its start-up is included; the start-up of ``tshark -v`` is shown for reference).
and the ratio kproto/tshark. Run: ``python benchmarks/bench_capture.py [--repeat N] [FILE]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kproto.capture import BodyDecoder, CaptureDecoder, exchange_to_json, read_packets  # noqa: E402
from kproto.capture.records_view import records_json  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CAPTURES = Path(os.environ.get("KPROTO_CAPTURES", REPO.parent / "shared" / "captures"))


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _kproto(path: Path, ports, mode: str) -> int:
    dec = CaptureDecoder(ports, decode=BodyDecoder())
    n = 0
    convert = records_json if mode == "records" else None
    for ex in dec.feed_all(read_packets(path)):
        if mode != "exchanges":
            json.dumps(exchange_to_json(ex, records=convert))
        n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="capture (default: the largest one in $KPROTO_CAPTURES)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.file:
        path = Path(args.file)
        ports = None
    else:
        path = max((p for p in CAPTURES.iterdir() if p.suffix in (".pcap", ".pcapng")),
                   key=lambda p: p.stat().st_size)
        ports = json.loads(path.with_suffix(".truth.json").read_text())["kafka_ports"]
    size_mb = path.stat().st_size / 1e6
    print(f"capture {path.name}: {size_mb:.2f} MB, best of {args.repeat}")
    rows = []
    for mode in ("exchanges", "jsonl", "records"):
        _kproto(path, ports, mode)  # warm up: codecs compile on first use
        t = _best(lambda: _kproto(path, ports, mode), args.repeat)
        rows.append((f"kproto {mode}", t))
    tshark = shutil.which("tshark")
    if tshark is None:
        print("tshark not installed (apt-get install tshark): no comparison")
    else:
        ports = ports or []
        cmd = [tshark, "-r", str(path), "-Y", "kafka", "-T", "json"]
        for p in ports:
            cmd[1:1] = ["-d", f"tcp.port=={p},kafka"]
        run = lambda c: subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # noqa: E731
        rows.append(("tshark -T json", _best(lambda: run(cmd), args.repeat)))
        rows.append(("(tshark start-up, -v)", _best(lambda: run([tshark, "-v"]), args.repeat)))
    ref = dict(rows).get("tshark -T json")
    print(f"{'':24} {'seconds':>8} {'MB/s':>8} {'vs tshark':>10}")
    for label, t in rows:
        ratio = f"{ref / t:9.2f}x" if ref and not label.startswith("(") else ""
        print(f"{label:24} {t:8.3f} {size_mb / t:8.1f} {ratio:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
