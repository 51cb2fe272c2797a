"""``kproto decode-pcap FILE``: every Kafka request and response of a pcap/pcapng capture."""
from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import subprocess
import sys
from typing import Any, Callable, Iterable, Iterator, TextIO

from kproto.cli.errors import CliError
from kproto.cli.progress import Progress, progress_bar

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    from kproto.schemas._index import KAFKA_VERSION

    p = subparsers.add_parser(
        "decode-pcap", help="decode the Kafka traffic of a pcap/pcapng capture",
        description="Reassemble TCP, cut Kafka frames, pair responses with requests and decode "
                    f"both with kproto's schemas (every API key and version up to Kafka {KAFKA_VERSION}'s, "
                    "the versions 4.0 dropped included; newer versions best effort with the "
                    "newest layout known; topic ids named from the capture's Metadata "
                    "responses as topicName). Exit status 1 when "
                    "the capture file is damaged or holds packets of a link type not read, 2 "
                    "when nothing in it could be read.")
    p.add_argument("file", nargs="+",
                   help="pcap or pcapng files, read in the order given as one capture (rotated "
                        "tcpdump files: a connection goes on from one file to the next); - "
                        "alone reads a stream from stdin as it arrives "
                        "(tcpdump -i any -w - port 9092 | kproto decode-pcap -)")
    p.add_argument("--port", type=int, action="append", default=None,
                   help="Kafka broker port (repeatable); default: guessed per connection")
    p.add_argument("--format", choices=("auto", "text", "jsonl"), default="auto",
                   help="text on a terminal, JSON lines otherwise (default auto)")
    p.add_argument("--records", action="store_true",
                   help="show records fields as batches and records instead of base64")
    p.add_argument("--records-max-bytes", type=int, default=None, metavar="N",
                   help="look inside records fields of at most N bytes (default 64 MiB)")
    p.add_argument("--no-best-effort", dest="best_effort", action="store_false",
                   help="leave bodies of API versions newer than the schemas undecoded (default: "
                        "decode them with the highest version the schemas define)")
    p.add_argument("--summary", action="store_true",
                   help="print only a table per API key (count, errors, p50/p99 latency, bytes)")
    p.add_argument("--compare-tshark", action="store_true",
                   help="print only a table of each exchange beside Wireshark's reading of it "
                        "(tshark on PATH, run on the same file with the Kafka ports: API key, "
                        "version, correlation id, malformed), then what tshark read that "
                        "kproto did not, and tshark's totals; one capture file")
    p.add_argument("--api", action="append", default=None, metavar="NAME|KEY",
                   help="only these APIs (repeatable or comma-separated: --api Produce,Fetch or --api 0)")
    p.add_argument("--errors", action="store_true",
                   help="only exchanges with an error code in the response or a problem")
    p.add_argument("--min-latency", type=float, default=None, metavar="MS",
                   help="only exchanges answered at least MS milliseconds after the request")
    p.add_argument("--client-id", action="append", default=None, metavar="ID",
                   help="only requests of this client id (repeatable)")
    p.add_argument("-v", "--verbose", action="store_true", help="text format: print bodies too")
    p.add_argument("-o", "--output", default="-", help="output file (default stdout)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--report", default=None, metavar="HTML",
                   help="also write a self-contained HTML page with charts of the (filtered) "
                        "exchanges: latency percentiles, rate, bytes, errors, fetch sessions "
                        "(needs the extra kproto[report]; -o /dev/null for the page only)")
    p.set_defaults(func=run)


def readable_records(view: Any) -> Any:
    """A records view (:func:`~kproto.capture.records_view.records_json`) with each record's
    key, value and header values as text when their bytes are UTF-8, and as ``b'...'``
    otherwise (the view holds them as base64)."""
    if not isinstance(view, dict):
        return view
    for record in view.get("records") or ():
        for field in ("key", "value"):
            record[field] = _readable(record.get(field))
        for header in record.get("headers") or ():
            header["value"] = _readable(header.get("value"))
    return view


def _readable(b64: str | None) -> str | None:
    if b64 is None:
        return None
    raw = base64.b64decode(b64)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return repr(raw)


def _api_keys(items: list[str]) -> set[int]:
    from kproto.codecs import api_keys

    by_name = {name.lower(): key for key, name in api_keys().items()}
    keys = set()
    for item in (i.strip() for chunk in items for i in chunk.split(",")):
        if item.isdigit():
            keys.add(int(item))
        elif item.lower().removesuffix("request") in by_name:
            keys.add(by_name[item.lower().removesuffix("request")])
        elif item:
            raise CliError(f"--api {item!r} is not an API name or key")
    return keys


