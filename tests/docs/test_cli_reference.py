"""The command reference of the docs is made from the parsers, every subcommand included."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _hook():
    spec = importlib.util.spec_from_file_location(
        "mkdocs_cli_reference", REPO / "tools" / "mkdocs_cli_reference.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_subcommand_has_its_section_with_its_help():
    from kproto.cli.main import _leaves, build_parser

    text = _hook().render()
    for leaf in _leaves(build_parser()):
        names = [w for w in leaf.prog.split()[1:] if not w.isupper()]  # not a positional's metavar
        assert f"{'#' * (1 + len(names))} {leaf.prog}\n" in text, leaf.prog
        assert leaf.format_usage().split()[1] in text
    assert "usage: kproto logdir" in text


def test_the_page_asks_for_it_and_gets_it():
    hook = _hook()
    page = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert hook.MARKER in page
    assert hook.MARKER not in hook.on_page_markdown(page, None, None, None)
