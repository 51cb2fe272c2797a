"""``kproto conformance``: run the conformance corpus against a target and a reference broker."""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "conformance", help="compare a broker's answers with a reference broker's, field by field",
        description="Run request scenarios (every version both brokers advertise, error paths "
                    "included) against TARGET and REFERENCE, compare the answers after a named "
                    "normalisation, and print the API x version table, the ApiVersions ranges "
                    "and, last, 'N unexplained'. Exit status 1 when N > 0.")
    p.add_argument("--target", metavar="HOST:PORT", help="the broker under test (the first of a list)")
    p.add_argument("--reference", metavar="HOST:PORT", help="the reference broker (the first of a list)")
    p.add_argument("--cluster", action="store_true",
                   help="both are multi-broker clusters (HOST:PORT of one broker each): requests go "
                        "to partition leaders and coordinators, node ids compared by role")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    p.add_argument("--deviations", metavar="FILE", action="append",
                   help="TOML file of explained differences (repeatable: the first match wins)")
    p.add_argument("--scenario", action="append", metavar="PATTERN",
                   help="run only scenarios whose name matches (fnmatch; repeatable)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--concurrency", type=int, default=16, help="scenario runs in parallel (default 16)")
    p.add_argument("--timeout", type=float, default=30.0, help="request timeout in seconds (default 30)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kproto.conformance import Deviations, SCENARIOS, parse_address, run_conformance

    if args.list:
        for s in SCENARIOS:
            print(f"{s.name}: {s.doc.splitlines()[0] if s.doc else ''}")
        return 0
    if not (args.target and args.reference):
        print("kproto conformance: --target and --reference are required", file=sys.stderr)
        return 2
    try:
        target, reference = parse_address(args.target), parse_address(args.reference)
        deviations = (Deviations([d for f in args.deviations for d in Deviations.load(f).items])
                      if args.deviations else None)
    except (ValueError, OSError) as exc:
        print(f"kproto conformance: {exc}", file=sys.stderr)
        return 2
    try:
        report = asyncio.run(run_conformance(target, reference, deviations=deviations,
                                             select=args.scenario, concurrency=args.concurrency,
                                             timeout=args.timeout, cluster=args.cluster))
    except (OSError, RuntimeError) as exc:
        print(f"kproto conformance: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report.to_json(), f, indent=1)
    return 1 if report.unexplained else 0
