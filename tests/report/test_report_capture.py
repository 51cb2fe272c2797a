"""The numbers behind the capture charts against what ``kproto decode-pcap --format jsonl``
prints for the same captures, recomputed here without kproto.report."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest

from report_support import Buckets, all_captures, jsonl, seconds

from kproto.report import read_capture
from kproto.report.capture import PERCENTILES
from kproto.report.timeline import Timeline, nice_step

CAPTURES = all_captures()


def _label(doc: dict) -> str:
    if doc["kind"] != "kafka" or doc["api_key"] is None:
        return doc["kind"]
    return doc["api_name"] or f"api key {doc['api_key']}"


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_capture_charts_match_the_jsonl(tmp_path, capture):
    docs = jsonl(tmp_path, capture)
    data = read_capture([capture]).data()
    s = data["summary"]

    # the summary table
    assert s["exchanges"] == len(docs)
    assert s["connections"] == len({(d["client"], d["broker"]) for d in docs})
    assert s["client_ids"] == sorted({d["client_id"] for d in docs if d["client_id"] is not None})
    want_errors = Counter(e for d in docs for e in d["errors"])
    assert s["errors"] == dict(want_errors)
    assert s["apis"] == len({d["api_key"] for d in docs if d["kind"] == "kafka"
                             and d["api_key"] is not None})

    timed = [d for d in docs if d["ts"] is not None]
    if not timed:
        assert data["rate"] == {} and data["bucket_s"] is None
        return
    b = Buckets(data["start"], data["bucket_s"], slack=1e-6)
    for d in timed:
        b.add(seconds(d["ts"]), d)

    # request rate and bytes per API: totals exactly, each bucket where the time is certain
    assert {api: sum(r["count"]) for api, r in data["rate"].items()} == Counter(map(_label, timed))
    assert {api: sum(r["bytes"]) for api, r in data["rate"].items()} == {
        api: sum((d["request_bytes"] or 0) + (d["response_bytes"] or 0)
                 for d in timed if _label(d) == api) for api in data["rate"]}
    for api, r in data["rate"].items():
        assert len(r["t"]) == len(r["count"]) == len(r["bytes"])
        for i, (n, size, per_s) in enumerate(zip(r["count"], r["bytes"], r["per_s"])):
            assert per_s == pytest.approx(n / data["bucket_s"])
            if i in b.unsure:
                continue
            mine = [d for d in b.get(i) if _label(d) == api]
            assert n == len(mine), (api, i)
            assert size == sum((d["request_bytes"] or 0) + (d["response_bytes"] or 0) for d in mine)
    assert all(i < len(next(iter(data["rate"].values()))["t"]) for i in b.items)

    # latency percentiles: numpy's inverted_cdf is the nearest-rank definition
    for api, lat in data["latency"].items():
        for j, t in enumerate(lat["t"]):
            i = round((t - data["start"]) / data["bucket_s"])
            if i in b.unsure:
                continue
            values = [d["latency_ms"] for d in b.get(i) if _label(d) == api
                      and d["latency_ms"] is not None]
            assert values, (api, t)
            for q in PERCENTILES:
                want = float(np.percentile(values, q, method="inverted_cdf"))
                assert lat[f"p{q}"][j] == pytest.approx(want, abs=6e-4), (api, t, q)
    answered = Counter(_label(d) for d in timed if d["latency_ms"] is not None)
    assert set(data["latency"]) == set(answered)

    # errors by name
    assert {e: sum(r["count"]) for e, r in data["errors"].items()} == Counter(
        e for d in timed for e in d["errors"])
    for name, r in data["errors"].items():
        for i, n in enumerate(r["count"]):
            if i not in b.unsure:
                assert n == sum(d["errors"].count(name) for d in b.get(i))

    # fetch sessions: one point per Fetch request with session data, the partitions it holds
    fetches = [d for d in timed if d.get("fetch_session") is not None]
    assert sum(len(v["t"]) for v in data["fetch_sessions"].values()) == len(fetches)
    assert sum(len(v["t"]) for v in data["fetch_requests"].values()) == len(fetches)
    sizes: dict[str, list[int]] = defaultdict(list)
    for d in fetches:
        info = d["fetch_session"]
        sid = info.get("created_session_id") or info.get("session_id") or 0
        sizes[f"{d['broker']} #{sid}" if sid else "sessionless"].append(len(info["partitions"]))
    assert {k: sorted(v["partitions"]) for k, v in data["fetch_sessions"].items()} == \
        {k: sorted(v) for k, v in sizes.items()}
    kinds = Counter(d["fetch_session"]["kind"] for d in fetches)
    assert {k: len(v["t"]) for k, v in data["fetch_requests"].items()} == kinds


def test_the_captures_cover_every_chart():
    """Errors and real (non-sessionless) fetch sessions occur in the captures tested above."""
    seen_errors = seen_sessions = False
    for capture in CAPTURES:
        data = read_capture([capture]).data()
        seen_errors |= bool(data["errors"])
        seen_sessions |= any(k != "sessionless" for k in data["fetch_sessions"])
    assert seen_errors and seen_sessions


@pytest.mark.parametrize("span", [0.0, 1e-4, 0.37, 12.0, 3600.0, 86400 * 9.5])
def test_bucket_width_is_round_and_fits_the_target(span):
    w = nice_step(span, 100)
    mantissa = w / 10 ** np.floor(np.log10(w))
    assert round(mantissa, 9) in (1, 2, 5)
    assert span / w <= 100 or w == 1e-3
    tl = Timeline(1_700_000_000.123, 1_700_000_000.123 + span)
    assert tl.count <= 102 and tl.start <= 1_700_000_000.123
    assert tl.index(1_700_000_000.123 + span) == tl.count - 1
