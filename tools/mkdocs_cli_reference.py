"""MkDocs hook: the command-line reference, generated from ``kproto``'s own argparse parsers
(``kproto.cli.main.build_parser``) so that it cannot drift from the command.

A page holding the line ``<!-- cli-reference -->`` gets, in its place, one section per
subcommand (nested ones such as ``topics create`` included) with its ``--help`` text.
"""
from __future__ import annotations

import argparse
import os
from typing import Any, Iterator

MARKER = "<!-- cli-reference -->"


def _commands(parser: argparse.ArgumentParser,
              path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield path + (name,), sub, helps.get(name, "")
                yield from _commands(sub, path + (name,))


def render() -> str:
    """The reference as Markdown: a section per subcommand with its help text."""
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal; the page is always 100 wide
    from kproto.cli.main import build_parser

    parser = build_parser()
    out = ["```text", parser.format_help().rstrip(), "```", ""]
    for words, sub, summary in _commands(parser):
        level = "#" * (1 + len(words))
        out += [f"{level} {sub.prog}", ""]  # the prog names positionals before a subcommand (ctl DIR)
        if summary:
            out += [summary[:1].upper() + summary[1:] + ".", ""]
        out += ["```text", sub.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: fill in the reference where a page asks for it."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
