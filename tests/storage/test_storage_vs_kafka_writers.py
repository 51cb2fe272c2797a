"""kproto's own writers judged by Apache Kafka: log directories written by kproto's broker and
by :class:`kproto.storage.LogDirWriter` are read by Kafka's ``DumpLogSegments`` without a
complaint, and it states the same facts as kproto's reader (``dump-log --format kafka``, whose
output is Kafka's byte for byte on Kafka's own files: ``test_storage_vs_kafka``)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kproto.records import RecordBatchBuilder
from kproto.storage import LogDirWriter
from kproto.testing import BrokerThread, require_apache_kafka
from kproto.testing.apache import DEFAULT_VERSION

import kafka_logdir_support as kls


@pytest.fixture(autouse=True)
def _needs_kafka():
    require_apache_kafka(DEFAULT_VERSION)


def _is_read_cleanly(root: Path, minimum: int) -> None:
    # Kafka's tool cannot dump the preallocated index of an empty segment (left by any broker
    # that stops without a clean shutdown): it looks in the log for the batch that the index's
    # first, all-zero slot points at, and fails with NoSuchElementException
    files = [f for f in kls.dumped_files(root)
             if not (f.suffix in (".index", ".timeindex") and f.stat().st_size
                     and f.with_suffix(".log").stat().st_size == 0)]
    assert len(files) >= minimum
    stderr = kls.assert_format_kafka_is_kafkas(DEFAULT_VERSION, files).decode(errors="replace")
    # Kafka's tool notes an offset gap before the first batch of every segment that does not
    # start at offset 0 (it starts from -1), and a "mismatch" for the all-zero first slot of a
    # preallocated index (as on Kafka's own files after kill -9): nothing else may be said
    lines = stderr.splitlines()
    for notice, detail in zip(lines[::2], lines[1::2]):
        path = Path(notice.split()[-1].lstrip(":"))
        if notice.startswith("Non-consecutive offsets in "):
            assert detail.strip() == f"-1 is followed by {int(path.stem)}", stderr
        else:   # the index's first slot read as an entry: offset/timestamp 0 found nowhere
            assert notice.startswith(("Mismatches in :", "Found timestamp mismatch in :",
                                      "The following indexed offsets are not found in :")), stderr
            slot = 8 if path.suffix == ".index" else 12
            assert path.read_bytes()[:slot] == bytes(slot), stderr
            assert detail.strip().startswith((f"Index offset: {int(path.stem)}, ",
                                              f"Indexed offset: {int(path.stem)}, ",
                                              "Index timestamp: 0, ")), stderr
    assert len(lines) % 2 == 0, stderr


@pytest.mark.parametrize("clean", [True, False])
def test_kproto_broker_log_dir_is_read_by_kafkas_tool(tmp_path, clean):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerThread(tmp_path / "kproto").start()
    try:
        b = broker.bootstrap
        topics = [f"codec-{c}" for c in kls.CODECS] + ["txn"]
        admin = AdminClient({"bootstrap.servers": b})
        for f in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            f.result(20)
        for c in kls.CODECS:
            kls._produce(kls._producer(b, **{"compression.type": c}), f"codec-{c}", 20, c)
        tp = kls._producer(b, **{"transactional.id": "tx-kproto"})
        tp.init_transactions(30)
        plain = kls._producer(b, **{"enable.idempotence": True})
        for outcome in ("commit", "abort", "commit"):
            tp.begin_transaction()
            kls._produce(tp, "txn", 3, outcome)
            kls._produce(plain, "txn", 2, "plain")
            (tp.commit_transaction if outcome == "commit" else tp.abort_transaction)(30)
        del tp, plain, admin   # before the broker goes: they would log its absence
    finally:
        broker.stop(clean)
    _is_read_cleanly(tmp_path / "kproto", minimum=25)


def _batch(w, n: int, ts: int, **kw):
    b = RecordBatchBuilder(base_offset=w.next_offset, **kw)
    for i in range(n):
        b.append(ts + i, f"k{i}".encode(), f"value-{w.next_offset + i}".encode() * 20,
                 [("h", b"x"), ("g", None)])
    return b.build()


def _marker(w, commit: bool, pid: int, ts: int):
    b = RecordBatchBuilder(base_offset=w.next_offset, producer_id=pid, producer_epoch=0,
                           transactional=True, control=True)
    b.append_end_txn_marker(commit, 7, ts)
    return b.build()


@pytest.mark.parametrize("clean", [True, False])
def test_log_dir_writer_files_are_read_by_kafkas_tool(tmp_path, clean):
    d = LogDirWriter(str(tmp_path / "logs"), cluster_id="Gbic2Gj7Dm9oTfmSNSzM_A",
                     segment_bytes=20000)
    w = d.partition("written", 0)
    ts = 1_700_000_000_000
    w.append(_batch(w, 10, ts, compression="lz4", partition_leader_epoch=0))
    w.append(_batch(w, 5, ts + 10, producer_id=9, producer_epoch=0, base_sequence=0,
                    transactional=True, partition_leader_epoch=2))
    w.append(_marker(w, True, 9, ts + 20))
    for i in range(30):
        w.append(_batch(w, 5, ts + 30 + i, producer_id=9, producer_epoch=0,
                        base_sequence=5 + 5 * i, transactional=True, partition_leader_epoch=2))
        w.append(_batch(w, 3, ts + 30 + i, compression=("zstd", "gzip", "snappy")[i % 3],
                        partition_leader_epoch=2))
    w.append(_marker(w, False, 9, ts + 99))
    w.append(_batch(w, 4, ts + 100, partition_leader_epoch=2))
    d.close(clean)
    files = kls.dumped_files(tmp_path / "logs")
    assert {f.suffix for f in files} == {".log", ".index", ".timeindex", ".txnindex", ".snapshot"}
    _is_read_cleanly(tmp_path / "logs", minimum=8)
