"""The deviations file: differences from the reference broker that are known and explained
(sans-I/O). A TOML file of ``[[deviation]]`` tables::

    [[deviation]]
    api = "DescribeConfigs"               # API name (as in the table) or key
    versions = "0-4"                      # optional: "3", "0-4", "5-" (default: all)
    path = "results[].configs[].value"    # generic field path; * and ? are wildcards ("*": all);
                                          # "<unsupported>": the target does not answer the API
    scenario = "DescribeConfigs.*"        # optional fnmatch pattern on the scenario name
    reason = "why this difference is accepted"

A difference is *explained* when a deviation matches it; everything else is *unexplained*.
"""
from __future__ import annotations

import fnmatch
import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, List, Optional, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["Deviation", "Deviations", "UNSUPPORTED"]

#: The path of the difference "the target does not answer this API (version)".
UNSUPPORTED = "<unsupported>"


@dataclass(frozen=True)
class Deviation:
    """One explained difference (see the module docstring)."""

    api: str
    path: str
    reason: str
    versions: Optional[range] = None
    scenario: str = "*"
    #: the difference comes and goes between runs (the reference's answer depends on timing),
    #: so a run without it does not make the entry stale
    intermittent: bool = False

    def matches(self, api: str, api_key: int, version: int, scenario: str, path: str) -> bool:
        if self.api not in (api, str(api_key)):
            return False
        if self.versions is not None and version not in self.versions:
            return False
        return fnmatch.fnmatchcase(scenario, self.scenario) and _path_pattern(self.path).fullmatch(path) is not None


@functools.lru_cache(maxsize=None)
def _path_pattern(pattern: str) -> "re.Pattern[str]":
    # only * and ? are wildcards: brackets are the paths' own ("topics[].name")
    return re.compile(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."))


def _versions(text: Any) -> Optional[range]:
    if text is None:
        return None
    s = str(text).strip()
    lo, sep, hi = s.partition("-")
    if not sep:
        return range(int(lo), int(lo) + 1)
    return range(int(lo), int(hi) + 1 if hi else 1 << 15)


class Deviations:
    """A list of :class:`Deviation`; :meth:`explain` finds the one covering a difference."""

    def __init__(self, items: Iterable[Deviation] = ()) -> None:
        self.items: List[Deviation] = list(items)

    @classmethod
    def parse(cls, text: str, source: str = "deviations") -> "Deviations":
        """Read the TOML form; a malformed entry raises ValueError naming it."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{source}: {exc}") from None
        items = []
        for i, d in enumerate(doc.get("deviation", [])):
            missing = {"api", "path", "reason"} - set(d)
            extra = set(d) - {"api", "path", "reason", "versions", "scenario", "intermittent"}
            if missing or extra or not str(d.get("reason", "")).strip():
                raise ValueError(f"{source}: deviation #{i + 1} needs api, path and a reason "
                                 f"(missing {sorted(missing)}, unknown {sorted(extra)})")
            try:
                versions = _versions(d.get("versions"))
            except ValueError:
                raise ValueError(f"{source}: deviation #{i + 1}: bad versions {d['versions']!r}") from None
            items.append(Deviation(str(d["api"]), d["path"], d["reason"], versions, d.get("scenario", "*"),
                                   bool(d.get("intermittent", False))))
        return cls(items)

    @classmethod
    def load(cls, path: Union[str, Path]) -> "Deviations":
        return cls.parse(Path(path).read_text(encoding="utf-8"), str(path))

    def explain(self, api: str, api_key: int, version: int, scenario: str, path: str) -> Optional[Deviation]:
        """The first deviation covering this difference, or None."""
        for d in self.items:
            if d.matches(api, api_key, version, scenario, path):
                return d
        return None