def _selector(args: argparse.Namespace) -> Callable[[Any], bool] | None:
    """The exchanges the filter options keep (None: every one)."""
    keys = None if args.api is None else _api_keys(args.api)
    clients = None if args.client_id is None else set(args.client_id)
    if keys is None and clients is None and not args.errors and args.min_latency is None:
        return None

    def keep(ex: Any) -> bool:
        if keys is not None and ex.api_key not in keys:
            return False
        if clients is not None and ex.client_id not in clients:
            return False
        if args.errors and not (ex.errors or ex.problems):
            return False
        if args.min_latency is not None and (ex.latency_ms is None or ex.latency_ms < args.min_latency):
            return False
        return True
    return keep


def _text_line(ex: Any, doc: dict) -> str:
    when = doc["ts"] or ""
    when = when[11:] if when.endswith("Z") else when  # time of day, or the raw seconds
    if ex.kind == "stream":
        return f"{when} {doc['client']} -> {doc['broker']} stream: " + "; ".join(doc["problems"])
    if ex.kind == "sasl":
        head = f"{when} {doc['client']} -> {doc['broker']} SASL token {json.dumps(ex.sasl)}"
    else:
        name = doc["api_name"] or f"api key {doc['api_key']}"
        lat = "-" if doc["latency_ms"] is None else f"{doc['latency_ms']:.2f}ms"
        as_ = "" if ex.decoded_as is None else f" (as v{ex.decoded_as})"
        head = (f"{when} {doc['client']} -> {doc['broker']} {name} v{doc['api_version']}{as_} "
                f"corr={doc['correlation_id']} client_id={doc['client_id']!r} {lat}")
    if ex.errors:
        head += " errors=" + ",".join(ex.errors)
    for note in doc["notes"]:
        head += f"\n    i {note}"
    for problem in doc["problems"]:
        head += f"\n    ! {problem}"
    for side, part in (doc.get("unread") or {}).items():
        more = "..." if part["length"] * 2 > len(part["hex"]) else ""
        head += f"\n      {side} bytes not understood: {part['hex']}{more}"
    return head


def _report(args: argparse.Namespace) -> Any:
    """The report accumulator for --report (None without it, False when Bokeh is missing)."""
    if args.report is None:
        return None
    from kproto.report import CaptureReport, ReportUnavailable, require

    try:
        require()  # before decoding: a long capture should not be read for nothing
    except ReportUnavailable as exc:
        print(f"kproto decode-pcap: {exc}", file=sys.stderr)
        return False
    return CaptureReport()


def _file_steps(decoder: Any, files: list[str], bar: Progress | None) -> Iterator[tuple[Any]]:
    """The exchanges of capture files read in a row (one capture), one at a time."""
    from kproto.capture.pcap import read_capture

    for f in files:
        for ex in decoder.feed_capture(read_capture(f), f):
            if bar is not None:  # 16-byte record headers and the file header
                bar.update_to(24 + decoder.bytes + 16 * decoder.packets)
            yield (ex,)
    if bar is not None:
        bar.close()


@functools.cache  # once a process
def _reuse_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse (blocks up to 32 MiB from its heap, up
    to 256 MiB of free heap kept) rather than give it back to the system at once. Decoding a
    capture allocates and frees blocks of megabytes over and over (the file, frames, records in
    base64, JSON lines), and memory fresh from the system costs a page fault for every 4 KiB:
    a quarter of the CPU time of captures with megabyte messages. Peak memory is unchanged;
    it is returned at exit. False (nothing done) without glibc."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 32 << 20)) and bool(mallopt(m_trim_threshold, 256 << 20))


