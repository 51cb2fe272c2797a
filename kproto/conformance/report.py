"""A conformance run's results and their renderings: the API x version table, the ApiVersions
ranges side by side, the normalised fields, and a JSON document (sans-I/O)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from kproto.conformance.compare import Diff
from kproto.conformance.deviations import UNSUPPORTED, Deviation, Deviations
from kproto.conformance.normalise import NODE_ROLES, RULES, generic_path
from kproto.conformance.scenario import api_name

__all__ = ["CallResult", "Report"]


def _ranges(versions: List[int]) -> str:
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out: List[str] = []
    for v in versions:
        if out and int(out[-1].split("-")[-1]) == v - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)


@dataclass
class CallResult:
    """The comparison of one compared call of one scenario run (``diffs`` after normalisation)."""

    scenario: str
    api_key: int
    version: int
    label: str
    diffs: List[Diff] = field(default_factory=list)


@dataclass
class Finding:
    """A difference at table granularity: API, version, generic path (with one example)."""

    api_key: int
    version: int
    path: str
    scenario: str
    example: Optional[Diff]
    deviation: Optional[Deviation]
    label: str = ""

    @property
    def api(self) -> str:
        return api_name(self.api_key)


@dataclass
class Report:
    """Everything a run found; :meth:`findings` applies the deviations."""

    target: str
    reference: str
    target_versions: Dict[int, range]
    reference_versions: Dict[int, range]
    results: List[CallResult] = field(default_factory=list)
    #: (API key, version) of the API under test the target does not answer
    unsupported: List[Tuple[int, int]] = field(default_factory=list)
    #: scenario name -> why it did not run
    skipped: Dict[str, str] = field(default_factory=dict)
    #: (rule, api, generic path) the normaliser replaced
    normalised: Set[Tuple[str, str, str]] = field(default_factory=set)
    #: API keys exercised by some scenario
    tested: Set[int] = field(default_factory=set)
    deviations: Deviations = field(default_factory=Deviations)

    def findings(self) -> List[Finding]:
        """One finding per distinct (API, version, generic path), explained or not."""
        seen: Dict[Tuple[int, int, str], Finding] = {}
        for key, ver in self.unsupported:
            name = api_name(key)
            seen[(key, ver, UNSUPPORTED)] = Finding(
                key, ver, UNSUPPORTED, "*", None,
                self.deviations.explain(name, key, ver, "*", UNSUPPORTED))
        for r in self.results:
            for d in r.diffs:
                gp = generic_path(d.path)
                k = (r.api_key, r.version, gp)
                if k in seen and seen[k].deviation is None:
                    continue
                dev = self.deviations.explain(api_name(r.api_key), r.api_key, r.version, r.scenario, gp)
                if k not in seen or dev is None:
                    seen[k] = Finding(r.api_key, r.version, gp, r.scenario, d, dev, r.label)
        return sorted(seen.values(), key=lambda f: (f.api_key, f.version, f.path))

    def unused_deviations(self) -> List[Deviation]:
        """The deviations no difference of this run matched (each occurrence counts, not only
        the one example a finding keeps), except intermittent ones."""
        used = set()
        for key, ver in self.unsupported:
            used.add(id(self.deviations.explain(api_name(key), key, ver, "*", UNSUPPORTED)))
        for r in self.results:
            for d in r.diffs:
                used.add(id(self.deviations.explain(api_name(r.api_key), r.api_key, r.version, r.scenario,
                                                    generic_path(d.path))))
        return [d for d in self.deviations.items if id(d) not in used and not d.intermittent]

    @property
    def unexplained(self) -> List[Finding]:
        return [f for f in self.findings() if f.deviation is None]

    # -- rendering -------------------------------------------------------------------------
    def cells(self) -> Dict[Tuple[int, int], List[Finding]]:
        out: Dict[Tuple[int, int], List[Finding]] = {}
        for r in self.results:
            out.setdefault((r.api_key, r.version), [])
        for key, ver in self.unsupported:
            out.setdefault((key, ver), [])
        for f in self.findings():
            out.setdefault((f.api_key, f.version), []).append(f)
        return out

    def table(self) -> str:
        """API x version -> same / differs (field paths), as a Markdown table."""
        lines = ["| API | version | result |", "|---|---|---|"]
        for (key, ver), fs in sorted(self.cells().items()):
            if not fs:
                cell = "same"
            elif any(f.path == UNSUPPORTED for f in fs):
                cell = "unsupported by target" + ("" if all(f.deviation for f in fs) else " (unexplained)")
            else:
                parts = [f.path + ("" if f.deviation is None else " (explained)") for f in fs]
                cell = "differs: " + ", ".join(parts)
            lines.append(f"| {api_name(key)} ({key}) | {ver} | {cell} |")
        return "\n".join(lines)

    def summary_table(self) -> str:
        """One row per API: the versions that are the same, differ (with the field paths) and
        are unsupported by the target; explained differences marked."""
        rows: Dict[int, Dict[str, Any]] = {}
        for (key, ver), fs in sorted(self.cells().items()):
            row = rows.setdefault(key, {"same": [], "differs": [], "unsupported": [], "paths": {}})
            if not fs:
                row["same"].append(ver)
            elif any(f.path == UNSUPPORTED for f in fs):
                row["unsupported"].append(ver)
            else:
                row["differs"].append(ver)
                for f in fs:
                    row["paths"][f.path] = row["paths"].get(f.path, True) and f.deviation is not None
        lines = ["| API | same | differs | unsupported by target | fields that differ |", "|---|---|---|---|---|"]
        for key, row in rows.items():
            paths = ", ".join(p + (" (explained)" if explained else "") for p, explained in row["paths"].items())
            lines.append(f"| {api_name(key)} ({key}) | {_ranges(row['same'])} | {_ranges(row['differs'])} | "
                         f"{_ranges(row['unsupported'])} | {paths} |")
        return "\n".join(lines)

    def versions_table(self) -> str:
        """The ApiVersions ranges of both brokers side by side."""
        def fmt(r: Optional[range]) -> str:
            return "-" if not r else f"{r.start}-{r[-1]}"
        keys = sorted(set(self.target_versions) | set(self.reference_versions))
        lines = ["| key | API | target | reference | tested |", "|---|---|---|---|---|"]
        for k in keys:
            try:
                name = api_name(k)
            except KeyError:
                name = "?"
            t, r = self.target_versions.get(k), self.reference_versions.get(k)
            lines.append(f"| {k} | {name} | {fmt(t)} | {fmt(r)} | {'yes' if k in self.tested else ''} |")
        return "\n".join(lines)

    def normalised_text(self) -> str:
        """Each normalisation rule with the fields it replaced in this run."""
        by_rule: Dict[str, Set[str]] = {}
        for name, api, path in self.normalised:
            by_rule.setdefault(name, set()).add(f"{api} {path}")
        lines = []
        for rule in RULES + (NODE_ROLES,):
            if rule.name in by_rule:
                fields = ", ".join(sorted(by_rule[rule.name]))
                lines.append(f"- {rule.name} ({rule.why}): {fields}")
        return "\n".join(lines)

    def text(self) -> str:
        """The whole report as text; its last line is ``N unexplained``."""
        out = [f"target {self.target}, reference {self.reference}", "",
               "ApiVersions:", self.versions_table(), "", "Summary:", self.summary_table(), "",
               "Results:", self.table(), ""]
        if self.skipped:
            out.append("Skipped scenarios:")
            out.extend(f"- {n}: {why}" for n, why in sorted(self.skipped.items()))
            out.append("")
        out += ["Normalised fields:", self.normalised_text() or "(none)", ""]
        unexplained = self.unexplained
        if unexplained:
            out.append("Unexplained differences:")
            for f in unexplained:
                ex = "" if f.example is None else f" ({f.scenario}, {f.label}: {f.example.path}: target {f.example.target!r}, reference {f.example.reference!r})"
                out.append(f"- {f.api} v{f.version} {f.path}{ex}")
            out.append("")
        out.append(f"{len(unexplained)} unexplained")
        return "\n".join(out)

    def to_json(self) -> Dict[str, Any]:
        """A JSON-ready document of the run."""
        def rng(r: Optional[range]) -> Any:
            return None if not r else [r.start, r[-1]]
        return {
            "target": self.target, "reference": self.reference,
            "api_versions": {str(k): {"target": rng(self.target_versions.get(k)),
                                      "reference": rng(self.reference_versions.get(k))}
                             for k in sorted(set(self.target_versions) | set(self.reference_versions))},
            "cells": [{"api": api_name(k), "api_key": k, "version": v,
                       "differences": [{"path": f.path, "scenario": f.scenario, "call": f.label,
                                        "explained": None if f.deviation is None else f.deviation.reason,
                                        "example": None if f.example is None else
                                        {"path": f.example.path, "target": repr(f.example.target),
                                         "reference": repr(f.example.reference)}}
                                       for f in fs]}
                      for (k, v), fs in sorted(self.cells().items())],
            "skipped": self.skipped,
            "normalised": sorted([list(t) for t in self.normalised]),
            "unexplained": len(self.unexplained),
        }
