"""Self-contained HTML pages of a report's data, drawn with Bokeh (its JavaScript and CSS are
inlined: the page works offline). Rendering is a pure function of the data; writing the page
is the caller's."""
from __future__ import annotations

import html
import itertools
import math
from typing import Any, Iterator, Literal, Sequence

__all__ = ["MISSING", "ReportUnavailable", "render_capture", "render_logdir", "require"]

MISSING = ("the --report pages need the plotting library Bokeh, which kproto's optional extra "
           "'report' installs: pip install 'kproto[report]'")
_WIDTH, _HEIGHT = 1100, 300
_MAX_LEGEND = 20  # more series than this are still drawn, without a legend entry each


class ReportUnavailable(RuntimeError):
    """Bokeh is not installed (the ``report`` extra)."""


def require() -> None:
    """Raise :class:`ReportUnavailable` unless Bokeh can be imported."""
    try:
        import bokeh  # noqa: F401
    except ImportError as exc:
        raise ReportUnavailable(MISSING) from exc


def _palette() -> Iterator[str]:
    from bokeh.palettes import Category10_10, Category20_20

    # the strong colours first, then their lighter halves
    return itertools.cycle(list(Category10_10) + list(Category20_20[1::2]))


def _figure(title: str, *, x_type: Literal["auto", "linear", "datetime"] = "datetime", x_label: str = "", y_label: str = "",
            **kw: Any) -> Any:
    from bokeh.plotting import figure

    fig = figure(title=title, x_axis_type=x_type, width=_WIDTH, height=_HEIGHT,
                 tools="pan,box_zoom,wheel_zoom,reset,save,hover", **kw)
    fig.xaxis.axis_label, fig.yaxis.axis_label = x_label, y_label
    fig.toolbar.logo = None  # colour on the page is data only (the browser test counts it)
    return fig


def _finish(fig: Any, legend: bool = True) -> Any:
    if legend and fig.legend:
        fig.legend.click_policy = "hide"  # a click on an entry hides the series
        fig.legend.location = "top_left"
        fig.legend.label_text_font_size, fig.legend.spacing = "8pt", 0
        fig.legend.glyph_height = fig.legend.label_height = 14
        fig.add_layout(fig.legend[0], "right")
    return fig


def _coloured(series: dict[str, dict[str, list]], y: str, fig: Any, scale: float = 1.0,
              mode: str = "line", empty: str = "no data") -> Any:
    """One coloured series per entry (line, step or points); the ``empty`` note without any."""
    from bokeh.models import ColumnDataSource

    if not series:
        return _empty(fig, empty)
    colours = _palette()
    for i, (name, s) in enumerate(series.items()):
        colour = next(colours)
        src = ColumnDataSource({"x": [t * scale for t in s["t"]], "y": s[y]})
        kw: dict[str, Any] = {"legend_label": name} if i < _MAX_LEGEND else {}
        if mode == "step":
            fig.step("x", "y", source=src, color=colour, line_width=2, mode="after", **kw)
        elif mode == "line":
            fig.line("x", "y", source=src, color=colour, line_width=2, **kw)
        # markers where a line would not show (a point or two); each glyph costs Bokeh time
        if mode == "points" or len(s["t"]) <= 2:
            fig.scatter("x", "y", source=src, color=colour, size=5, **kw)
    return _finish(fig)


def _broken(series: dict[str, list], ys: Sequence[str], width: float, scale: float
            ) -> dict[str, list[float]]:
    """Columns x (scaled) and ``ys`` with a NaN point between buckets that are not adjacent, so
    a line does not bridge the time when nothing was measured."""
    out: dict[str, list[float]] = {"x": [], **{y: [] for y in ys}}
    last = None
    for i, t in enumerate(series["t"]):
        if last is not None and t - last > width * 1.5:
            out["x"].append((last + width) * scale)
            for y in ys:
                out[y].append(math.nan)
        out["x"].append(t * scale)
        for y in ys:
            out[y].append(series[y][i])
        last = t
    return out


