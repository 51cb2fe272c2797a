"""``kproto fetch-session-sim``: bytes per FetchRequest/FetchResponse with and without a KIP-227
fetch session, measured with kproto's own encoder."""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, not {text!r}") from None


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "fetch-session-sim",
        help="bandwidth of fetch requests with and without incremental fetch sessions",
        description="Simulate a fetcher of many partitions against kproto's FetchSessionCache and "
                    "report the average encoded body size of FetchRequest and FetchResponse: "
                    "sessionless (every partition every time) versus incremental (only partitions "
                    "whose position or state changed).")
    p.add_argument("--versions", type=_int_list, default=[7, 12, 13, 15, 17],
                   help="Fetch versions, 7 or more (default 7,12,13,15,17)")
    p.add_argument("--topics", type=int, default=100, help="number of topics (default 100)")
    p.add_argument("--partitions", type=int, default=10, help="partitions per topic (default 10)")
    p.add_argument("--changed", type=_int_list, default=[0, 1, 10, 100],
                   help="partitions receiving new records between fetches (default 0,1,10,100)")
    p.add_argument("--follower", action="store_true",
                   help="fetch as a follower (replica id 1: a privileged session)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kproto.fetch_session.sim import bandwidth_table

    if any(v < 7 for v in args.versions):
        print("fetch-session-sim: fetch sessions need version 7 or more")
        return 2
    if args.topics < 1 or args.partitions < 1:
        print("fetch-session-sim: --topics and --partitions must be positive")
        return 2
    rows = bandwidth_table(args.versions, args.changed, topics=args.topics,
                           partitions_per_topic=args.partitions,
                           replica_id=1 if args.follower else -1, seed=args.seed)
    if args.json:
        for r in rows:
            print(json.dumps(asdict(r)))
        return 0
    total = args.topics * args.partitions
    print(f"{total} partitions ({args.topics} topics x {args.partitions}), "
          f"{'follower' if args.follower else 'consumer'}; average body bytes per fetch")
    head = ("version", "changed", "req no-session", "req full", "req incremental", "req saved",
            "resp no-session", "resp incremental")
    print("  ".join(f"{h:>16}" for h in head))
    for r in rows:
        saved = 1 - r.incremental_request / r.sessionless_request if r.sessionless_request else 0.0
        cells = (r.version, r.changed, r.sessionless_request, r.full_request, r.incremental_request,
                 f"{saved:.1%}", r.sessionless_response, r.incremental_response)
        print("  ".join(f"{c:>16}" for c in cells))
    return 0
