"""Acceptance: the ``--report`` pages render in headless Chromium (Debian's, which .ci/run
installs): every chart is drawn (coloured data pixels in its area), no console errors, no
request leaves the file (the page is self-contained). The same check fails on pages whose
JavaScript throws or whose charts are not drawn."""
from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from report_support import LOGDIRS, capture_support

from kproto.cli.main import main as cli_main
from kproto.report import LogdirReport, render_logdir

CHROMIUM = "/usr/bin/chromium"
CAPTURE = capture_support.CAPTURES / "ck_mock3_all.pcap"  # errors and Fetch traffic: no empty chart
LOGDIR = os.path.join(LOGDIRS, "broker1-clean")
CAPTURE_CHARTS, LOGDIR_CHARTS = 6, 4
MIN_DATA_PIXELS = 500  # saturated pixels per chart: the toolbar alone has about 120


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # no sandbox: CI runs as root; the flags keep Chromium off the network on its own
        b = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("pages")
    cap, log = out / "capture.html", out / "logdir.html"
    assert cli_main(["decode-pcap", str(CAPTURE), "--report", str(cap), "-o", os.devnull]) == 0
    assert cli_main(["logdir", LOGDIR, "--report", str(log)]) in (0, 1)  # 1: damage reported
    return {"capture": cap, "logdir": log}


def inspect(browser, page: Path) -> dict:
    """Load ``page``; returns console errors, requests that left the file, and per chart the
    count of saturated pixels and of distinct saturated colours in its screenshot."""
    tab = browser.new_page(viewport={"width": 1300, "height": 900})
    errors: list[str] = []
    outside: list[str] = []
    idle: list[bool] = []

    def console(msg) -> None:
        if msg.type == "error":
            errors.append(msg.text)
        if "document idle" in msg.text:  # Bokeh's word that every plot is drawn
            idle.append(True)

    def route(r) -> None:
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    tab.on("console", console)
    tab.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    tab.route("**/*", route)
    tab.goto(page.as_uri())
    deadline = time.monotonic() + 15
    while not idle and not errors and time.monotonic() < deadline:
        tab.wait_for_timeout(100)
    charts = []
    figures = tab.locator(".bk-Figure")
    # one screenshot of the whole page (not scrolled: its boxes are page coordinates), cut per chart
    page_img = np.asarray(Image.open(io.BytesIO(tab.screenshot(full_page=True))).convert("RGB"))
    for i in range(figures.count()):
        box = figures.nth(i).bounding_box()
        assert box is not None
        x, y = int(box["x"]), int(box["y"])
        img = page_img[y:y + int(box["height"]), x:x + int(box["width"])]
        # grey (axes, grid, text) has r = g = b; the series' palette colours do not
        data = img[img.max(axis=2).astype(int) - img.min(axis=2) > 60]
        charts.append({"pixels": len(data), "colours": len(np.unique(data, axis=0))})
    tab.close()
    return {"errors": errors, "outside": outside, "idle": bool(idle), "charts": charts}


def rendered(result: dict, charts: int) -> bool:
    return (result["idle"] and not result["errors"] and not result["outside"]
            and len(result["charts"]) == charts
            and all(c["pixels"] >= MIN_DATA_PIXELS and c["colours"] >= 20 for c in result["charts"]))


@pytest.mark.parametrize("kind,charts", [("capture", CAPTURE_CHARTS), ("logdir", LOGDIR_CHARTS)])
def test_report_pages_render(browser, pages, kind, charts):
    html = pages[kind].read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=", html)  # everything inline
    result = inspect(browser, pages[kind])
    assert rendered(result, charts), result


def test_the_check_fails_when_the_script_throws(browser, pages, tmp_path):
    broken = tmp_path / "throws.html"
    broken.write_text(pages["capture"].read_text().replace(
        "</head>", "<script>throw new Error('report broken');</script></head>", 1))
    result = inspect(browser, broken)
    assert any("report broken" in e for e in result["errors"])
    assert not rendered(result, CAPTURE_CHARTS)


def test_the_check_fails_when_the_charts_are_not_drawn(browser, pages, tmp_path):
    from bokeh.palettes import Category10_10, Category20_20

    text = pages["logdir"].read_text()
    # the figures are drawn, but every series in grey: no data colour in any chart
    grey = tmp_path / "grey.html"
    palette = "|".join(c.lstrip("#") for c in set(Category10_10) | set(Category20_20))
    grey.write_text(re.sub(f"#({palette})", "#777777", text, flags=re.I))
    result = inspect(browser, grey)
    assert result["idle"] and len(result["charts"]) == LOGDIR_CHARTS
    assert not rendered(result, LOGDIR_CHARTS)
    # a page whose Bokeh document cannot be read: nothing is drawn
    bad = tmp_path / "bad.html"
    bad.write_text(text.replace('"name":"Figure"', '"name":"NoSuchFigure"', 1))
    assert bad.read_text() != text
    result = inspect(browser, bad)
    assert not result["charts"] and not rendered(result, LOGDIR_CHARTS)


def test_the_check_fails_on_a_page_without_data(browser, tmp_path):
    empty = tmp_path / "empty.html"
    empty.write_text(render_logdir(LogdirReport().data(), "no log dir"))
    result = inspect(browser, empty)
    assert result["idle"] and not result["errors"] and len(result["charts"]) == LOGDIR_CHARTS
    assert not rendered(result, LOGDIR_CHARTS)
