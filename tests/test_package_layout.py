"""The package's import structure, read from the source: no module imports the top-level
``kproto`` package, no modules import each other in a loop, and the broker's parts import only
downwards (cluster -> the single node's core -> coordinators, security -> the node's basics)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "kproto"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import of the file, function-local ones included;
    ``from a import b`` names ``a.b`` where that is a module of the package, else ``a``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.append((sub if sub in MODULES else node.module, node.lineno))
    return found


GRAPH = {name: {m for m, _ in _imports(path) if m in MODULES and m != name}
         for name, path in MODULES.items()}


def test_the_package_is_read() -> None:
    assert "kproto.broker.cluster.raft" in MODULES and "kproto.broker.core" in GRAPH["kproto.broker"]


def test_no_module_imports_the_top_level_package() -> None:
    """``import kproto`` or ``from kproto import x`` inside the package runs ``kproto/__init__``
    for names that have a module of their own; the module is imported by its path."""
    offenders = [f"{name}:{line}" for name, path in MODULES.items() if name != "kproto"
                 for target, line in _imports(path) if target == "kproto"]
    assert offenders == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycles_are_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert _cycles(GRAPH) == []


BROKER = "kproto.broker"
# each part of the broker and the parts it must never import (they stand above it); "quorum"
# is the KRaft machinery of kproto.broker.cluster (the Raft replica, its snapshots, the quorum
# controller, the migration of old state files, the one-node combined quorum): sans-I/O, below
# the core, since the single broker is a one-node KRaft node built on it; the cluster's nodes
# stand above the core
NEVER = {
    "basics": ["core", "server", "coordinators", "security", "quorum", "cluster"],
    "coordinators": ["core", "server", "security", "quorum", "cluster"],
    "security": ["core", "server", "coordinators", "quorum", "cluster"],
    "quorum": ["core", "server", "coordinators", "cluster"],
    "core": ["server", "cluster"],
    "server": ["cluster"],
}
TOP = {"core", "server", "coordinators", "security", "cluster"}
QUORUM = {"raft", "snapshots", "controller", "migration", "combined"}


def _part(module: str) -> str:
    """The broker part a module of ``kproto.broker`` belongs to."""
    parts = module[len(BROKER) + 1:].split(".")
    if parts[0] == "cluster" and len(parts) > 1 and parts[1] in QUORUM:
        return "quorum"
    return parts[0] if parts[0] in TOP else "basics"


@pytest.mark.parametrize("part", sorted(NEVER))
def test_broker_parts_import_only_downwards(part: str) -> None:
    wrong = sorted(f"{name} -> {target}" for name in GRAPH
                   if name.startswith(BROKER + ".") and _part(name) == part
                   for target in GRAPH[name]
                   if target.startswith(BROKER + ".") and _part(target) in NEVER[part])
    assert wrong == []
