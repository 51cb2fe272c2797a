"""The one-line errors of the commands that had none, word for word where the words matter."""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from kproto.cli.main import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_LOGDIR = str(REPO / "examples" / "logdir")


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def test_logdir_refuses_a_folder_that_is_not_a_log_dir(tmp_path):
    (tmp_path / "dbus-1").mkdir()  # a name like a partition folder's, with no Kafka file
    (tmp_path / "dbus-1" / "system.conf").write_text("<busconfig/>")
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    status, out, err = run(["logdir", str(tmp_path)])
    assert status == 2 and out == ""
    assert err == (f"kproto logdir: {tmp_path}: no partition folders and no meta.properties: "
                   "not a Kafka log directory\n")


def test_logdir_still_reads_a_log_dir_and_a_partition_folder():
    assert run(["logdir", EXAMPLE_LOGDIR])[0] == 0
    assert run(["logdir", os.path.join(EXAMPLE_LOGDIR, "orders-0")])[0] == 0


def test_logdir_text_has_no_python_none():
    status, out, _ = run(["logdir", EXAMPLE_LOGDIR])
    assert status == 0 and "None" not in out
    # orders-0 has producer snapshots; the counts stay
    assert "producers=" in out


def test_logdir_partition_without_snapshot_says_so(tmp_path):
    from kproto.storage.summary import render_text

    doc = {"path": "x", "partitions": [{
        "topic": "t", "partition": 0, "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "segments": [],
        "size": 0, "batches": 0, "offsets": None, "log_start_offset": None,
        "leader_epochs": None, "producer_snapshots": [], "producers": None,
        "aborted_transactions": 0, "first_unstable_offset": None, "damage": [],
        "other_files": []}], "problems": []}
    text = render_text(doc)
    assert "producers=None" not in text and "no producer snapshot" in text


def test_dump_log_of_a_file_without_any_batch(tmp_path):
    notes = tmp_path / "README.md"
    notes.write_text("# a project\n\nSome words, no record batch.\n" * 20)
    status, _, err = run(["dump-log", "--format", "jsonl", str(notes)])
    assert status == 2
    assert err == (f"kproto dump-log: {notes}: no record batch at all: not a Kafka log "
                   "segment or record set\n")


def test_dump_log_of_an_empty_segment_is_fine(tmp_path):
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"")  # an active segment before its first append
    assert run(["dump-log", "--format", "jsonl", str(seg)])[0] == 0


def test_decode_pcap_missing_file():
    status, _, err = run(["decode-pcap", "--no-progress", "/nonexistent/capture.pcap"])
    assert status == 2
    assert err == "kproto decode-pcap: /nonexistent/capture.pcap: No such file or directory\n"


def test_decode_pcap_of_a_file_that_is_no_capture(tmp_path):
    junk = tmp_path / "notes.txt"
    junk.write_text("not a capture\n" * 10)
    status, _, err = run(["decode-pcap", "--no-progress", str(junk)])
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"kproto decode-pcap: {junk}: not a pcap or pcapng file")


def test_decode_response_unknown_version_and_key():
    status, _, err = run(["decode-response", "--api-key", "3", "--version", "99", "00000001"])
    assert (status, err) == (2, "kproto decode-response: MetadataResponse has versions 0-13, "
                                "not 99\n")
    status, _, err = run(["decode-response", "--api-key", "999", "--version", "0", "00000001"])
    assert (status, err) == (2, "kproto decode-response: unknown API key 999 ('kproto schemas' "
                                "lists them)\n")


def test_decode_request_bad_bytes_and_missing_file():
    status, _, err = run(["decode-request", "0000"])
    assert status == 2 and err.startswith("kproto decode-request: ") and len(err.splitlines()) == 1
    status, _, err = run(["decode-request", "@/nonexistent/frame.bin"])
    assert (status, err) == (2, "kproto decode-request: /nonexistent/frame.bin: No such file or "
                                "directory\n")


def test_spark_read_without_java(monkeypatch, tmp_path):
    import pytest

    pytest.importorskip("pyspark")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java here
    status, _, err = run(["spark-read", EXAMPLE_LOGDIR])
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("kproto spark-read: Spark needs Java 17 or newer (no java on PATH)")


def test_spark_read_refuses_a_folder_that_is_not_a_log_dir(tmp_path):
    status, _, err = run(["spark-read", str(tmp_path)])
    assert status == 2 and "not a Kafka log directory" in err


def test_unexpected_errors_are_one_line_unless_debugging(monkeypatch):
    import kproto.cli.logdir as logdir

    def boom(args):
        raise RuntimeError("something broke")

    monkeypatch.setattr(logdir, "run", boom)
    from kproto.cli import main as cli_main

    parser = cli_main.build_parser()
    args = parser.parse_args(["logdir", EXAMPLE_LOGDIR])
    args.func = boom
    monkeypatch.setattr(cli_main.argparse.ArgumentParser, "parse_args", lambda self, argv=None: args)
    monkeypatch.delenv("KPROTO_DEBUG", raising=False)
    status, _, err = run(["logdir", EXAMPLE_LOGDIR])
    assert status == 2
    assert err == ("kproto logdir: unexpected RuntimeError: something broke (set KPROTO_DEBUG=1 "
                   "for the traceback)\n")
    monkeypatch.setenv("KPROTO_DEBUG", "1")
    try:
        run(["logdir", EXAMPLE_LOGDIR])
    except RuntimeError as exc:
        assert str(exc) == "something broke"
    else:
        raise AssertionError("KPROTO_DEBUG=1 should let the exception through")


