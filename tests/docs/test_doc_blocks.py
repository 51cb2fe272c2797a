"""Every python block of the README and of docs/ runs as written (see doc_blocks.py for the
directives that skip a block, mark it slow or check what it prints)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from doc_blocks import REPO, Block, blocks_of, python_blocks


def _param(block: Block):
    marks = []
    if block.directive == "skip":
        marks.append(pytest.mark.skip(reason=f"{block.id}: {block.argument}"))
    elif block.directive == "slow":
        marks.append(pytest.mark.slow)
    return pytest.param(block, id=block.id, marks=marks)


@pytest.mark.parametrize("block", [_param(b) for b in python_blocks()])
def test_block_runs(block: Block, tmp_path):
    """The block as a program of its own, from the checkout's root (where ``examples/`` is)."""
    if block.directive == "needs":
        pytest.importorskip(block.argument or "", reason=f"{block.id} needs {block.argument}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", block.code], cwd=REPO, env=env, text=True,
                       capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{block.id} failed:\n{r.stderr[-3000:]}"
    if block.output is not None:
        assert r.stdout == block.output, f"{block.id} printed something else"


def test_the_collector_reads_directives(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nprint(1)\n```\n\n<!-- docs-test: output -->\n```text\n1\n```\n"
                    "\n<!-- docs-test: skip: needs a broker on 9092 -->\n```python\nx\n```\n"
                    "\n- in a list:\n\n  ```python\n  print(2)\n  ```\n")
    monkeypatch.setattr("doc_blocks.REPO", tmp_path)
    blocks = blocks_of(page)
    assert [(b.lang, b.directive) for b in blocks] == [("python", None), ("text", "output"),
                                                        ("python", "skip"), ("python", None)]
    assert blocks[0].output == "1\n" and blocks[2].argument == "needs a broker on 9092"
    assert blocks[3].code == "print(2)\n"


def test_every_page_is_collected():
    ids = {b.id.split(":")[0] for b in python_blocks()}
    assert "README.md" in ids and "docs/tour.md" in ids
