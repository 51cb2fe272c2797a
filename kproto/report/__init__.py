"""Reports with charts: a self-contained HTML page of a capture's traffic
(``kproto decode-pcap FILE --report page.html``) or of a log dir's contents
(``kproto logdir PATH --report page.html``).

Layers: :mod:`~kproto.report.capture` and :mod:`~kproto.report.logdir` compute the numbers
behind each chart (sans-I/O, fed with exchanges and batches), :mod:`~kproto.report.html` draws
them with Bokeh (the optional extra ``report``), :mod:`~kproto.report.read` reads files.

In a notebook::

    from kproto.report import read_capture, render_capture
    data = read_capture(["client.pcapng"]).data()      # per-chart numbers, JSON-able
    open("traffic.html", "w").write(render_capture(data, "client.pcapng"))
"""
from __future__ import annotations

from kproto.report.capture import CaptureReport
from kproto.report.html import ReportUnavailable, render_capture, render_logdir, require
from kproto.report.logdir import LogdirReport
from kproto.report.read import read_capture, read_logdir, write_page

__all__ = ["CaptureReport", "LogdirReport", "ReportUnavailable", "read_capture", "read_logdir",
           "render_capture", "render_logdir", "require", "write_page"]