def test_spark_read_shows_utf8_keys_and_values_as_text(capsys):
    from kproto.cli.spark_read import _emit, shown

    assert shown("café".encode()) == "café" and shown(b"\xff\x00") == b"\xff\x00"
    assert shown(None) is None and shown(7) == 7
    rows = [{"key": shown(b"user-1"), "value": shown(b"\xff\x00binary")},
            {"key": None, "value": shown("line\nbreak".encode())}]
    _emit(rows, ["key", "value"], "text")
    assert capsys.readouterr().out.splitlines() == [
        "key     value", "user-1  b'\\xff\\x00binary'", "null    line\\nbreak"]
    _emit(rows, ["key", "value"], "jsonl")
    assert capsys.readouterr().out.splitlines() == [
        '{"key": "user-1", "value": "b\'\\\\xff\\\\x00binary\'"}',
        '{"key": null, "value": "line\\nbreak"}']


def test_decode_pcap_records_text_shows_utf8_as_text():
    argv = ["decode-pcap", str(REPO / "examples" / "aiokafka.pcap"), "--records", "--api",
            "Produce", "--no-progress"]
    status, out, _ = run(argv + ["--format", "text", "-v"])
    assert status == 0 and '"key": "k-aio-2", "value": "m-aio-2"' in out
    assert '{"key": "h-src", "value": "aio"}' in out
    status, out, _ = run(argv + ["--format", "jsonl"])  # machines keep Kafka's base64
    assert status == 0 and '"value": "bS1haW8tMg=="' in out


def test_readable_records_keeps_bytes_that_are_not_text():
    import base64

    from kproto.cli.decode_pcap import readable_records

    view = {"records": [{"key": base64.b64encode(b"\xff\xfe").decode(), "value": None,
                         "headers": [{"key": "h", "value": base64.b64encode(b"ok").decode()}]}]}
    assert readable_records(view)["records"] == [
        {"key": "b'\\xff\\xfe'", "value": None, "headers": [{"key": "h", "value": "ok"}]}]


def test_every_json_flag_has_a_format_option():
    from kproto.cli.main import _leaves, build_parser

    for leaf in _leaves(build_parser()):
        options = {o for a in leaf._actions for o in a.option_strings}
        if "--json" in options:
            assert "--format" in options, leaf.prog
    status, out, _ = run(["schemas", "--format", "json"])
    assert status == 0 and out.lstrip().startswith("[")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_only_on_a_terminal(monkeypatch):
    from kproto.cli.progress import progress_bar

    assert progress_bar(1 << 30, "x") is None  # stderr captured: not a terminal
    monkeypatch.setattr("sys.stderr", _Terminal())
    assert progress_bar(10, "x", minimum=20) is None  # short work: no bar
    bar = progress_bar(1 << 30, "x")
    assert bar is not None
    bar.close()


def test_dump_log_of_a_large_directory_shows_progress_on_a_terminal(monkeypatch):
    terminal, out = _Terminal(), io.StringIO()
    monkeypatch.setattr("sys.stderr", terminal)
    with contextlib.redirect_stdout(out):
        assert main(["dump-log", "--format", "jsonl", EXAMPLE_LOGDIR]) == 0
    assert "dump-log" in terminal.getvalue() and "file" in terminal.getvalue()
    assert "dump-log" not in out.getvalue().splitlines()[0]
    terminal.truncate(0)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["dump-log", "--format", "jsonl", "--no-progress", EXAMPLE_LOGDIR]) == 0
    assert terminal.getvalue() == ""


def test_logdir_of_a_large_directory_shows_progress_on_a_terminal(monkeypatch):
    monkeypatch.setattr("kproto.cli.logdir.PROGRESS_MIN_BYTES", 1)  # the example is ~1 MB
    terminal, out = _Terminal(), io.StringIO()
    monkeypatch.setattr("sys.stderr", terminal)
    with contextlib.redirect_stdout(out):
        assert main(["logdir", "--format", "json", EXAMPLE_LOGDIR]) == 0
    assert "logdir" in terminal.getvalue() and "B" in terminal.getvalue()
    assert out.getvalue().lstrip().startswith("{")
    terminal.truncate(0)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["logdir", "--no-progress", EXAMPLE_LOGDIR]) == 0
    assert terminal.getvalue() == ""
    monkeypatch.setattr("kproto.cli.logdir.PROGRESS_MIN_BYTES", 64 << 20)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["logdir", EXAMPLE_LOGDIR]) == 0
    assert terminal.getvalue() == ""  # small work: no bar


def test_logdir_summary_reports_segment_bytes_as_it_goes():
    from kproto.storage.summary import summarize

    calls: list[tuple[int, int]] = []
    doc = summarize(EXAMPLE_LOGDIR, progress=lambda done, total: calls.append((done, total)))
    total = sum(p["size"] for p in doc["partitions"])
    assert calls[0] == (0, total) and calls[-1] == (total, total) and total > 0
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert summarize(EXAMPLE_LOGDIR) == doc


def test_decode_pcap_help_names_the_release_the_schemas_come_from():
    import pytest

    from kproto.capture.bodies import schemas_release
    from kproto.codecs import KAFKA_VERSION

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["decode-pcap", "--help"])
    text = " ".join(out.getvalue().split())
    assert f"up to Kafka {KAFKA_VERSION}'s" in text and schemas_release() == KAFKA_VERSION
