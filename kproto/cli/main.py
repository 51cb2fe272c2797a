"""Entry point of the ``kproto`` command: one subcommand per job, each in its own module."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from kproto.cli.errors import EXIT_ERROR, CliError, describe_os_error

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
    """The ``kproto`` parser with every subcommand of :data:`SUBCOMMAND_MODULES`."""
    parser = argparse.ArgumentParser(
        prog="kproto", description="Kafka protocol toolkit",
        epilog="Exit status: 0 done, 1 damage found and reported, 2 failed (one line on stderr). "
               "Output: text on a terminal, JSON lines when piped; --format chooses.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    for command in _commands(parser):
        _add_format_for_json_flag(command)
    return parser


def _leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    return [leaf for a in subs for p in a.choices.values() for leaf in _leaves(p)]


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every parser below ``parser`` that runs something: the leaves, and a command that has
    subcommands but runs without one too (``kproto cluster``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    runs_alone = parser.get_default("func") is not None and not any(a.required for a in subs)
    found = [parser] if runs_alone else []
    return found + [c for a in subs for p in a.choices.values() for c in _commands(p)]


def _add_format_for_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--format text|json`` beside a subcommand's ``--json`` flag (which stays, the same as
    ``--format json``), so that every command that prints a document takes ``--format``."""
    options = {o for a in parser._actions for o in a.option_strings}
    if "--json" in options and "--format" not in options:
        parser.add_argument("--format", choices=("text", "json"), default=None,
                            help="output format (default text; --json is --format json)")


def _fail(command: str, message: str) -> int:
    prefix = f"kproto {command}: "
    if message.startswith("kproto"):  # already says which command
        prefix = ""
    print(prefix + message.strip().replace("\n", " "), file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kproto`` command; the exit status: 0 done, 1 damage reported, 2 failed.

    Failures are one line on stderr (``kproto COMMAND: what went wrong``); an unexpected
    exception is one line too, with its traceback when ``KPROTO_DEBUG`` is set."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_ERROR
    if getattr(args, "format", None) == "json" and hasattr(args, "json"):
        args.json = True
    command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except CliError as exc:
        return _fail(command, str(exc))
    except SystemExit as exc:  # raise SystemExit("message") from a subcommand
        if isinstance(exc.code, str):
            return _fail(command, exc.code)
        raise
    except OSError as exc:
        return _fail(command, describe_os_error(exc))
    except ValueError as exc:  # a value the command cannot use (an address, a count)
        if os.environ.get("KPROTO_DEBUG"):
            raise
        return _fail(command, str(exc))
    except Exception as exc:
        from kproto.errors import KprotoError

        if os.environ.get("KPROTO_DEBUG"):
            raise
        if isinstance(exc, KprotoError):
            return _fail(command, str(exc))
        return _fail(command, f"unexpected {type(exc).__name__}: {exc} "
                              "(set KPROTO_DEBUG=1 for the traceback)")


if __name__ == "__main__":
    sys.exit(main())
