"""Per-API statistics over exchanges: counts, errors, latency percentiles, bytes."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Optional, Union

from kproto.capture.exchange import Exchange

__all__ = ["ApiStats", "Summary"]


def _percentile(sorted_values: list[float], q: float) -> Optional[float]:
    """Nearest-rank percentile of sorted values (None when empty)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]


@dataclass
class ApiStats:
    """Statistics of one API key (and of the other kinds under their own label)."""

    label: str
    count: int = 0
    errors: Counter = field(default_factory=Counter)
    problems: int = 0
    request_bytes: int = 0
    response_bytes: int = 0
    latencies: list[float] = field(default_factory=list)
    versions: Counter = field(default_factory=Counter)   # (api_version, decoded_as) -> count

    def p(self, q: float) -> Optional[float]:
        """Latency percentile in ms."""
        self.latencies.sort()
        return _percentile(self.latencies, q)


class Summary:
    """Accumulates exchanges (``add``) and renders a table (``rows``/``table``)."""

    def __init__(self) -> None:
        self.stats: dict[tuple, ApiStats] = {}

    def add(self, ex: Exchange) -> None:
        key: tuple[int, Union[int, str]]  # kafka API keys sort before the other kinds
        if ex.kind == "kafka" and ex.api_key is not None:
            key = (0, ex.api_key)
            label = f"{ex.api_name or 'unknown'}({ex.api_key})"
        else:
            key = (1, ex.kind)
            label = {"sasl": "SASL tokens", "stream": "stream problems"}.get(ex.kind, ex.kind)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = ApiStats(label)
        st.count += 1
        st.errors.update(ex.errors)
        st.problems += bool(ex.problems)
        st.request_bytes += ex.request_bytes
        st.response_bytes += ex.response_bytes
        if ex.latency_ms is not None:
            st.latencies.append(ex.latency_ms)
        if ex.api_version is not None:
            st.versions[(ex.api_version, ex.decoded_as)] += 1

    def update(self, exchanges: Iterable[Exchange]) -> "Summary":
        for ex in exchanges:
            self.add(ex)
        return self

    def rows(self) -> list[dict]:
        """One dict per API key, ordered by key."""
        out = []
        for _, st in sorted(self.stats.items(), key=lambda kv: kv[0]):
            versions = {_version(v, as_): n for (v, as_), n in sorted(st.versions.items())}
            out.append({"api": st.label, "count": st.count, "versions": versions,
                        "errors": dict(st.errors),
                        "with_problems": st.problems, "p50_ms": st.p(50), "p99_ms": st.p(99),
                        "request_bytes": st.request_bytes, "response_bytes": st.response_bytes})
        return out

    def table(self) -> str:
        """The rows as an aligned text table."""
        head = ["API", "count", "p50 ms", "p99 ms", "req bytes", "resp bytes", "problems", "versions",
                "errors"]
        lines = [head]
        for r in self.rows():
            lines.append([r["api"], str(r["count"]), _ms(r["p50_ms"]), _ms(r["p99_ms"]),
                          str(r["request_bytes"]), str(r["response_bytes"]), str(r["with_problems"]),
                          ", ".join(f"{k}×{v}" for k, v in r["versions"].items()) or "-",
                          ", ".join(f"{k}×{v}" for k, v in sorted(r["errors"].items())) or "-"])
        widths = [max(len(row[i]) for row in lines) for i in range(len(head) - 1)]
        # the versions column is text: left-aligned like the API name
        return "\n".join("  ".join(c.ljust(w) if i in (0, 7) else c.rjust(w) for i, (c, w) in
                                   enumerate(zip(row, widths))) + "  " + row[-1] for row in lines)


def _version(v: int, decoded_as: Optional[int]) -> str:
    """``v13`` or, for a version newer than the schemas, ``v13 (as v12)``."""
    return f"v{v}" if decoded_as is None else f"v{v} (as v{decoded_as})"


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.2f}"
