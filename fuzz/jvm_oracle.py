"""The oracle of the ``kafka-segments-jvm`` reader over damaged segments: its ``LogDirCheck``
tool's report of a log directory against kproto's Python reader (``verifyCrc``, as the JVM
reader always checks CRCs) on the same directory. A crash (any exception or error in the
JVM) or rows that differ is a finding; a refusal (a whole message of magic 0 or 1) is not.

Used by ``fuzz/campaign.py``'s ``jvm`` family and by tests/spark/test_spark_jvm.py.
"""
from __future__ import annotations

import os
import random

import pyarrow as pa

TS = 1_700_000_000_000
TOPIC = "f"


def seed_logdir(root: str) -> str:
    """A log dir of one partition and one segment of small batches of every codec, with
    headers, null keys and values, LogAppendTime, a transaction and its marker; the path of
    its ``.log``."""
    from kproto.records import RecordBatchBuilder
    from kproto.storage import LogDirWriter

    part = LogDirWriter(root, cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A",
                        index_interval=200).partition(TOPIC, 0)
    n = 0
    for b in range(12):
        codec = ("none", "gzip", "snappy", "lz4", "zstd")[b % 5]
        extra = {"timestamp_type": 1, "log_append_time": TS + 99} if b == 4 else {}
        if b == 7:
            extra = {"producer_id": 5, "producer_epoch": 0, "base_sequence": 0, "transactional": True}
        builder = RecordBatchBuilder(compression=codec, base_offset=part.next_offset, **extra)
        for i in range(1 + b % 4):
            n += 1
            builder.append(TS + n, None if n % 5 == 0 else b"k%d" % n,
                           None if n % 7 == 0 else b"value-%d" % n * (1 + n % 3),
                           [("h", b"%d" % n), ("nil", None)] if n % 3 == 0 else [])
        part.append(builder.build())
        if b == 7:
            marker = RecordBatchBuilder(base_offset=part.next_offset, producer_id=5,
                                        producer_epoch=0, transactional=True, control=True)
            marker.append_end_txn_marker(True, 0, TS)
            part.append(marker.build())
    part.close()
    return os.path.join(root, f"{TOPIC}-0", "0" * 20 + ".log")


def batch_positions(data: bytes) -> list[int]:
    """Where the batches of an undamaged segment start."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        out.append(pos)
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    return out


_EDGES = (0, 1, 13, 14, 48, 49, 60, 61, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def mutate(rnd: random.Random, data: bytes) -> bytes:
    """One to three edits of a segment: bit flips, byte overwrites, cuts, inserts, and edge
    values written into a batch's length, base offset, magic, last offset delta or count."""
    buf = bytearray(data)
    positions = batch_positions(data)
    for _ in range(rnd.randint(1, 3)):
        op = rnd.randrange(6)
        if not buf:
            break
        if op == 0:
            i = rnd.randrange(len(buf))
            buf[i] ^= 1 << rnd.randrange(8)
        elif op == 1:
            buf[rnd.randrange(len(buf))] = rnd.randrange(256)
        elif op == 2:
            del buf[rnd.randrange(len(buf)):]
        elif op == 3:
            at = rnd.randrange(len(buf))
            if rnd.random() < 0.5:
                del buf[at:at + rnd.randint(1, 40)]
            else:
                buf[at:at] = rnd.randbytes(rnd.randint(1, 40))
        else:
            at = rnd.choice(positions)
            field, width = rnd.choice(((8, 4), (0, 8), (16, 1), (23, 4), (57, 4)))
            value = rnd.choice(_EDGES) if width == 4 else (
                rnd.randrange(256) if width == 1 else rnd.choice((-1, 0, 2**63 - 1, 5, 1000)))
            raw = (value % (1 << (8 * width))).to_bytes(width, "big")
            buf[at + field:at + field + width] = raw[:len(buf[at + field:at + field + width])]
    return bytes(buf)


def python_rows(path: str, **options) -> list[tuple]:
    """The rows kproto's Python reader gives (CRCs checked; ``options``: more fields of its
    ``ReadOptions``), as :func:`jvm_rows` gives them."""
    import kproto.storage as ks

    table = ks.read_arrow(path, verify_crc=True, **options)
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    out = []
    for i, r in enumerate(table.select(["topic", "partition", "offset", "timestamp_type", "key",
                                        "value", "headers"]).to_pylist()):
        us = (ts[i] * 1000 + 2**63) % 2**64 - 2**63  # the JVM's microseconds, wrapped as a long
        headers = None if not r["headers"] else tuple((h["key"], h["value"]) for h in r["headers"])
        out.append((r["topic"], r["partition"], r["offset"], us, r["timestamp_type"], r["key"],
                    r["value"], headers))
    return sorted(out, key=repr)


def jvm_rows(report: dict) -> list[tuple]:
    """The rows of a ``LogDirCheck`` report."""
    def raw(h):
        return None if h is None else bytes.fromhex(h)
    out = []
    for topic, partition, offset, us, kind, key, value, headers in report["rows"]:
        hs = None if headers is None else tuple(
            (bytes.fromhex(k).decode("utf-8", "replace"), raw(v)) for k, v in headers)
        out.append((topic, partition, offset, us, kind, raw(key), raw(value), hs))
    return sorted(out, key=repr)


def judge(path: str, report: dict, **options) -> str:
    """``"rows"`` when the JVM reader read ``path`` as the Python reader does (with these
    ``ReadOptions`` fields, the JVM's with the matching source options), ``"refused"`` when it
    refused it; AssertionError on a crash or rows that differ."""
    if "crash" in report:
        raise AssertionError(f"kafka-segments-jvm crashed on {path}:\n{report['crash']}")
    if "refused" in report:
        return "refused"
    got, want = jvm_rows(report), python_rows(path, **options)
    if got != want:
        only_jvm = [r[2] for r in got if r not in want][:10]
        only_py = [r[2] for r in want if r not in got][:10]
        raise AssertionError(f"kafka-segments-jvm read {len(got)} rows of {path}, kproto's "
                             f"reader {len(want)}: offsets only in the JVM's {only_jvm}, only "
                             f"in Python's {only_py}; JVM skips {report['skips']}")
    return "rows"
