"""``kproto schemas``, ``kproto decode-request``, ``kproto decode-response``."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List

from kproto.cli.errors import CliError
from kproto.codecs import RELEASES, api_keys, message, messages, request, response
from kproto.errors import DecodeError
from kproto.framing import (decode_request, decode_response, request_header_version,
                            response_header_version)


def read_input(arg: str) -> bytes:
    """``HEX`` (spaces allowed), ``@FILE`` (raw bytes) or ``@-`` (raw bytes on stdin)."""
    if arg.startswith("@"):
        if arg == "@-":
            return sys.stdin.buffer.read()
        with open(arg[1:], "rb") as fh:
            return fh.read()
    try:
        return bytes.fromhex("".join(arg.split()))
    except ValueError:
        raise CliError(f"not hex and not @file: {arg[:40]!r}") from None


def _strip_prefix(data: bytes, mode: str) -> bytes:
    if mode == "yes":
        return data[4:]
    if mode == "auto" and len(data) >= 4 and int.from_bytes(data[:4], "big", signed=True) == len(data) - 4:
        return data[4:]
    return data


def _print(doc: Any, fmt: str = "json") -> None:
    """``json``: indented; ``jsonl``: one line."""
    indent = None if fmt == "jsonl" else 2
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=indent) + "\n")


def _releases(codec: Any) -> List[Dict[str, Any]]:
    """Which Kafka release defines which versions: [{"versions": [lo, hi], "release": "3.9"}, ...]."""
    return [{"versions": [r.start, r.stop - 1], "release": name} for r, name in codec.releases]


def _releases_text(runs: List[Dict[str, Any]]) -> str:
    return ", ".join(f"{_span(r['versions'])} {r['release']}" for r in runs)


def _span(v: List[int]) -> str:
    return f"{v[0]}" if v[0] == v[1] else f"{v[0]}-{v[1]}"


def cmd_schemas(args: argparse.Namespace) -> int:
    rows: List[Dict[str, Any]] = []
    if args.all:
        for name in messages():
            c = message(name)
            rows.append({"name": name, "kind": c.kind, "api_key": c.api_key, "source": c.schema.source,
                         "versions": [c.valid_versions.start, c.valid_versions.stop - 1],
                         "flexible_from": c.flexible_versions.start if c.flexible_versions else None,
                         "releases": _releases(c)})
    else:
        for key, api in api_keys().items():
            req, resp = request(key), response(key)
            rows.append({"api_key": key, "name": api, "request": req.name, "response": resp.name,
                         "versions": [req.valid_versions.start, req.valid_versions.stop - 1],
                         "flexible_from": req.flexible_versions.start if req.flexible_versions else None,
                         "deprecated": ([req.deprecated_versions.start, req.deprecated_versions.stop - 1]
                                        if req.deprecated_versions else None),
                         "releases": _releases(req),
                         "aliases": [a[:-len("Request")] for a in req.aliases],
                         "listeners": list(req.schema.listeners)})
    if args.json:
        _print(rows)
        return 0
    releases = " and ".join(RELEASES) if len(RELEASES) < 3 else f"{', '.join(RELEASES[:-1])} and {RELEASES[-1]}"
    if args.all:
        for r in rows:
            api_key = "" if r["api_key"] is None else r["api_key"]
            print(f"{r['name']:<48} {r['kind']:<17} {api_key!s:>4}  v{_span(r['versions']):<6} "
                  f"{_releases_text(r['releases'])}")
        print(f"{len(rows)} messages (Kafka {releases} schemas)")
        return 0
    # columns as wide as their widest entry
    wn = max([36] + [len(r["name"]) for r in rows])
    wr = max([20] + [len(_releases_text(r["releases"])) for r in rows])
    print(f"{'key':>4}  {'API':<{wn}} {'versions':<9} {'flexible':<9} {'releases':<{wr}} listeners")
    for r in rows:
        flex = f"{r['flexible_from']}+" if r["flexible_from"] is not None else "-"
        print(f"{r['api_key']:>4}  {r['name']:<{wn}} {_span(r['versions']):<9} {flex:<9} "
              f"{_releases_text(r['releases']):<{wr}} {','.join(r['listeners'])}")
    print(f"{len(rows)} API keys (Kafka {releases} schemas; each version as the newest release "
          "that has it defines it)")
    return 0


def cmd_decode_request(args: argparse.Namespace) -> int:
    data = _strip_prefix(read_input(args.data), args.size_prefix)
    try:
        header, body = decode_request(data, size_prefix=False)
    except DecodeError as exc:
        raise CliError(str(exc)) from None
    key, ver = header.request_api_key, header.request_api_version
    _print({"header": message("RequestHeader").to_json(header, request_header_version(key, ver)),
            "api_name": request(key).name, "api_version": ver,
            "body": request(key).to_json(body, ver)}, args.format)
    return 0


def cmd_decode_response(args: argparse.Namespace) -> int:
    try:
        codec = response(args.api_key)
    except KeyError:
        raise CliError(f"unknown API key {args.api_key} ('kproto schemas' lists them)") from None
    if args.version not in codec.valid_versions:
        versions = codec.valid_versions
        raise CliError(f"{codec.name} has versions {versions.start}-{versions.stop - 1}, "
                       f"not {args.version}")
    data = _strip_prefix(read_input(args.data), args.size_prefix)
    try:
        header, body = decode_response(data, args.api_key, args.version, size_prefix=False)
    except DecodeError as exc:
        raise CliError(str(exc)) from None
    _print({"header": message("ResponseHeader").to_json(header, response_header_version(args.api_key, args.version)),
            "api_name": codec.name, "api_version": args.version,
            "body": codec.to_json(body, args.version)}, args.format)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("schemas", help="list API keys, names, versions and the Kafka release defining them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", action="store_true", help="every message (headers, data, metadata records too)")
    p.set_defaults(func=cmd_schemas)

    prefix_help = "whether DATA starts with the 4-byte size prefix (default: detect)"
    format_help = "Kafka's JSON indented (json, the default) or on one line (jsonl)"
    p = sub.add_parser("decode-request", help="decode a request frame (header + body) to Kafka's JSON")
    p.add_argument("data", metavar="HEX|@FILE", help="hex bytes, @file of raw bytes, or @- for stdin")
    p.add_argument("--size-prefix", choices=["auto", "yes", "no"], default="auto", help=prefix_help)
    p.add_argument("--format", choices=("json", "jsonl"), default="json", help=format_help)
    p.set_defaults(func=cmd_decode_request)

    p = sub.add_parser("decode-response", help="decode a response frame (header + body) to Kafka's JSON")
    p.add_argument("data", metavar="HEX|@FILE", help="hex bytes, @file of raw bytes, or @- for stdin")
    p.add_argument("--api-key", type=int, required=True)
    p.add_argument("--version", type=int, required=True)
    p.add_argument("--size-prefix", choices=["auto", "yes", "no"], default="auto", help=prefix_help)
    p.add_argument("--format", choices=("json", "jsonl"), default="json", help=format_help)
    p.set_defaults(func=cmd_decode_response)
