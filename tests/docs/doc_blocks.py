"""The fenced code blocks of the README and of every page under ``docs/`` (pages added later
are found without a change here).

A ``python`` block is run as a program of its own. An HTML comment on the line before a block
changes that (the comment does not show on the page):

- ``<!-- docs-test: skip: REASON -->``: not run; REASON says why (it is reported as the skip's
  reason).
- ``<!-- docs-test: slow -->``: run only with the slow tests (``-m slow`` or the full run).
- ``<!-- docs-test: needs: MODULE -->``: run where MODULE (an optional dependency such as
  pandas) is installed, skipped with that reason elsewhere.
- ``<!-- docs-test: output -->`` before a ``text`` block: that block is what the python block
  before it prints, exactly.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_DIRECTIVE = re.compile(r"^<!--\s*docs-test:\s*(?P<what>[a-z]+)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")
PYTHON = {"python", "py", "python3"}


@dataclass
class Block:
    """One fenced block: where it is, its language, its text and the directive before it."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    directive: str | None = None
    argument: str | None = None
    output: str | None = None  # for a python block: the text block marked as its output

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(REPO).as_posix()}:{self.line}"


def doc_files() -> list[Path]:
    """The README and every Markdown page of the documentation."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, with their directives; output blocks are
    attached to the python block before them."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info = m.group("fence"), m.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        body, j = [], i + 1
        while j < len(lines) and not lines[j].lstrip().startswith(fence):
            body.append(lines[j][len(m.group("indent")):])
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: the fence is never closed")
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        d = _DIRECTIVE.match(lines[k].strip()) if k >= 0 else None
        block = Block(path, i + 1, lang, "\n".join(body) + "\n",
                      d.group("what") if d else None, d.group("arg") if d else None)
        if block.directive == "output":
            runs = [b for b in blocks if b.lang in PYTHON]
            if not runs or block.lang != "text":
                raise ValueError(f"{block.id}: an output block is a text block after a python block")
            runs[-1].output = block.code
        elif block.directive not in (None, "skip", "slow", "needs"):
            raise ValueError(f"{block.id}: unknown docs-test directive {block.directive!r}")
        elif block.directive in ("skip", "needs") and not block.argument:
            raise ValueError(f"{block.id}: docs-test: {block.directive} needs its argument")
        blocks.append(block)
        i = j + 1
    return blocks


def python_blocks() -> list[Block]:
    return [b for f in doc_files() for b in blocks_of(f) if b.lang in PYTHON]
