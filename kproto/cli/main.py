"""Entry point of the ``kproto`` command: one subcommand per job, each in its own module."""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

# Modules providing subcommands; each exposes ``register(subparsers)`` which adds its parsers
# and sets ``func`` (a callable taking the parsed args and returning an exit code).
SUBCOMMAND_MODULES = [
    "kproto.cli.admin",
    "kproto.cli.assign",
    "kproto.cli.broker",
    "kproto.cli.cluster",
    "kproto.cli.conformance",
    "kproto.cli.client",
    "kproto.cli.decode_pcap",
    "kproto.cli.dump_log",
    "kproto.cli.fetch_session_sim",
    "kproto.cli.logdir",
    "kproto.cli.protocol",
    "kproto.cli.spark_read",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kproto", description="Kafka protocol toolkit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
