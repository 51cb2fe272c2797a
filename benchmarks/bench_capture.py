"""Capture decoding throughput, stage by stage: the largest capture of $KPROTO_CAPTURES, and all
captures of that folder and of ../shared/external/captures (many small files: per-file costs),
against tshark on the largest.

MB/s of capture file per CPU second (``time.process_time``; the machine is shared, so CPU time
rather than wall time), median of ``--repeat`` rounds, the stages of a round run one after the
other so that load bursts hit them all:
  * exchanges: reassembly, framing, pairing, every body decoded (``iter_exchanges``);
  * jsonl: ``kproto decode-pcap --format jsonl`` (its ``run``, output to /dev/null);
  * jsonl+records: the same with ``--records`` (records fields expanded into batches and records);
  * rows: the ``kafka-pcap`` Spark source's exchange rows as Arrow batches
    (``kproto.capture.table.exchange_batches``), without Spark;
  * record rows: its ``expand=records`` rows (``record_batches``);
  * tshark (largest capture only): ``tshark -r FILE -d tcp.port==P,kafka -Y kafka -T json`` to
    /dev/null, a process, so its start-up is included (``tshark -v`` shown for reference).
Run: ``python benchmarks/bench_capture.py [--repeat N] [FILE]``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kproto.capture import iter_exchanges  # noqa: E402
from kproto.capture.table import exchange_batches, record_batches  # noqa: E402
from kproto.cli import decode_pcap  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CAPTURES = Path(os.environ.get("KPROTO_CAPTURES", REPO.parent / "shared" / "captures"))
EXTERNAL = CAPTURES.parent / "external" / "captures"


def _cli(files: list[Path], *extra: str):
    parser = argparse.ArgumentParser()
    decode_pcap.register(parser.add_subparsers())
    argvs = [parser.parse_args(["decode-pcap", str(f), "--format", "jsonl", "--no-progress",
                                "-o", os.devnull, *extra]) for f in files]

    def run() -> None:
        with contextlib.redirect_stderr(io.StringIO()):
            for a in argvs:
                decode_pcap.run(a)
    return run


def stages(files: list[Path]) -> dict:
    def exchanges() -> None:
        for f in files:
            for _ in iter_exchanges(f):
                pass

    def rows() -> None:
        for f in files:
            for _ in exchange_batches(iter_exchanges(f), str(f)):
                pass

    def record_rows() -> None:
        for f in files:
            for _ in record_batches(iter_exchanges(f), str(f)):
                pass

    return {"exchanges": exchanges, "jsonl": _cli(files), "jsonl+records": _cli(files, "--records"),
            "rows": rows, "record rows": record_rows}


def cpu_medians(fns: dict, repeat: int) -> dict[str, float]:
    for fn in fns.values():
        fn()  # warm up: codecs compile on first use
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t = time.process_time()
            fn()
            times[name].append(time.process_time() - t)
    return {name: statistics.median(v) for name, v in times.items()}


def _tshark(path: Path, ports: list[int], repeat: int) -> dict[str, float]:
    tshark = shutil.which("tshark")
    if tshark is None:
        print("tshark not installed (apt-get install tshark): no comparison")
        return {}
    cmd = [tshark, "-r", str(path), "-Y", "kafka", "-T", "json"]
    for p in ports:
        cmd[1:1] = ["-d", f"tcp.port=={p},kafka"]

    def run(c: list[str]) -> float:
        t = time.perf_counter()
        subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return time.perf_counter() - t
    return {"tshark -T json (wall)": min(run(cmd) for _ in range(repeat)),
            "(tshark start-up, -v)": min(run([tshark, "-v"]) for _ in range(repeat))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", help="capture (default: the largest one in $KPROTO_CAPTURES)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    every = sorted(p for d in (CAPTURES, EXTERNAL) if d.is_dir() for p in d.rglob("*.pcap*"))
    if args.file:
        largest, ports = Path(args.file), []
    else:
        largest = max(every, key=lambda p: p.stat().st_size)
        ports = json.loads(largest.with_suffix(".truth.json").read_text())["kafka_ports"]
    sets = [(f"{largest.name}", [largest])]
    if not args.file:
        sets.append((f"all {len(every)} captures", every))
    print(f"MB/s of capture per CPU second, median of {args.repeat} rounds")
    for label, files in sets:
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"\n{label}: {mb:.2f} MB")
        print(f"{'':24} {'CPU s':>8} {'MB/s':>8}")
        for name, t in cpu_medians(stages(files), args.repeat).items():
            print(f"{name:24} {t:8.3f} {mb / t:8.1f}")
        if files == [largest]:
            for name, t in _tshark(largest, ports, args.repeat).items():
                print(f"{name:24} {t:8.3f} {'' if name.startswith('(') else f'{mb / t:8.1f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
