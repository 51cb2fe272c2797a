"""Every python block of the README and of docs/ runs as written (see doc_blocks.py for the
directives that skip a block, mark it slow or check what it prints).

A block runs as a program of its own, except that the blocks of one page that start Spark
share one process (a JVM start costs each of them 20 s or more): each still runs in a fresh
``__main__`` module, in page order, and fails or passes alone."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_blocks import PYTHON, REPO, Block, blocks_of, python_blocks

_SPARK = ("pyspark", "kproto.spark")

#: runs the blocks given on stdin one after another, each in a fresh __main__ module; prints
#: {block id: [passed, stdout, traceback]} as JSON on the real stdout
_BATCH = r"""
import contextlib, io, json, sys, traceback, types
results = {}
for block_id, code in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    passed = True
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(code, block_id, "exec"), main.__dict__)
        except SystemExit as exc:
            passed = exc.code in (None, 0)
        except BaseException:
            passed = False
            traceback.print_exc()
    results[block_id] = [passed, out.getvalue(), err.getvalue()]
sys.__stdout__.write(json.dumps(results))
"""
_batches: dict[Path, dict[str, list]] = {}


def _uses_spark(block: Block) -> bool:
    """Whether the block joins its page's shared Spark process: a block that sets
    ``spark.jars`` runs alone, as jars join a JVM only when it starts."""
    return any(name in block.code for name in _SPARK) and "spark.jars" not in block.code


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), "TMPDIR": str(tmp)}


def _spark_batch(block: Block, tmp: Path) -> list:
    """The outcome of ``block`` from one run of its page's Spark blocks."""
    if block.path not in _batches:
        page = [(b.id, b.code) for b in blocks_of(block.path)
                if b.lang in PYTHON and b.directive != "skip" and _uses_spark(b)]
        r = subprocess.run([sys.executable, "-c", _BATCH], cwd=REPO, env=_env(tmp), text=True,
                           input=json.dumps(page), capture_output=True, timeout=1800)
        assert r.returncode == 0, f"the Spark blocks of {block.path.name} did not run:\n{r.stderr[-3000:]}"
        _batches[block.path] = json.loads(r.stdout)
    return _batches[block.path][block.id]


def _param(block: Block):
    # a page's blocks run in one worker under ``pytest -n`` (its Spark blocks share a process),
    # the pages spread over the workers
    marks = [pytest.mark.xdist_group(f"docs:{block.id.split(':')[0]}")]
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
    if _uses_spark(block):
        passed, stdout, stderr = _spark_batch(block, tmp_path)
    else:
        r = subprocess.run([sys.executable, "-c", block.code], cwd=REPO, env=_env(tmp_path), text=True,
                           capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
        passed, stdout, stderr = r.returncode == 0, r.stdout, r.stderr
    assert passed, f"{block.id} failed:\n{stderr[-3000:]}"
    if block.output is not None:
        assert stdout == block.output, f"{block.id} printed something else"


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


def test_blocks_sharing_a_process_pass_or_fail_alone():
    blocks = [("p.md:1", "x = 1\nprint('one')"), ("p.md:5", "print(x)"), ("p.md:9", "raise SystemExit(3)"),
              ("p.md:12", "import sys\nprint(__name__, 'two')")]
    r = subprocess.run([sys.executable, "-c", _BATCH], input=json.dumps(blocks), text=True,
                       capture_output=True, timeout=60)
    got = json.loads(r.stdout)
    assert got["p.md:1"][:2] == [True, "one\n"]
    assert got["p.md:5"][0] is False and "NameError" in got["p.md:5"][2]   # fresh globals
    assert got["p.md:9"][0] is False
    assert got["p.md:12"][:2] == [True, "__main__ two\n"]