def _empty(fig: Any, why: str, x: Any = 0) -> Any:
    from bokeh.models.annotations import Label

    fig.add_layout(Label(x=_WIDTH // 3, y=_HEIGHT // 3, x_units="screen", y_units="screen",
                         text=why, text_color="#888888", text_font_size="16px"))
    fig.scatter([x], [1], alpha=0)  # an empty plot renders its axes only with some data
    return fig


def _table(head: Sequence[str], rows: list[Sequence[Any]]) -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, dict):
        return ", ".join(f"{k}×{n}" for k, n in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(map(str, v)) + ")" if len(v) == 2 else ", ".join(map(str, v))
    return str(v)


_CSS = """<style>
  body { font-family: system-ui, sans-serif; margin: 1.5em; height: auto; color: #222; }
  h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
  table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
  th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
  th { background: #f0f0f0; } td:first-child { text-align: left; }
  p.note { color: #555; font-size: 0.85em; max-width: 70em; }
</style>"""

# each figure is one root of the Bokeh document: sections[i] (trusted HTML made here) goes
# before root i
_TEMPLATE = """{% from macros import embed %}
{% block postamble %}""" + _CSS + """{% endblock %}
{% block contents %}
<h1>{{ heading }}</h1>
{{ intro }}
{% for doc in docs %}{% for root in doc.roots %}
{{ sections[loop.index0] }}
{{ embed(root) }}
{% endfor %}{% endfor %}
{% endblock %}"""


def _page(title: str, intro: str, parts: list[tuple[str, Any]]) -> str:
    from bokeh.embed import file_html
    from bokeh.resources import INLINE
    from markupsafe import Markup

    return file_html([fig for _, fig in parts], INLINE, title, template=_TEMPLATE,
                     template_variables={"heading": title, "intro": Markup(intro),
                                         "sections": [Markup(s) for s, _ in parts]})


def render_capture(data: dict[str, Any], title: str) -> str:
    """The page of :meth:`kproto.report.capture.CaptureReport.data`."""
    require()
    from bokeh.models import ColumnDataSource

    ms = 1000.0  # Bokeh's datetime axis counts milliseconds
    s = data["summary"]
    totals = _table(["exchanges", "APIs", "connections", "client ids", "errors",
                     "with problems"],
                    [[s["exchanges"], s["apis"], s["connections"], len(s["client_ids"]),
                      sum(s["errors"].values()), s["with_problems"]]])
    per_api = _table(["API", "count", "p50 ms", "p99 ms", "request bytes", "response bytes",
                      "with problems", "versions", "errors"],
                     [[r["api"], r["count"], r["p50_ms"], r["p99_ms"], r["request_bytes"],
                       r["response_bytes"], r["with_problems"], r["versions"], r["errors"]]
                      for r in s["rows"]])
    clients = ("<p class=note>client ids: " + html.escape(", ".join(s["client_ids"]) or "-")
               + "</p>")
    width = data["bucket_s"]
    bucket = "bucket" if width is None else f"{width:g} s"
    intro = (f"<h2>Summary</h2>{totals}{per_api}{clients}"
             f"<p class=note>Time charts use buckets of {bucket}; latency is from a request's "
             "last byte to its response's last byte (nearest-rank percentiles).</p>")

    lat = _figure(f"Latency per API (p50 solid, p90 dashed, p99 dotted; per {bucket})",
                  y_label="ms (log scale)", y_axis_type="log")
    colours = _palette()
    for i, (api, sr) in enumerate(data["latency"].items()):
        colour = next(colours)
        src = ColumnDataSource(_broken(sr, ("p50", "p90", "p99"), width, ms))
        for q, dash in (("p50", "solid"), ("p90", "dashed"), ("p99", "dotted")):
            kw: dict[str, Any] = {"legend_label": api} if i < _MAX_LEGEND else {}
            lat.line("x", q, source=src, color=colour, line_dash=dash, line_width=2, **kw)
        lat.scatter("x", "p99", source=src, color=colour, size=4)
    parts: list[tuple[str, Any]] = [
        ("<h2>Latency</h2>", _finish(lat) if data["latency"] else _empty(lat, "no answered requests")),
        ("<h2>Request rate</h2>",
         _coloured(data["rate"], "per_s", _figure("Requests per second per API", y_label="requests/s"), ms,
                   empty="no exchanges")),
        ("<h2>Bytes</h2>",
         _coloured(data["rate"], "bytes_per_s",
                   _figure("Bytes per second per API (requests + responses)", y_label="bytes/s"), ms)),
    ]
    err = _figure(f"Errors per {bucket} by error name", y_label="responses with the error")
    parts.append(("<h2>Errors</h2>",
                  _coloured(data["errors"], "count", err, ms, empty="no error codes in the responses")))
    sess = _figure("Fetch session size: partitions the session holds after each request",
                   y_label="partitions")
    parts.append(("<h2>Fetch sessions</h2>",
                  _coloured(data["fetch_sessions"], "partitions", sess, ms, mode="step",
                            empty="no Fetch requests")))
    req = _figure("Partitions listed per Fetch request, by kind", y_label="partitions")
    parts.append(("", _coloured(data["fetch_requests"], "partitions", req, ms, mode="points",
                                empty="no Fetch requests")))
    return _page(title, intro, parts)


def render_logdir(data: dict[str, Any], title: str) -> str:
    """The page of :meth:`kproto.report.logdir.LogdirReport.data`."""
    require()
    rows = data["summary"]
    table = _table(["partition", "offsets", "log start", "segments", "bytes", "batches",
                    "records", "leader epochs", "damage"],
                   [[r["partition"], r["offsets"], r["log_start_offset"], r["segments"],
                     r["size"], r["batches"], r["records"], r["leader_epochs"], r["damage"]]
                    for r in rows])
    width = data["bucket_ms"]
    bucket = "bucket" if width is None else f"{width / 1000:g} s"
    intro = (f"<h2>Summary</h2>{table}<p class=note>Batches are placed in time by their max "
             f"timestamp, in buckets of {bucket}; records and bytes are what the segments hold "
             "(nothing is decompressed).</p>")
    rec = _figure(f"Records per partition per {bucket}", y_label="records")
    byt = _figure(f"Bytes per partition per {bucket}", y_label="bytes")
    parts: list[tuple[str, Any]] = [
        ("<h2>Records</h2>", _coloured(data["records"], "count", rec, empty="no batch with a timestamp")),
        ("<h2>Bytes</h2>", _coloured(data["bytes"], "count", byt, empty="no batch with a timestamp")),
    ]
    segs = data["segments"]
    names = [f"{s['partition']} @{s['base_offset']}" for s in segs]
    seg = _figure("Segment sizes", x_type="auto", y_label="bytes", x_range=names or ["-"])
    seg.xaxis.major_label_orientation = 0.9
    if segs:
        from bokeh.models import ColumnDataSource

        parts_seen: dict[str, str] = {}
        colours = _palette()
        for s in segs:
            if s["partition"] not in parts_seen:
                parts_seen[s["partition"]] = next(colours)
        seg.vbar(x="x", top="top", width=0.8, color="colour", source=ColumnDataSource(
            {"x": names, "top": [s["size"] for s in segs],
             "colour": [parts_seen[s["partition"]] for s in segs]}))
    parts.append(("<h2>Segments</h2>", seg if segs else _empty(seg, "no segments", x="-")))
    epochs = {name: {"t": [r[0] for r in e["batches"]] + ([e["batches"][-1][1]] if e["batches"] else []),
                     "epoch": [r[2] for r in e["batches"]] + ([e["batches"][-1][2]] if e["batches"] else [])}
              for name, e in data["leader_epochs"].items() if e["batches"]}
    ep = _figure("Leader epoch of the batches over offsets (a step per new epoch)",
                 x_type="linear", x_label="offset", y_label="leader epoch")
    parts.append(("<h2>Leader epochs</h2>", _coloured(epochs, "epoch", ep, mode="step",
                                                      empty="no batches")))
    return _page(title, intro, parts)
