"""Capture decoding throughput: kproto decode-pcap against tshark, capture by capture, and the
stages of kproto's decoding over all captures.

Captures: every pcap/pcapng of $KPROTO_CAPTURES (default ../shared/captures) and of
../shared/external/captures (many small files: per-file costs), or the files given.

MB/s of capture file per CPU second: the machine is shared, so CPU time rather than wall
time (``time.process_time`` for kproto, the child's rusage for tshark), median of
``--repeat`` rounds; a round runs every measurement once, one after the other, so that load
bursts hit them all.

Per capture:
  * exchanges: reassembly, framing, pairing, every body decoded (``iter_exchanges``);
  * jsonl: ``kproto decode-pcap --format jsonl`` (its ``run`` in this process, output to
    /dev/null);
  * tshark: ``tshark -r FILE -d tcp.port==P,kafka -Y kafka -T json`` to /dev/null, a process
    (start-up included): a full decode, every field of every Kafka message written as a JSON
    tree, the closest to decode-pcap's JSON lines (``-T ek`` writes the same fields; ``-V``
    writes text). P: the truth file's ``kafka_ports``, else the ports decode-pcap chose;
  * tshark - start-up: the same less tshark's CPU time on an empty capture (loading its
    dissectors and preferences), which a long capture spreads thin ("-" where what is left
    is within the start-up's noise, under a tenth of the whole);
  * ratio: decode-pcap's MB/s over tshark's (> 1: kproto is faster), with and without
    tshark's start-up.
Over all captures (one call each): exchanges, jsonl, jsonl+records (``--records``: records
fields expanded into batches and records), rows (the ``kafka-pcap`` Spark source's exchange
rows as Arrow batches, ``kproto.capture.table.exchange_batches``, without Spark) and record
rows (its ``expand=records`` rows, ``record_batches``).

decode-pcap has glibc's malloc keep freed memory for reuse in its process (see
``kproto.cli.decode_pcap``); measured in this process, every stage after its first run has
that setting too.

kproto's figures are those of its C accelerators where they are built (the capture decoder's
packet loop, its JSON body writer, the protocol decoder; see ``kproto.accelerators``):
``KPROTO_PURE=1 python benchmarks/bench_capture.py`` measures the pure Python paths.

tshark is not a Python package: install it with the system's packages (Debian:
``apt-get install tshark``); without it the comparison columns say so.
Run: ``python benchmarks/bench_capture.py [--repeat N] [FILE ...]``.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kproto.capture import CaptureDecoder, iter_exchanges  # noqa: E402
from kproto.capture.pcap import read_capture  # noqa: E402
from kproto.capture.table import exchange_batches, record_batches  # noqa: E402
from kproto.cli import decode_pcap  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CAPTURES = Path(os.environ.get("KPROTO_CAPTURES", REPO.parent / "shared" / "captures"))
EXTERNAL = CAPTURES.parent / "external" / "captures"


def _cli(files: list[Path], *extra: str) -> Callable[[], None]:
    parser = argparse.ArgumentParser()
    decode_pcap.register(parser.add_subparsers())
    argvs = [parser.parse_args(["decode-pcap", str(f), "--format", "jsonl", "--no-progress",
                                "-o", os.devnull, *extra]) for f in files]

    def run() -> None:
        with contextlib.redirect_stderr(io.StringIO()):
            for a in argvs:
                decode_pcap.run(a)
    return run


def _exchanges(files: list[Path]) -> Callable[[], None]:
    def run() -> None:
        for f in files:
            for _ in iter_exchanges(f):
                pass
    return run


def stages(files: list[Path]) -> dict[str, Callable[[], None]]:
    """Every kproto stage measured over ``files`` (one call: all of them)."""
    def rows() -> None:
        for f in files:
            for _ in exchange_batches(iter_exchanges(f), str(f)):
                pass

    def record_rows() -> None:
        for f in files:
            for _ in record_batches(iter_exchanges(f), str(f)):
                pass

    return {"exchanges": _exchanges(files), "jsonl": _cli(files),
            "jsonl+records": _cli(files, "--records"), "rows": rows, "record rows": record_rows}


def _cpu(fn: Callable[[], object]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def _child_cpu(cmd: list[str]) -> float:
    """User + system CPU seconds of running ``cmd`` (its output to /dev/null)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def kafka_ports(path: Path) -> list[int]:
    """The capture's broker ports: its truth file's, else those decode-pcap chose."""
    truth = path.with_name(path.name.split(".")[0] + ".truth.json")
    if truth.exists():
        return list(json.loads(truth.read_text())["kafka_ports"])
    decoder = CaptureDecoder()
    for _ in decoder.feed_capture(read_capture(str(path)), str(path)):
        pass
    decoder.finish()
    return sorted(decoder.chosen_ports)


