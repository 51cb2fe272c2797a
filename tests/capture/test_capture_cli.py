"""``kproto decode-pcap``: JSON lines, records view, summary table, text."""
from __future__ import annotations

import argparse
import base64
import json

from capture_support import CAPTURES, truth
from kproto.cli import decode_pcap
from kproto.cli.main import SUBCOMMAND_MODULES

KEYS = {"ts", "client", "broker", "api_key", "api_name", "api_version", "correlation_id",
        "client_id", "latency_ms", "request", "response", "errors", "problems"}


def _run(tmp_path, *argv) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    decode_pcap.register(parser.add_subparsers())
    out = tmp_path / "out.txt"
    args = parser.parse_args(["decode-pcap", *argv, "-o", str(out)])
    code = args.func(args)
    return code, out.read_text()


def test_registered():
    assert "kproto.cli.decode_pcap" in SUBCOMMAND_MODULES


def test_jsonl_has_the_documented_keys(tmp_path):
    name = "kafka_python_tansu.pcap"
    port = truth(name)["kafka_ports"][0]
    code, text = _run(tmp_path, str(CAPTURES / name), "--port", str(port))
    docs = [json.loads(line) for line in text.splitlines()]
    assert code == 0 and len(docs) == 25
    for d in docs:
        assert KEYS <= d.keys()
        assert d["broker"] == f"127.0.0.1:{port}" and d["ts"].endswith("Z")
        assert d["request"] is not None and d["response"] is not None and d["problems"] == []
        assert d["latency_ms"] >= 0
    join = [d for d in docs if d["api_name"] == "JoinGroup"]
    assert join[0]["errors"] == ["MEMBER_ID_REQUIRED"] and join[0]["response"]["errorCode"] == 79
    produce = [d for d in docs if d["api_key"] == 0][0]
    assert isinstance(produce["request"]["topicData"][0]["partitionData"][0]["records"], str)


def test_records_view(tmp_path):
    name = "ck_produce_compression_tansu.pcap"
    code, text = _run(tmp_path, str(CAPTURES / name), "--records", "--format", "jsonl")
    docs = [json.loads(line) for line in text.splitlines()]
    values, codecs = [], set()
    for d in docs:
        if d["api_key"] == 0:
            for t in d["request"]["topicData"]:
                for p in t["partitionData"]:
                    view = p["records"]
                    assert set(view) >= {"batches", "records"}
                    codecs.update(b["compression"] for b in view["batches"])
                    values += [base64.b64decode(r["value"]).decode() for r in view["records"]]
    want = sorted(r["value"] for r in truth(name)["records_produced"])
    assert sorted(values) == want
    assert codecs == {"none", "gzip", "snappy", "lz4", "zstd"}


def test_records_cap(tmp_path):
    name = "ck_produce_compression_tansu.pcap"
    _, text = _run(tmp_path, str(CAPTURES / name), "--records", "--records-max-bytes", "16",
                   "--format", "jsonl")
    views = [p["records"] for d in map(json.loads, text.splitlines()) if d["api_key"] == 0
             for t in d["request"]["topicData"] for p in t["partitionData"]]
    assert views and all(v["records"] == [] and v["batches"] and "cap" in v["notes"][0] for v in views)


