"""Rows of the capture tables (kproto.capture.table, what the kafka-pcap source yields):
records decoded many partitions at a time are, record for record, what the Python record
reader finds partition by partition, also beside a partition that does not decode; exchange
rows are the JSON lines' fields."""
from __future__ import annotations

import copy
import json
import struct

import pyarrow as pa
import pytest

from capture_support import ALL, CAPTURES, decoded
from kproto.capture import table
from kproto.capture.exchange import exchange_to_json
from kproto.capture.records_view import iter_records
from kproto.errors import DecodeError
from kproto.schemas.api_keys import ApiKey

pytestmark = pytest.mark.skipif(not ALL, reason="no captures")


def _oracle(exchanges) -> list[dict]:
    """Record rows one partition at a time through the Python record reader."""
    rows = []
    for index, ex in enumerate(exchanges):
        if ex.api_key not in (ApiKey.PRODUCE, ApiKey.FETCH):
            continue
        for name, tid, partition, error, data, base, append in table._partition_records(ex):
            try:
                records = list(iter_records(data))
            except DecodeError:
                continue  # a records field that does not decode is left out
            for i, (batch, rec) in enumerate(records):
                rows.append({
                    "index": index, "topic": name, "topic_id": tid, "partition": partition,
                    "offset": base + i if base is not None else
                    None if ex.api_key == ApiKey.PRODUCE else rec.offset,
                    "timestamp": append if append >= 0 else rec.timestamp,
                    "timestamp_type": 1 if append >= 0 else
                    -1 if batch.magic == 0 else batch.timestamp_type,
                    "key": None if rec.key is None else bytes(rec.key),
                    "value": None if rec.value is None else bytes(rec.value),
                    "headers": [{"key": h[0], "value": None if h[1] is None else bytes(h[1])}
                                for h in rec.headers],
                    "leader_epoch": getattr(batch, "partition_leader_epoch", -1),
                    "producer_id": getattr(batch, "producer_id", -1),
                    "producer_epoch": getattr(batch, "producer_epoch", -1),
                    "is_transactional": bool(batch.attributes & 0x10),
                    "error_code": error, "client": str(ex.client),
                    "correlation_id": ex.correlation_id,
                })
    return rows


def _rows(exchanges, **kw) -> list[dict]:
    got = pa.Table.from_batches(list(table.record_batches(exchanges, "f", **kw)),
                                schema=table.RECORD_SCHEMA)
    got = got.set_column(got.schema.get_field_index("timestamp"), "timestamp",
                         got["timestamp"].cast(pa.int64()))
    keys = _oracle_keys()
    return [{k: r[k] for k in keys} for r in got.to_pylist()]


def _oracle_keys() -> list[str]:
    return ["index", "topic", "topic_id", "partition", "offset", "timestamp", "timestamp_type",
            "key", "value", "headers", "leader_epoch", "producer_id", "producer_epoch",
            "is_transactional", "error_code", "client", "correlation_id"]


@pytest.mark.parametrize("name", ALL)
def test_records_are_what_the_record_reader_finds(name):
    exchanges, _ = decoded(name)
    want = _oracle(exchanges)
    assert _rows(exchanges) == want
    assert _rows(exchanges, batch_rows=1) == want  # an Arrow batch per exchange


def _damaged(ex):
    """A copy of a Fetch exchange whose first partition's batch claims 2^31-1 records."""
    topic = ex.response.responses[0]
    data = bytearray(topic.partitions[0].records)
    struct.pack_into(">i", data, 57, 0x7FFFFFFF)
    partitions = [topic.partitions[0].copy(records=bytes(data)), *topic.partitions[1:]]
    responses = [topic.copy(partitions=partitions), *ex.response.responses[1:]]
    ex = copy.copy(ex)
    ex.response = ex.response.copy(responses=responses)
    return ex


def test_a_partition_that_does_not_decode_leaves_the_others():
    def fetches(exchanges) -> list[int]:
        return [i for i, ex in enumerate(exchanges) if ex.api_key == ApiKey.FETCH
                and ex.response is not None and ex.response.responses
                and ex.response.responses[0].partitions[0].records]

    name = max(ALL, key=lambda n: len(fetches(decoded(n)[0])))
    exchanges = list(decoded(name)[0])
    fetches = fetches(exchanges)
    assert len(fetches) > 3
    for i in fetches[1::2]:
        exchanges[i] = _damaged(exchanges[i])
    want = _oracle(exchanges)
    assert {r["index"] for r in want} & set(fetches[::2])  # the intact ones have records
    assert not {r["index"] for r in want} & set(fetches[1::2])
    assert _rows(exchanges) == want


@pytest.mark.parametrize("name", ALL[:3])
def test_exchange_rows_are_the_json_lines(name):
    exchanges, _ = decoded(name)
    got = pa.Table.from_batches(list(table.exchange_batches(exchanges, "f", batch_rows=7)))
    assert got.schema == table.EXCHANGE_SCHEMA
    for i, (row, ex) in enumerate(zip(got.to_pylist(), exchanges)):
        doc = exchange_to_json(ex)
        assert (row["file"], row["index"]) == ("f", i)
        assert row["ts"].strftime("%Y-%m-%dT%H:%M:%S.%fZ") == doc["ts"]
        for k in ("request", "response", "unread", "fetch_session", "sasl"):
            assert row[k] == (None if doc.get(k) is None else json.dumps(doc[k], ensure_ascii=False))
        for k in ("client", "broker", "api_key", "api_name", "api_version", "correlation_id",
                  "client_id", "kind", "decoded_as", "latency_ms", "request_bytes",
                  "response_bytes", "errors", "problems", "notes"):
            assert row[k] == doc[k], k
    # a subset of columns: only those are computed
    schema = pa.schema([table.EXCHANGE_SCHEMA.field(n) for n in ("index", "api_name")])
    some = pa.Table.from_batches(list(table.exchange_batches(exchanges, "f", schema=schema)))
    assert some.to_pylist() == [{"index": i, "api_name": ex.api_name}
                                for i, ex in enumerate(exchanges)]


def test_a_time_before_year_1000_is_a_timestamp():
    exchanges, _ = decoded(ALL[0])
    ex = copy.copy(exchanges[0])
    ex.ts = -6e10  # 68 AD: the JSON line writes the year with two digits
    got = next(table.exchange_batches([ex], "f")).to_pylist()[0]["ts"]
    assert got.year == 68 and exchange_to_json(ex)["ts"].startswith("68-")