def tshark_command(tshark: str, path: Path, ports: list[int]) -> list[str]:
    """The tshark full decode measured (see the module's docstring)."""
    cmd = [tshark, "-r", str(path)]
    for p in ports:
        cmd += ["-d", f"tcp.port=={p},kafka"]
    return cmd + ["-Y", "kafka", "-T", "json"]


def _empty_pcap(folder: str) -> str:
    path = os.path.join(folder, "empty.pcap")
    with open(path, "wb") as f:  # a classic pcap header, Ethernet, and no packet
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    return path


def _mbps(mb: float, t: Optional[float]) -> str:
    return "-" if not t else f"{mb / t:.1f}"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return "-" if not a or not b else f"{b / a:.1f}x"  # CPU time b over a: speed a over b


def compare(files: list[Path], repeat: int) -> None:
    """Per capture: kproto's exchanges and JSON lines against tshark's full JSON decode."""
    tshark = shutil.which("tshark")
    fns: dict[tuple[str, str], Callable[[], float]] = {}
    for f in files:
        fns[(str(f), "exchanges")] = (lambda fn: lambda: _cpu(fn))(_exchanges([f]))
        fns[(str(f), "jsonl")] = (lambda fn: lambda: _cpu(fn))(_cli([f]))
    tmp = tempfile.TemporaryDirectory()
    if tshark is None:
        print("tshark: NOT INSTALLED (Debian: apt-get install tshark): no comparison; "
              "kproto's figures only")
    else:
        version = subprocess.run([tshark, "-v"], capture_output=True, text=True).stdout
        print(f"tshark: {version.splitlines()[0]} ({tshark}); mode: -Y kafka -T json")
        fns[("", "start-up")] = lambda: _child_cpu([tshark, "-r", _empty_pcap(tmp.name), "-T", "json"])
        for f in files:
            cmd = tshark_command(tshark, f, kafka_ports(f))
            fns[(str(f), "tshark")] = lambda cmd=cmd: _child_cpu(cmd)
    for fn in fns.values():
        fn()  # warm up: codecs compile on first use
    times: dict[tuple[str, str], list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            times[k].append(fn())
    tmp.cleanup()
    med = {k: statistics.median(v) for k, v in times.items()}
    start = med.get(("", "start-up"))
    print(f"\nCPU seconds, median of {repeat} rounds; MB/s of capture per CPU second"
          + (f"; tshark start-up (empty capture) {start:.3f} s" if start is not None else ""))
    cols = ("MB", "exch MB/s", "jsonl MB/s", "tshark MB/s", "-start MB/s", "ratio", "-start")
    print(f"{'capture':34}" + "".join(f"{c:>12}" for c in cols))

    def line(label: str, group: list[Path]) -> None:
        mb = sum(f.stat().st_size for f in group) / 1e6

        def total(stage: str) -> Optional[float]:
            got = [med.get((str(f), stage)) for f in group]
            return None if None in got else sum(got)  # type: ignore[arg-type]
        jsonl, ts = total("jsonl"), total("tshark")
        warm = None if ts is None or start is None else ts - start * len(group)
        if warm is not None and warm < 0.1 * ts:  # within the noise of the start-up: no figure
            warm = None
        cells = (f"{mb:.3f}", _mbps(mb, total("exchanges")), _mbps(mb, jsonl), _mbps(mb, ts),
                 _mbps(mb, warm), _ratio(jsonl, ts), _ratio(jsonl, warm))
        print(f"{label[:34]:34}" + "".join(f"{c:>12}" for c in cells))
    for f in files:
        line(f.name if f.parent in (CAPTURES, EXTERNAL) else f"{f.parent.name}/{f.name}", [f])
    shared = [f for f in files if f.parent == CAPTURES]
    if shared and len(shared) < len(files):
        line(f"shared captures ({len(shared)})", shared)
    line(f"all ({len(files)})", files)
    if tshark is None:
        print("(tshark columns empty: tshark is not installed)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="*", help="captures (default: both capture folders)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-stages", action="store_true", help="only the comparison with tshark")
    args = ap.parse_args()
    files = ([Path(f) for f in args.file] if args.file else
             sorted(p for d in (CAPTURES, EXTERNAL) if d.is_dir() for p in d.rglob("*.pcap*")))
    if not files:
        print(f"no capture found in {CAPTURES} or {EXTERNAL}")
        return 1
    compare(files, args.repeat)
    if not args.no_stages:
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"\nkproto's stages over all {len(files)} captures ({mb:.2f} MB), one call each")
        print(f"{'':24} {'CPU s':>8} {'MB/s':>8}")
        fns = stages(files)
        for fn in fns.values():
            fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.repeat):
            for name, fn in fns.items():
                times[name].append(_cpu(fn))
        for name, v in times.items():
            t = statistics.median(v)
            print(f"{name:24} {t:8.3f} {mb / t:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