def test_summary_table(tmp_path):
    name = "ck_mock3_all.pcap"
    code, text = _run(tmp_path, str(CAPTURES / name), "--summary")
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["API", "count", "p50", "ms"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert rows["Fetch(1)"].split()[1] == "58"
    assert "UNSUPPORTED_VERSION×27" in rows["ApiVersions(18)"]


def test_text_output_and_port_guess(tmp_path, capsys):
    name = "aiokafka_tansu.pcap"
    code, text = _run(tmp_path, str(CAPTURES / name), "--format", "text")
    assert code == 0 and len(text.splitlines()) == 23
    assert "ApiVersions v0 corr=" in text
    assert f"kafka port {truth(name)['kafka_ports'][0]} (guessed" in capsys.readouterr().err


def test_damaged_file_still_decodes(tmp_path, capsys):
    data = (CAPTURES / "java_tansu.pcapng").read_bytes()
    bad = tmp_path / "cut.pcapng"
    bad.write_bytes(data[: len(data) // 2])
    code, text = _run(tmp_path, str(bad), "--format", "jsonl")
    docs = [json.loads(line) for line in text.splitlines()]
    assert code == 1 and len([d for d in docs if not d["problems"]]) > 10
    assert "capture: pcapng block" in capsys.readouterr().err


def test_progress_bar_passes_exchanges_through():
    import io

    from kproto.capture import BodyDecoder, CaptureDecoder, iter_exchanges

    from kproto.cli.progress import Progress

    stream = io.StringIO()
    bar = Progress(sum(p.stat().st_size for p in CAPTURES.glob("a*.pcap")), "test", stream)
    bar.bar.mininterval = 0  # draw at every step
    steps = list(decode_pcap._file_steps(CaptureDecoder(decode=BodyDecoder()), sorted(
        str(p) for p in CAPTURES.glob("a*.pcap")), bar))
    want = list(iter_exchanges(CAPTURES / "aiokafka_tansu.pcap"))
    assert [repr(ex) for (ex,) in steps] == [repr(ex) for ex in want]
    assert "%" in stream.getvalue() and "test" in stream.getvalue()


def _docs(tmp_path, name, *argv):
    code, text = _run(tmp_path, str(CAPTURES / name), "--format", "jsonl", *argv)
    assert code == 0
    return [json.loads(line) for line in text.splitlines()]


def test_filters_keep_exactly_the_matching_exchanges(tmp_path):
    name = "ck_mock3_all.pcap"
    every = _docs(tmp_path, name)
    kafka = [d for d in every if d.get("api_key") is not None]
    assert {d["api_name"] for d in kafka} >= {"Fetch", "Produce", "ApiVersions"}

    def key(d):
        return d["ts"], d["client"], d.get("correlation_id")

    for argv, want in [
        (["--api", "Fetch,produce"], [d for d in kafka if d["api_name"] in ("Fetch", "Produce")]),
        (["--api", "1", "--api", "ProduceRequest"], [d for d in kafka if d["api_key"] in (0, 1)]),
        (["--errors"], [d for d in every if d["errors"] or d["problems"]]),
        (["--min-latency", "50"], [d for d in every if d.get("latency_ms") is not None and d["latency_ms"] >= 50]),
        (["--api", "ApiVersions", "--errors"], [d for d in kafka if d["api_key"] == 18 and (d["errors"] or d["problems"])]),
    ]:
        got = _docs(tmp_path, name, *argv)
        assert got and [key(d) for d in got] == [key(d) for d in want], argv
    assert len(_docs(tmp_path, name, "--api", "ApiVersions", "--errors")) == 27  # the mock's odd answers
    clients = {d["client_id"] for d in kafka}
    one = sorted(c for c in clients if c)[0]
    assert [key(d) for d in _docs(tmp_path, name, "--client-id", one)] == \
        [key(d) for d in kafka if d["client_id"] == one]


def test_filters_apply_to_the_summary_and_reject_unknown_apis(tmp_path):
    code, text = _run(tmp_path, str(CAPTURES / "ck_mock3_all.pcap"), "--summary", "--api", "Fetch")
    rows = text.splitlines()[1:]
    assert code == 0 and [r.split()[:2] for r in rows] == [["Fetch(1)", "58"]]
    from kproto.cli.errors import CliError

    try:
        _run(tmp_path, str(CAPTURES / "ck_mock3_all.pcap"), "--api", "Fetchh")
    except CliError as e:
        assert "'Fetchh' is not an API name or key" in str(e)
    else:
        raise AssertionError("an unknown API name was accepted")



def test_decoding_a_file_reuses_freed_memory():
    # a capture of megabyte messages decoded a second time in the same process takes (almost)
    # no fresh pages from the system once decode-pcap has set malloc up; children: the setting
    # is per process, and the one without it has the setting's function replaced
    import subprocess
    import sys
    import textwrap

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's malloc only")
    code = textwrap.dedent("""
        import argparse, os, resource, sys
        from kproto.cli import decode_pcap
        if sys.argv[2] == "without":
            decode_pcap._reuse_freed_memory = lambda: False
        parser = argparse.ArgumentParser()
        decode_pcap.register(parser.add_subparsers())
        args = parser.parse_args(["decode-pcap", sys.argv[1], "--no-progress", "-o", os.devnull])
        decode_pcap.run(args)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        decode_pcap.run(args)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    """)
    capture = str(CAPTURES / "hard_stream_tansu.pcap")  # a 1.5 MiB Produce and Fetch
    faults = {how: int(subprocess.run([sys.executable, "-c", code, capture, how],
                                      capture_output=True, text=True, check=True).stdout)
              for how in ("with", "without")}
    assert faults["without"] > 1000, faults
    # with the setting what is left (about 400 faults, pure Python and C alike) is the process's
    # own growth; without it the C paths take about 3,200 and pure Python 4,800
    assert faults["with"] * 5 < faults["without"], faults
