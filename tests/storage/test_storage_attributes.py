"""Batch attributes Kafka refuses (an unknown codec id, here disguised as a control batch with
its CRC repaired) are damage wherever batches are framed: never a batch silently skipped."""
from __future__ import annotations

import os
import shutil
import struct

import pytest
from crc32c import crc32c

import kproto.storage as ks
from kproto.errors import DecodeError
from kproto.problems import Problems
from kproto.records.batch import CRC_START
from kproto.records.builder import RecordBatchBuilder
from kproto.records.reader import iter_batches
from kproto.storage import reader as storage_reader

from storage_fixtures import LOGDIRS

CLEAN = os.path.join(LOGDIRS, "broker1-clean")
SEGMENT = os.path.join("orders-0", "00000000000000000633.log")


def mangle(buf: bytearray, pos: int, attributes: int) -> None:
    """Set the attributes of the v2 batch at ``pos`` and repair its CRC."""
    size = 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">h", buf, pos + CRC_START, attributes)
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + CRC_START:pos + size])))


def three_batches() -> tuple[bytearray, int]:
    parts = []
    for i in range(3):
        b = RecordBatchBuilder(base_offset=i * 10)
        for j in range(4):
            b.append(1_700_000_000_000 + j, b"k%d" % j, b"v%d" % j)
        parts.append(b.build())
    return bytearray(b"".join(parts)), len(parts[0])


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_in_a_control_batch_is_damage_in_iter_batches(codec):
    buf, second = three_batches()
    mangle(buf, second, 0x20 | codec)
    damage = Problems()
    got = [b.base_offset for b in iter_batches(bytes(buf), problems=damage)]
    assert got == [0, 20]  # the batches after it are still read
    assert [(d.kind, d.position) for d in damage] == [("corrupt", second)]
    assert f"compression codec id {codec}" in damage[0].reason and not damage[0].fatal
    with pytest.raises(DecodeError, match="compression codec"):
        list(iter_batches(bytes(buf)))


@pytest.fixture()
def logdir(tmp_path):
    root = tmp_path / "logs"
    shutil.copytree(CLEAN, root)
    for dirpath, _, files in os.walk(root):
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    return str(root)


@pytest.mark.parametrize("fast", [True, False])
def test_control_batch_with_unknown_codec_is_reported_by_read_arrow(logdir, monkeypatch, fast):
    monkeypatch.setattr(storage_reader, "FAST_SCAN", fast)
    clean = Problems()
    full = ks.read_arrow(logdir, problems=clean).num_rows
    assert not clean
    path = os.path.join(logdir, SEGMENT)
    buf = bytearray(open(path, "rb").read())
    batches = list(iter_batches(bytes(buf)))
    victim = next(b for b in batches if not b.is_control and b.count > 1)
    mangle(buf, victim.position, 0x20 | 6)
    with open(path, "wb") as f:
        f.write(buf)
    damage = Problems()
    rows = ks.read_arrow(logdir, problems=damage).num_rows
    assert rows == full - victim.count
    assert [(d.kind, d.position, d.bytes_skipped) for d in damage] == [
        ("corrupt", victim.position, victim.size_in_bytes)]
    assert "compression codec id 6" in damage[0].reason


@pytest.mark.parametrize("fast", [True, False])
def test_data_batch_marked_control_is_reported_by_read_arrow(logdir, monkeypatch, fast):
    monkeypatch.setattr(storage_reader, "FAST_SCAN", fast)
    full = ks.read_arrow(logdir).num_rows
    path = os.path.join(logdir, SEGMENT)
    buf = bytearray(open(path, "rb").read())
    victim = next(b for b in iter_batches(bytes(buf)) if not b.is_control and b.count > 1)
    mangle(buf, victim.position, victim.attributes | 0x20)  # its codec kept: only the bit
    with open(path, "wb") as f:
        f.write(buf)
    damage = Problems()
    assert ks.read_arrow(logdir, problems=damage).num_rows == full - victim.count
    assert [(d.kind, d.position, d.bytes_skipped) for d in damage] == [
        ("corrupt", victim.position, victim.size_in_bytes)]
    assert "control key" in damage[0].reason
    # real control batches (the fixtures' transaction markers) are still skipped quietly
    clean = Problems()
    assert ks.read_arrow(CLEAN, problems=clean).num_rows == full and not clean


def test_records_behind_a_count_of_zero_are_damage():
    buf, second = three_batches()
    struct.pack_into(">i", buf, second + 57, 0)  # Kafka's iterator returns nothing for it
    mangle(buf, second, 0)
    damage = Problems()
    assert [b.base_offset for b in iter_batches(bytes(buf), problems=damage)] == [0, 20]
    assert [(d.kind, d.position) for d in damage] == [("corrupt", second)]
    assert "record count 0 but" in damage[0].reason
    # the empty batches Kafka's cleaner writes (a header, no records) are no damage
    empty = bytearray(RecordBatchBuilder(base_offset=5).build())
    assert len(empty) == 61
    damage = Problems()
    assert [b.count for b in iter_batches(bytes(empty), problems=damage)] == [0] and not damage


@pytest.mark.parametrize("fast", [True, False])
def test_count_of_zero_over_records_is_reported_by_read_arrow(logdir, monkeypatch, fast):
    monkeypatch.setattr(storage_reader, "FAST_SCAN", fast)
    full = ks.read_arrow(logdir).num_rows
    path = os.path.join(logdir, SEGMENT)
    buf = bytearray(open(path, "rb").read())
    victim = next(b for b in iter_batches(bytes(buf)) if not b.is_control and b.count > 1)
    struct.pack_into(">i", buf, victim.position + 57, 0)
    mangle(buf, victim.position, victim.attributes)
    with open(path, "wb") as f:
        f.write(buf)
    damage = Problems()
    assert ks.read_arrow(logdir, problems=damage).num_rows == full - victim.count
    assert [(d.kind, d.position) for d in damage] == [("corrupt", victim.position)]
