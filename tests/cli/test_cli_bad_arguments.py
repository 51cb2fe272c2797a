"""Every subcommand of ``kproto``, found by walking the parser (a new subcommand is covered
without a change here), run with bad arguments: it must fail with one line on stderr and exit
status 2, never a traceback or an "unexpected" error."""
from __future__ import annotations

import argparse
import contextlib
import io
import threading
import traceback
from pathlib import Path

from kproto.cli.main import build_parser, main


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(words, parser) of every runnable subcommand, nested ones (``topics create``) included."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from leaf_commands(sub, path + (name,))


LEAVES = dict(leaf_commands(build_parser()))


def bad_argv(words: tuple[str, ...], variant: str, junk: Path) -> list[str]:
    """The subcommand with every positional and required option given a bad value: a path
    that cannot exist (below a regular file) or a file that is not what any command reads;
    integers below 1 (no count, port or key is negative; a count of 0 is none); choices valid (to get past argparse to the command itself)."""
    parser = LEAVES[words]
    argv = list(words)
    text = str(junk / "missing") if variant == "missing" else str(junk)
    number = "-7" if variant == "missing" else "0"
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings and not action.required:
            continue
        if action.choices:
            value = str(next(iter(action.choices)))
        elif action.type is int or action.type is float:
            value = number
        else:
            value = text
        argv += ([action.option_strings[0]] if action.option_strings else []) + [value]
    return argv


def run_cli(argv: list[str]) -> tuple[int | str, str]:
    """``kproto ARGV`` in this process (quick: no interpreter per case): its exit status, or
    the traceback of what escaped ``main``, and its stderr. A case that runs past 60 s fails
    as a hang."""
    err = io.StringIO()
    result: list[int | str] = []

    def call() -> None:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                result.append(main(argv))
        except SystemExit as exc:  # argparse's errors
            result.append(exc.code if isinstance(exc.code, int) else 1)
        except BaseException:
            result.append("Traceback: " + traceback.format_exc())

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(60)
    return (result[0] if result else "hangs"), err.getvalue()


def test_the_walk_finds_the_subcommands():
    names = {" ".join(w) for w in LEAVES}
    assert {"logdir", "dump-log", "decode-pcap", "decode-response", "spark-read",
            "topics create", "groups reset"} <= names
    assert len(names) >= 30


def test_every_subcommand_fails_in_one_line(tmp_path, monkeypatch):
    junk = tmp_path / "notes.txt"
    junk.write_text("# not Kafka\nsome text that is no log segment, capture or frame\n" * 50)
    monkeypatch.delenv("KPROTO_DEBUG", raising=False)
    failures = []
    for words in LEAVES:
        if words in (("fetch-session-sim",), ("schemas",)):  # they take no input to get wrong
            continue
        for variant in ("missing", "junk"):
            failure = check(bad_argv(words, variant, junk))
            if failure:
                failures.append(failure)
    assert not failures, "\n\n".join(failures)


def check(argv: list[str]) -> str | None:
    """What is wrong with how ``kproto ARGV`` fails (None: one line, exit status 2)."""
    status, stderr = run_cli(argv)
    err_lines = [ln for ln in stderr.splitlines() if ln.strip()]
    problems = []
    if not isinstance(status, int) or "Traceback" in stderr or "unexpected" in stderr:
        problems.append("traceback, hang or unexpected error")
    elif status != 2:
        problems.append(f"exit status {status}")
    # argparse's own errors are its usage plus one line; ours are one line
    if err_lines and not err_lines[0].startswith("usage:") and len(err_lines) != 1:
        problems.append(f"{len(err_lines)} lines on stderr")
    if not err_lines:
        problems.append("nothing on stderr")
    if problems:
        detail = status if isinstance(status, str) else stderr
        return f"kproto {' '.join(argv)}: {', '.join(problems)}\n{detail[-800:]}"
    return None
