"""The Java benchmark runner (``benchmarks/java/ProtocolBench.java`` via ``benchmarks/java_runner.py``):
compiled with javac, run with a tiny warm-up on the payloads of ``bench_protocol.py``,
``bench_records.py`` and ``bench_storage.py``; its figures must be for exactly those bytes
(Kafka's classes re-encode each protocol payload to the input, and read as many records as
kproto does)."""
from __future__ import annotations

import hashlib
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import bench_protocol  # noqa: E402
import bench_records  # noqa: E402
import bench_storage  # noqa: E402
import java_runner  # noqa: E402
from kproto.records import iter_batches  # noqa: E402

pytestmark = pytest.mark.skipif(not (shutil.which("java") and shutil.which("javac")),
                                reason="Java 17 (java, javac) is needed")

QUICK = {"warmup": 0.1, "rounds": 3, "round_seconds": 0.05}


@pytest.fixture(scope="module")
def command(tmp_path_factory) -> list[str]:
    return java_runner.build(str(tmp_path_factory.mktemp("java-bench")))


def test_runner_measures_the_benchmarks_bytes(command):
    protocol = [(label, m, v, d) for label, (m, v, d) in bench_protocol.build_inputs().items()]
    logs = {codec: bench_records.make_log(3, 100, codec) for codec in bench_records.CODECS}
    out = java_runner.run(command, protocol, list(logs.items()), timeout=120, **QUICK)
    assert out["kafka"] == java_runner.KAFKA_VERSION and out["rounds"] == 3 and out["clock"] == "wall"
    assert set(out["protocol"]) == {p[0] for p in protocol}
    for label, message, version, data in protocol:
        j = out["protocol"][label]
        assert (j["message"], j["version"], j["bytes"]) == (message, version, len(data)), label
        assert j["reencoded_sha256"] == hashlib.sha256(data).hexdigest(), label
        # the Send frames the same body: size prefix plus a header of a few bytes
        assert len(data) < j["send_bytes"] <= len(data) + 40, label
        for op in ("decode", "encode", "send"):
            assert j[op] > 0, (label, op)
    assert set(out["records"]) == set(logs)
    for codec, data in logs.items():
        j = out["records"][codec]
        expected = sum(len(list(b.records())) for b in iter_batches(data))
        assert (j["bytes"], j["batches"], j["records"]) == (len(data), 3, expected), codec
        assert j["records_per_s"] > 0, codec


def test_runner_refuses_bytes_it_does_not_reencode_identically(command):
    _, version, data = bench_protocol.build_inputs()["ProduceRequest v9"][0:3]
    # a trailing byte is ignored by the decoder, so the re-encoding comes out one byte short
    with pytest.raises(RuntimeError, match="re-encodes"):
        java_runner.run(command, [("bad", "ProduceRequest", version, data + b"\0")], timeout=60, **QUICK)


def test_runner_scans_the_storage_benchmarks_segments(command, tmp_path):
    from kproto.storage import read_arrow

    root = str(tmp_path / "logdir")
    bench_storage.write_log_dir(root, 3000, "lz4")
    logs = bench_storage.segment_files(root)
    assert len(logs) > 1
    # timed by the JVM's CPU time, as bench_storage times read_arrow (a protocol payload too)
    message, version, data = bench_protocol.build_inputs()["ProduceRequest v9"]
    out = java_runner.run(command, [("p", message, version, data)], segments=[("lz4", logs)],
                          timeout=120, cpu_time=True, **QUICK)
    assert out["clock"] == "cpu"
    assert all(out["protocol"]["p"][op] > 0 for op in ("decode", "encode", "send"))
    j = out["segments"]["lz4"]
    batches = sum(1 for p in logs for _ in iter_batches(open(p, "rb").read()))
    assert (j["files"], j["bytes"], j["batches"]) == (len(logs), sum(map(os.path.getsize, logs)),
                                                     batches)
    assert j["records"] == read_arrow(root).num_rows == 3000
    for way in ("mapped", "mapped_crc", "file_records"):
        assert j[way] > 0, way


def test_ops_per_second_uses_the_clock_it_is_given():
    ticks = iter(range(10**6))   # a clock that advances one second per reading
    rate = bench_protocol.ops_per_second(lambda: None, 1.0, 3, clock=lambda: float(next(ticks)))
    assert rate == 1.0   # one call per round, each round two readings one second apart