def run(args: argparse.Namespace) -> int:
    from kproto.capture.api import BodyDecoder, exchange_to_json
    from kproto.capture.exchange import exchange_to_json_text
    from kproto.capture.decoder import CaptureDecoder
    from kproto.capture.pcap import stream_packets
    from kproto.capture.summary import Summary

    keep = _selector(args)
    report = _report(args)
    if report is False:
        return 2
    out = sys.stdout if args.output == "-" else open(args.output, "w", encoding="utf-8")
    try:
        fmt = args.format
        if fmt == "auto":
            fmt = "text" if out.isatty() else "jsonl"
        convert = None
        if args.records:
            from kproto.capture.records_view import DEFAULT_RECORDS_CAP, records_json

            cap = args.records_max_bytes or DEFAULT_RECORDS_CAP
            if fmt == "text":  # for a person: keys, values and header values as text
                convert = lambda data: readable_records(records_json(data, cap))  # noqa: E731
            else:  # JSON lines keep Kafka's base64 for bytes, whatever they hold
                convert = lambda data: records_json(data, cap)  # noqa: E731
        decoder = CaptureDecoder(args.port, decode=BodyDecoder(best_effort=args.best_effort))
        if "-" in args.file and len(args.file) > 1:
            raise CliError("- (stdin) cannot be read with other files")
        streaming = args.file == ["-"]
        compared: list[Any] | None = None   # --compare-tshark: every exchange, filters aside
        if args.compare_tshark:
            if streaming or len(args.file) != 1:
                raise CliError("--compare-tshark reads one capture file (tshark reads it again)")
            compared = []
        if not streaming:  # (a live capture may run for days: its memory goes back as usual)
            _reuse_freed_memory()
        steps: Iterable[Iterable[Any]]  # the exchanges each step of the decoding completes
        if streaming:  # each exchange is written (and flushed) as soon as it completes
            steps = (decoder.feed(p) for p in stream_packets(sys.stdin.buffer))
        else:
            size = sum(os.path.getsize(f) for f in args.file)
            # a bar for large files, unless it would interleave with text on the same terminal
            bar = progress_bar(size, "decode-pcap", minimum=4 << 20,
                               enabled=not args.no_progress and (args.summary or not out.isatty()))
            steps = _file_steps(decoder, args.file, bar)
        summary = Summary() if args.summary else None
        announced: set[int] = set()
        # every exchange a JSON line, nothing else to do with it (the usual run): one call each
        plain = (fmt == "jsonl" and convert is None and compared is None and keep is None
                 and report is None and summary is None)
        write = out.write

        def emit(exchanges: Iterable[Any]) -> None:
            if len(decoder.chosen_ports) != len(announced):  # (ports are only ever added)
                for port in decoder.chosen_ports.keys() - announced:
                    announced.add(port)
                    print(f"kafka port {port} (guessed: {decoder.chosen_ports[port]})",
                          file=sys.stderr)
            if plain:
                for ex in exchanges:
                    write(exchange_to_json_text(ex, "\n"))
                return
            for ex in exchanges:
                if compared is not None:
                    compared.append(ex)
                    continue
                if keep is not None and not keep(ex):
                    continue
                if report is not None:
                    report.add(ex)
                if summary is not None:
                    summary.add(ex)
                    continue  # --summary: just the table
                if fmt == "jsonl" and convert is None:  # the bodies written as text directly
                    out.write(exchange_to_json_text(ex, "\n"))  # (joined with its newline)
                    continue
                doc = exchange_to_json(ex, records=convert)
                if fmt == "jsonl":
                    out.write(json.dumps(doc, ensure_ascii=False) + "\n")
                else:
                    out.write(_text_line(ex, doc) + "\n")
                    if args.verbose:
                        for part in ("request", "response", "fetch_session"):
                            if doc.get(part) is not None:
                                out.write(f"    {part}: {json.dumps(doc[part], ensure_ascii=False)}\n")

        try:
            for exchanges in steps:
                emit(exchanges)
                if streaming:
                    out.flush()
        except KeyboardInterrupt:  # a live capture ends with ^C: report what was seen
            pass
        emit(decoder.finish())
        if decoder.problems and decoder.packets == 0:  # nothing could be read: say why, once
            first, *rest = list(decoder.problems)
            print(f"kproto decode-pcap: {first.source or args.file[0]}: {first.reason}"
                  + (f" (and {len(rest)} more problem(s))" if rest else ""), file=sys.stderr)
            return 2
        for problem in decoder.problems:
            print(f"capture: {problem.reason}", file=sys.stderr)
        if args.port is None and not decoder.chosen_ports:
            print("no Kafka connection recognised; give the broker port with --port", file=sys.stderr)
        if summary is not None:
            out.write(summary.table() + "\n")
        if compared is not None:
            from kproto.capture.tshark import compare, run_tshark

            ports = args.port or sorted(decoder.chosen_ports)
            try:
                comparison = compare(compared, run_tshark(args.file[0], ports))
            except (RuntimeError, OSError, subprocess.TimeoutExpired, ValueError) as exc:
                raise CliError(f"--compare-tshark: {exc}") from exc
            out.write(comparison.table() + "\n")
            if not comparison.agrees:
                print("kproto decode-pcap: tshark read PDUs that are not exchanges here "
                      "(listed as not found)", file=sys.stderr)
        if report is not None:
            from kproto.report import render_capture, write_page

            more = f" (+{len(args.file) - 1} more)" if len(args.file) > 1 else ""
            write_page(render_capture(report.data(), os.path.basename(args.file[0]) + more),
                       args.report)
        # the capture file is damaged or not readable (exchange problems are traffic facts)
        if decoder.problems:
            return 2 if decoder.packets == 0 else 1
        return 0
    finally:
        if out is not sys.stdout:
            out.close()
