"""The numbers behind a capture report's charts (sans-I/O): fed with the exchanges that
:mod:`kproto.capture` yields (:meth:`CaptureReport.add`), gives plain data per chart
(:meth:`CaptureReport.data`) for :mod:`kproto.report.html` to draw.

The exchanges' times, sizes and latencies are kept until :meth:`data`, because the bucket width
depends on the whole capture's span: in typed arrays, about 30 bytes an exchange (a Fetch a
hundred more, for its session)."""
from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from typing import Any, Iterable, Optional

from kproto.capture.exchange import Exchange
from kproto.capture.summary import Summary, _percentile
from kproto.report.timeline import Timeline

__all__ = ["CaptureReport", "PERCENTILES", "api_label", "fetch_session_key"]

PERCENTILES = (50, 90, 99)


def api_label(ex: Exchange) -> str:
    """How the charts name an exchange's API: the API name (``api key N`` when unknown), or the
    kind for SASL tokens and stream problems."""
    if ex.kind != "kafka" or ex.api_key is None:
        return ex.kind
    return ex.api_name or f"api key {ex.api_key}"


def fetch_session_key(ex: Exchange) -> Optional[str]:
    """The fetch session a Fetch exchange belongs to, as ``broker #id`` (session ids are the
    broker's), ``sessionless`` for fetches outside sessions, None without session data."""
    info = ex.fetch_session
    if info is None:
        return None
    sid = info.get("created_session_id") or info.get("session_id") or 0
    return f"{ex.broker} #{sid}" if sid else "sessionless"


class CaptureReport:
    """Accumulates exchanges; :meth:`data` returns the charts' numbers.

    ``target``: about how many time buckets a chart gets (their width is rounded to 1, 2 or 5
    x 10^k seconds)."""

    def __init__(self, target: int = 100) -> None:
        self.target = target
        self.summary = Summary()
        self.exchanges = 0
        self.connections: set[tuple[str, str]] = set()
        self.client_ids: set[str] = set()
        # one entry per timed exchange; latency NaN when unanswered, API as an index of _apis
        self._ts, self._latency, self._bytes = array("d"), array("d"), array("q")
        self._api = array("I")
        self._apis: list[str] = []
        self._api_index: dict[str, int] = {}
        self._errors: list[tuple[int, str]] = []  # (entry, error name): rare
        # (ts, session, kind, partitions the session holds, partitions the request lists)
        self._fetches: list[tuple[float, str, str, int, int]] = []

    def add(self, ex: Exchange) -> None:
        """Count one exchange (one without a capture time is in the summary only)."""
        self.exchanges += 1
        self.summary.add(ex)
        self.connections.add((str(ex.client), str(ex.broker)))
        if ex.client_id is not None:
            self.client_ids.add(ex.client_id)
        if ex.ts is None:
            return
        label = api_label(ex)
        api = self._api_index.get(label)
        if api is None:
            api = self._api_index[label] = len(self._apis)
            self._apis.append(label)
        self._errors += [(len(self._ts), e) for e in ex.errors]
        self._ts.append(ex.ts)
        self._latency.append(math.nan if ex.latency_ms is None else ex.latency_ms)
        self._bytes.append(ex.request_bytes + ex.response_bytes)
        self._api.append(api)
        session = fetch_session_key(ex)
        if session is not None:
            info = ex.fetch_session or {}
            held = len(info.get("partitions", ()))
            listed = len(info["added_or_changed"]) if "added_or_changed" in info else held
            self._fetches.append((ex.ts, session, info.get("kind", "?"), held, listed))

    def update(self, exchanges: Iterable[Exchange]) -> "CaptureReport":
        """:meth:`add` each exchange."""
        for ex in exchanges:
            self.add(ex)
        return self

    def timeline(self) -> Optional[Timeline]:
        """The buckets of the time charts (None before any timed exchange)."""
        if not self._ts:
            return None
        return Timeline(min(self._ts), max(self._ts), self.target)

    def data(self) -> dict[str, Any]:
        """The charts' numbers, JSON-able. Times are bucket starts in seconds since the epoch.

        - ``latency``: API -> ``{"t", "p50", "p90", "p99"}`` (ms, nearest rank, buckets with
          answered requests only)
        - ``rate``: API -> ``{"t", "count", "per_s", "bytes", "bytes_per_s"}`` (every bucket;
          bytes are request plus response frames)
        - ``errors``: error name -> ``{"t", "count"}`` (every bucket; one per occurrence in a
          response, as ``--summary`` counts them)
        - ``fetch_sessions``: session -> ``{"t", "partitions"}`` (partitions the session holds
          after each request; per request, not bucketed)
        - ``fetch_requests``: fetch kind -> ``{"t", "partitions"}`` (partitions each request lists)
        - ``summary``: totals and :meth:`kproto.capture.summary.Summary.rows`
        """
        tl = self.timeline()
        out: dict[str, Any] = {"bucket_s": None, "start": None, "latency": {}, "rate": {},
                               "errors": {}, "fetch_sessions": {}, "fetch_requests": {},
                               "summary": self._summary()}
        if tl is None:
            return out
        out["bucket_s"], out["start"] = tl.width, tl.start
        starts = tl.starts()
        lat: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in starts])
        count: dict[str, list[int]] = defaultdict(lambda: [0] * tl.count)
        size: dict[str, list[int]] = defaultdict(lambda: [0] * tl.count)
        errors: dict[str, list[int]] = defaultdict(lambda: [0] * tl.count)
        buckets = [tl.index(t) for t in self._ts]
        for i, api_no, latency, nbytes in zip(buckets, self._api, self._latency, self._bytes):
            api = self._apis[api_no]
            count[api][i] += 1
            size[api][i] += nbytes
            if not math.isnan(latency):
                lat[api][i].append(latency)
        for entry, name in self._errors:
            errors[name][buckets[entry]] += 1
        for api in sorted(count):
            out["rate"][api] = {"t": starts, "count": count[api],
                                "per_s": [n / tl.width for n in count[api]],
                                "bytes": size[api], "bytes_per_s": [b / tl.width for b in size[api]]}
        for api in sorted(lat):
            series: dict[str, list[float]] = {"t": []}
            for q in PERCENTILES:
                series[f"p{q}"] = []
            for t, values in zip(starts, lat[api]):
                if not values:
                    continue
                values.sort()
                series["t"].append(t)
                for q in PERCENTILES:
                    value = _percentile(values, q)
                    assert value is not None  # values is not empty
                    series[f"p{q}"].append(value)
            out["latency"][api] = series
        out["errors"] = {name: {"t": starts, "count": errors[name]} for name in sorted(errors)}
        for ts, session, kind, held, listed in sorted(self._fetches):
            s = out["fetch_sessions"].setdefault(session, {"t": [], "partitions": []})
            s["t"].append(ts)
            s["partitions"].append(held)
            r = out["fetch_requests"].setdefault(kind, {"t": [], "partitions": []})
            r["t"].append(ts)
            r["partitions"].append(listed)
        return out

    def _summary(self) -> dict[str, Any]:
        rows = self.summary.rows()
        errors: Counter = Counter()
        for r in rows:
            errors.update(r["errors"])
        return {"exchanges": self.exchanges,
                "apis": sum(1 for k in self.summary.stats if k[0] == 0),
                "connections": len(self.connections), "client_ids": sorted(self.client_ids),
                "errors": dict(sorted(errors.items())),
                "with_problems": sum(r["with_problems"] for r in rows), "rows": rows}
