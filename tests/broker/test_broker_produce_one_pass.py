"""A produced batch checked and assigned its offsets in one C pass
(``validate_and_assign_offsets``) gives exactly what the broker's general path gives: the same
bytes, max timestamp and offset delta, on random, damaged, compressed, transactional and
out-of-order batches under every timestamp and key rule; it declines whatever the general path
refuses, and takes every single uncompressed batch the general path accepts."""
from __future__ import annotations

import dataclasses

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kproto.broker.log import BrokerError, LogConfig, LogManager, _checks_timestamps
from kproto.records import RecordBatchBuilder, columns
from kproto.records.record import ATTR_CONTROL, ATTR_TRANSACTIONAL

I64 = 2**63 - 1
NOW = 1_700_000_000_000


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    mgr = LogManager(str(tmp_path_factory.mktemp("one-pass")))
    lg = mgr.create_topic("t", 1).partitions[0]
    yield lg
    mgr.close()


@pytest.fixture
def c_engine(speedups, monkeypatch):
    monkeypatch.setattr(columns, "_speedups", speedups)


BOUNDS = st.sampled_from([0, 1000, 3_600_000, I64, I64, 2**64])


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(recs=st.lists(st.tuples(st.integers(-2**20, 2**20) | st.integers(-500, 500), st.none() | st.binary(max_size=12),
                               st.none() | st.binary(max_size=200)), min_size=1, max_size=12),
       base_ts=st.sampled_from([NOW] * 4 + [0, -5, I64 - 2**21]),
       gap=st.sampled_from([None] * 12 + list(range(12))),
       codec=st.sampled_from([0, 0, 0, 1, 2, 3, 4]),  # every codec: all are dependencies
       producer=st.sampled_from([(-1, -1, -1), (7, 0, 0), (7, 2, 41), (7, 0, -1), (-1, -1, 5)]),
       flags=st.sampled_from([0, 0, 0, ATTR_TRANSACTIONAL, ATTR_CONTROL, 0x08, 0x05]),
       client_ts_type=st.integers(0, 1), topic_ts=st.sampled_from(["CreateTime", "LogAppendTime"]),
       before=BOUNDS, after=BOUNDS, compacted=st.booleans(),
       damage=st.sampled_from(["none"] * 6 + ["records", "records+crc", "header", "trailing", "two"]),
       at=st.integers(0, 10**6), byte=st.integers(0, 255),
       base=st.integers(0, 2**40), epoch=st.integers(0, 2**31 - 1))
def test_one_pass_gives_what_the_general_path_gives(
        c_engine, partition, recs, base_ts, gap, codec, producer, flags, client_ts_type, topic_ts,
        before, after, compacted, damage, at, byte, base, epoch):
    pid, pepoch, seq = producer
    b = RecordBatchBuilder(base_offset=0, compression=codec, producer_id=pid, producer_epoch=pepoch,
                           base_sequence=seq, timestamp_type=client_ts_type,
                           log_append_time=NOW if client_ts_type else None)
    for i, (dt, k, v) in enumerate(recs):
        b.append(base_ts + dt, k, v, [], offset=i + (1 if gap is not None and i >= gap else 0))
    data = bytearray(b.build())
    if flags:  # attribute bits the builder does not set, the CRC made right again
        attrs = int.from_bytes(data[21:23], "big") | flags
        data[21:23] = attrs.to_bytes(2, "big")
        data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    if damage in ("records", "records+crc") and len(data) > 61:
        data[61 + at % (len(data) - 61)] = byte
        if damage == "records+crc":  # past the CRC: the record checks decide
            data[17:21] = crc32c(bytes(data[21:])).to_bytes(4, "big")
    elif damage == "header":
        data[at % 61] = byte
    elif damage == "trailing":
        data += bytes([byte]) * (1 + at % 20)
    elif damage == "two":
        data = data + data
    records = bytes(data)
    partition.config = dataclasses.replace(
        LogConfig(), message_timestamp_type=topic_ts, timestamp_before_max_ms=before,
        timestamp_after_max_ms=after, compacted=compacted)
    partition.leader_epoch = epoch
    cfg = partition.config
    log_append = topic_ts == "LogAppendTime"
    fast = columns.validate_and_assign_offsets(
        records, NOW, before, after, check_timestamps=_checks_timestamps(cfg), need_keys=compacted,
        log_append_time=log_append, base_offset=base, leader_epoch=epoch)
    try:
        general = partition._validate_and_assign(records, NOW, log_append, base)
    except BrokerError:
        general = None
    event("one pass" if fast is not None else "general path accepts" if general is not None else "refused")
    if fast is not None:
        assert general is not None, "the one pass took a batch the general path refuses"
        assert (bytes(general[0]), general[1], general[2]) == fast
    elif general is not None:
        single = len(records) == int.from_bytes(records[8:12], "big") + 12
        assert not (single and records[22] & 0x07 == 0), \
            "the one pass declined a single uncompressed batch the general path accepts"


def test_the_general_path_runs_without_the_accelerator(partition, monkeypatch):
    monkeypatch.setattr(columns, "_speedups", None)
    b = RecordBatchBuilder()
    b.append(NOW, b"k", b"v")
    assert columns.validate_and_assign_offsets(
        b.build(), NOW, I64, I64, check_timestamps=False, need_keys=False, log_append_time=False,
        base_offset=0, leader_epoch=0) is None
    partition.config = LogConfig()
    info = partition.append_as_leader(b.build(), NOW)
    assert info.base_offset == partition.log_end_offset - 1
