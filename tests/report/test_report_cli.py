"""``--report`` on ``kproto decode-pcap`` and ``kproto logdir``: the page is written beside the
normal output, and without Bokeh the error names the extra that installs it."""
from __future__ import annotations

import json
import os
import sys

import pytest

from report_support import EXAMPLE_LOGDIR, capture_support

from kproto.cli.main import main as cli_main

CAPTURE = capture_support.CAPTURES / "kafka_python_tansu.pcap"


def test_decode_pcap_report_beside_the_jsonl(tmp_path):
    page, out = tmp_path / "r.html", tmp_path / "out.jsonl"
    assert cli_main(["decode-pcap", str(CAPTURE), "--format", "jsonl", "-o", str(out),
                     "--report", str(page)]) == 0
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    html = page.read_text()
    assert docs and "<h1>kafka_python_tansu.pcap</h1>" in html
    # the summary table counts what the jsonl lists
    assert f"<td>{len(docs)}</td>" in html


def test_decode_pcap_report_follows_the_filters(tmp_path):
    page = tmp_path / "r.html"
    assert cli_main(["decode-pcap", str(CAPTURE), "--api", "Fetch", "-o", os.devnull,
                     "--report", str(page)]) == 0
    html = page.read_text()
    assert "Fetch(1)" in html and "Metadata(3)" not in html


def test_logdir_report_beside_the_text(tmp_path, capsys):
    page = tmp_path / "r.html"
    assert cli_main(["logdir", EXAMPLE_LOGDIR, "--report", str(page)]) == 0
    assert "orders-0" in capsys.readouterr().out
    assert "<td>orders-0</td>" in page.read_text()


@pytest.mark.parametrize("argv", [["decode-pcap", str(CAPTURE)], ["logdir", EXAMPLE_LOGDIR]])
def test_without_bokeh_the_error_names_the_extra(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.setitem(sys.modules, "bokeh", None)  # import bokeh raises ImportError
    page = tmp_path / "r.html"
    assert cli_main([*argv, "--report", str(page), *(["-o", os.devnull] if "decode-pcap" in argv
                                                     else [])]) == 2
    err = capsys.readouterr().err
    assert "kproto[report]" in err and "Bokeh" in err
    assert not page.exists()


def test_decode_pcap_reads_several_files_as_one_capture(tmp_path):
    other = capture_support.CAPTURES / "aiokafka_tansu.pcap"
    alone = []
    for f in (CAPTURE, other):
        out = tmp_path / f"{f.name}.jsonl"
        assert cli_main(["decode-pcap", str(f), "--format", "jsonl", "-o", str(out)]) == 0
        alone += out.read_text().splitlines()
    both, page = tmp_path / "both.jsonl", tmp_path / "r.html"
    assert cli_main(["decode-pcap", str(CAPTURE), str(other), "--format", "jsonl",
                     "-o", str(both), "--report", str(page)]) == 0
    assert sorted(both.read_text().splitlines()) == sorted(alone)
    html = page.read_text()
    assert "kafka_python_tansu.pcap (+1 more)" in html and f"<td>{len(alone)}</td>" in html
