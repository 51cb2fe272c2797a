"""tshark's reading beside kproto's (kproto.capture.tshark, ``decode-pcap --compare-tshark``):
tshark's JSON read PDU by PDU (several in one frame, requests told from responses by the
broker ports, malformed marks and expert notes), matched with the exchanges by connection and
correlation id, and what tshark read that kproto did not listed; on the recorded live
captures, with tshark itself where it is installed."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from capture_live_checks import decode
from capture_support import decode_pcap_cli
from kproto.capture.tshark import TsharkPdu, compare, tshark_command, tshark_pdus

DATA = Path(__file__).with_name("data") / "live_apache"
NAME = "kafka_python"
TRUTH = json.loads((DATA / f"{NAME}.truth.json").read_text())
PORTS = TRUTH["kafka_ports"]
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                  reason="tshark is not installed (tools/setup.sh installs it with root and apt)")


def _frame(number, sport, dport, *pdus, malformed=False):
    layers = {"frame": {"frame.number": str(number)},
              "tcp": {"tcp.srcport": str(sport), "tcp.dstport": str(dport)},
              "kafka": list(pdus) if len(pdus) > 1 else pdus[0]}
    if malformed:
        layers["_ws.malformed"] = "Malformed Packet"
    return {"_source": {"layers": layers}}


def test_pdus_of_tshark_json():
    broker = PORTS[0]
    frames = [
        _frame(4, 50000, broker,
               {"kafka.len": "19", "kafka.request_key": "18", "kafka.api_key": "18",
                "kafka.request.version": "3", "kafka.correlation_id": "1"},
               {"kafka.len": "24", "kafka.request_key": "3", "kafka.request.version": "13",
                "kafka.correlation_id": "2",
                "kafka.api_version_tree": {"_ws.expert": {"_ws.expert.message": "Unsupported Metadata version."}}}),
        _frame(5, broker, 50000, {"kafka.len": "61", "kafka.correlation_id": "2", "kafka.response_key": "3",
                                  "kafka.response.version": "13"}, malformed=True),
        _frame(6, broker, 50000, {"kafka.len": "7"}),   # no correlation id: not a PDU tshark read
    ]
    pdus = tshark_pdus(frames, [broker])
    assert pdus == [
        TsharkPdu(4, 50000, broker, True, 1, 19, 18, 3),
        TsharkPdu(4, 50000, broker, True, 2, 24, 3, 13, notes=("Unsupported Metadata version.",)),
        TsharkPdu(5, 50000, broker, False, 2, 61, 3, 13, malformed=True),
    ]
    assert tshark_command("f.pcap", [9093, 9092])[-10:] == [
        "-d", "tcp.port==9092,kafka", "-d", "tcp.port==9093,kafka",
        "-Y", "kafka", "-T", "json", "-J", "tcp kafka"]


def _as_tshark(exchanges):
    """The PDUs tshark would read if it read every exchange."""
    out = []
    for e in exchanges:
        out.append(TsharkPdu(0, e.client.port, e.broker.port, True, e.correlation_id,
                             e.request_bytes - 4, e.api_key, e.api_version))
        if e.response_bytes:
            out.append(TsharkPdu(0, e.client.port, e.broker.port, False, e.correlation_id,
                                 e.response_bytes - 4, e.api_key, malformed=True))
    return out


def test_compare_matches_exchanges_and_lists_what_tshark_read_alone():
    exchanges, _ = decode(DATA / f"{NAME}.pcap", PORTS)
    kafka = [e for e in exchanges if e.kind == "kafka"]
    pdus = _as_tshark(kafka)
    same = compare(exchanges, pdus)
    assert same.agrees and len(same.rows) == len(kafka)
    assert all(req is not None and (resp is not None) == bool(e.response_bytes) for e, req, resp in same.rows)
    assert same.tshark_requests == len(kafka) and same.tshark_malformed == same.tshark_responses
    table = same.table().splitlines()
    assert len(table) == 1 + len(kafka) + 1 and "every PDU tshark read is an exchange here" in table[-1]
    # an exchange kproto did not find, and a request tshark read at another version
    first, second = kafka[0], kafka[1]
    other = [p for p in pdus if (p.client_port, p.correlation_id) != (second.client.port, second.correlation_id)
             or not p.is_request]
    other.append(TsharkPdu(9, second.client.port, second.broker.port, True, second.correlation_id,
                           second.request_bytes - 4, second.api_key, second.api_version + 1))
    diff = compare([e for e in exchanges if e is not first], other)
    assert not diff.agrees
    assert {(p.correlation_id, p.is_request) for p in diff.missed + diff.missed_responses} == \
        {(first.correlation_id, True), (second.correlation_id, True)} | (
            {(first.correlation_id, False)} if first.response_bytes else set())
    assert "not found" in diff.table()


@needs_tshark
@pytest.mark.parametrize("name", sorted(p.name[:-len(".pcap")] for p in DATA.glob("*.pcap")))
def test_tshark_reads_nothing_kproto_does_not(name):
    from kproto.capture.tshark import run_tshark

    truth = json.loads((DATA / f"{name}.truth.json").read_text())
    exchanges, _ = decode(DATA / f"{name}.pcap", truth["kafka_ports"])
    comparison = compare(exchanges, run_tshark(str(DATA / f"{name}.pcap"), truth["kafka_ports"]))
    assert comparison.tshark_requests and comparison.agrees
    assert comparison.tshark_requests == sum(1 for _ in comparison.rows)   # tshark reads every request
    assert all(req is not None for _, req, _ in comparison.rows)


@needs_tshark
def test_decode_pcap_compare_tshark(tmp_path):
    out = decode_pcap_cli(tmp_path, str(DATA / f"{NAME}.pcap"), "--compare-tshark", "--no-progress",
                          *[a for p in PORTS for a in ("--port", str(p))]).splitlines()
    exchanges, _ = decode(DATA / f"{NAME}.pcap", PORTS)
    n = sum(1 for e in exchanges if e.kind == "kafka")
    assert out[0].split()[:5] == ["client", "broker", "corr", "kproto", "tshark"]
    rows = out[1:1 + n]
    assert all(len(r.split()) >= 7 for r in rows)   # ports, corr, kproto's name and version, tshark's
    assert "SaslHandshake v1" in rows[0] or any("SaslHandshake v1" in r for r in rows)
    assert out[1 + n].startswith("tshark: ") and "every PDU tshark read is an exchange here" in out[1 + n]


def test_compare_tshark_reads_one_file(tmp_path):
    from kproto.cli.errors import CliError

    with pytest.raises(CliError, match="one capture file"):
        decode_pcap_cli(tmp_path, str(DATA / f"{NAME}.pcap"), str(DATA / f"{NAME}.pcap"), "--compare-tshark")
