"""kproto.accelerators.load: a C accelerator is used only when its build matches its source's
interface, so a stale in-place build falls back to the pure Python path, with a warning, rather
than failing on a function it lacks."""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from kproto import accelerators

PACKAGE = Path(accelerators.__file__).parent


def _source(module: str) -> Path:
    return PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".c")


@pytest.mark.parametrize("module", sorted(accelerators.API))
def test_each_c_source_declares_the_interface_the_python_side_expects(module: str) -> None:
    declared = re.search(r"#define KPROTO_API (\d+)", _source(module).read_text())
    assert declared is not None and int(declared.group(1)) == accelerators.API[module]


def test_the_accelerators_are_all_named() -> None:
    sources = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
               for p in PACKAGE.rglob("_*.c")}
    assert sources == set(accelerators.API)


@pytest.mark.parametrize("built", [None, 0])
def test_a_build_of_another_source_is_not_used(monkeypatch: pytest.MonkeyPatch, built) -> None:
    stale = types.ModuleType("kproto.records._speedups")
    if built is not None:
        stale.API = built  # type: ignore[attr-defined]
    monkeypatch.setattr(accelerators, "PURE", False)
    monkeypatch.setitem(sys.modules, "kproto.records._speedups", stale)
    with pytest.warns(RuntimeWarning, match="built from another version of its source"):
        assert accelerators.load("kproto.records._speedups") is None
    stale.API = accelerators.API["kproto.records._speedups"]  # type: ignore[attr-defined]
    assert accelerators.load("kproto.records._speedups") is stale


def test_a_missing_build_is_none_without_a_warning(monkeypatch: pytest.MonkeyPatch, recwarn) -> None:
    monkeypatch.setattr(accelerators, "PURE", False)
    monkeypatch.setitem(sys.modules, "kproto.capture._jsontext", None)  # import fails
    assert accelerators.load("kproto.capture._jsontext") is None
    assert not recwarn.list
