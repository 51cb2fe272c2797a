"""The data directory kproto's broker leaves after real clients wrote to it (the Java client:
every codec and acks, idempotent and transactional, admin DeleteRecords, classic and KIP-848
groups committing; confluent-kafka: every codec and acks) is read by ``kproto.storage.read_arrow`` (while the broker runs, and after a
clean stop), ``kproto logdir`` and the Spark source, with exactly the records the clients
produced and acknowledged: same topic, partition, offset, key and value (acks=0 records, which
get no offset back, by everything but the offset), each written with its producer's codec.
The records below j-admin-2's log start offset (DeleteRecords) are left out by the readers
themselves, and read back with ``include_deleted`` / ``includeDeleted``."""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections import Counter

import pytest

import kproto.storage as ks
from kproto.cli.main import main as cli_main
from kproto.records import iter_batches
from kproto.schemas.api_keys import ApiKey
from kproto.storage.checkpoints import OffsetCheckpoint
from kproto.testing import TEST_DEFAULTS, BrokerThread

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "broker"))
import java_interop as jv  # noqa: E402

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
ACKS = ["0", "1", "all"]
TOPICS = ["j-codecs", "j-txn", "j-admin", "j-group", "j-group848", "ck-codecs"]


@pytest.fixture(scope="session")
def java_cp(tmp_path_factory):
    return jv.classpath(str(tmp_path_factory.mktemp("java")))


def confluent_produce(bootstrap):
    """confluent-kafka (librdkafka) into ck-codecs: every codec and acks; what it acknowledged."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})   # kept: its futures need the handle
    futures = admin.create_topics([NewTopic("ck-codecs", 3, 1)], request_timeout=15)
    futures["ck-codecs"].result(15)
    acked = []
    for codec in CODECS:
        for acks in ACKS:
            reports = []
            producer = ck.Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                                    "acks": acks, "enable.idempotence": acks == "all",
                                    "linger.ms": 5, "message.timeout.ms": 15000})
            for i in range(30):
                key = f"ck/{codec}/{acks}/{i}"
                producer.produce("ck-codecs", (f"value {key} " * (1 + i % 5)).encode(), key.encode(),
                                 partition=i % 3, on_delivery=lambda err, msg: reports.append((err, msg)))
            assert producer.flush(20) == 0
            assert len(reports) == 30 and all(err is None for err, _ in reports), reports[:3]
            for _, msg in reports:
                offset = msg.offset() if acks != "0" else -1   # acks=0: nothing comes back
                assert (offset >= 0) == (acks != "0"), (codec, acks, msg.offset())
                acked.append({"topic": msg.topic(), "partition": msg.partition(), "offset": offset,
                              "key": msg.key().decode(), "value": msg.value().decode(), "codec": codec})
    return acked


class WireCodecs:
    """Each produced record's codec as the broker received it (librdkafka sends a batch that
    would not shrink uncompressed): what the directory must keep, batch by batch."""

    def __init__(self, broker):
        self.codec: dict[str, str] = {}
        broker.control(ApiKey.PRODUCE, self._produce, times=None)

    def _produce(self, header, body):
        for t in body.topic_data:
            for p in t.partition_data:
                for b in iter_batches(bytes(p.records)):
                    for r in b.records():
                        self.codec[r.key.decode()] = b.compression_name
        return None


def rows_of(table):
    cols = ["topic", "partition", "offset", "key", "value", "compression", "is_control"]
    return [dict(zip(cols, r)) for r in zip(*(table.column(c).to_pylist() for c in cols))]


def check_rows(rows, expected, what):
    """``rows`` (dicts with bytes keys and values) hold exactly ``expected`` (acked records: the
    offset compared unless it is -1)."""
    rows = [r for r in rows if r["topic"] in TOPICS and not r["is_control"]]
    where = Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
    assert where.most_common(1)[0][1] == 1, f"{what}: an offset read twice"
    got = {r["key"].decode(): r for r in rows}
    assert len(got) == len(rows), f"{what}: a key read twice"
    want = {e["key"]: e for e in expected}
    assert sorted(got) == sorted(want), f"{what}: {len(set(got) - set(want))} records too many, " \
        f"{len(set(want) - set(got))} missing"
    for key, e in want.items():
        r = got[key]
        assert (r["topic"], r["partition"], r["value"].decode()) == (e["topic"], e["partition"], e["value"]), key
        if e["offset"] >= 0:
            assert r["offset"] == e["offset"], (what, key)
        assert r["compression"] == e["wire_codec"], (what, key)


@pytest.fixture
def kafka_broker(tmp_path):
    """kproto.testing's broker; KIP-848 members reconcile at each heartbeat (500 ms here, not 5 s)."""
    with BrokerThread(tmp_path / "kafka", **TEST_DEFAULTS) as broker:
        yield broker


def test_broker_log_directory_reads_back_with_storage_logdir_and_spark(kafka_broker, java_cp, spark):
    data = kafka_broker.data_dir
    wire = WireCodecs(kafka_broker)
    events = jv.run(java_cp, kafka_broker.bootstrap, "admin", "produce", "group", "group848", "txn")
    java = [e for e in events if e["event"] == "acked"]
    (deleted,) = jv.of(events, "admin", "delete-records")
    start = {("j-admin", 2): deleted["low_watermark"]}
    assert start == {("j-admin", 2): 4}
    ck_acked = confluent_produce(kafka_broker.bootstrap)
    every_acked = java + ck_acked
    everything = [e for e in every_acked if (e["topic"], e["partition"]) not in start
                  or e["offset"] >= start[(e["topic"], e["partition"])]]
    deleted = [e for e in every_acked if (e["topic"], e["partition"]) in start
               and e["offset"] < start[(e["topic"], e["partition"])]]
    assert sorted(e["offset"] for e in deleted) == [0, 1, 2, 3]
    committed = [e for e in everything if e.get("outcome") != "abort"]
    for e in every_acked:
        e["wire_codec"] = wire.codec[e["key"]]
        if "codec" in e:   # the producer's setting, or none for a batch it left uncompressed
            assert e["wire_codec"] in (e["codec"], "none"), e
    for codec in CODECS:
        assert sum(e["wire_codec"] == codec for e in everything if e.get("codec") == codec) >= 170, codec
    assert len(everything) == 450 + 30 + 6 + 2 * 280 + 450 and len(committed) == len(everything) - 10

    # while the broker runs (clients done, their data acknowledged)
    # the readers leave out what DeleteRecords removed (log-start-offset-checkpoint) themselves
    check_rows(rows_of(ks.read_arrow(data, topics=TOPICS)), everything, "live read_arrow")

    kafka_broker.stop()
    check_rows(rows_of(ks.read_arrow(data, topics=TOPICS)), everything, "read_arrow")
    check_rows(rows_of(ks.read_arrow(data, topics=TOPICS, isolation="read_committed")), committed,
               "read_arrow read_committed")
    # still on disk in the first segment, and there for the asking
    check_rows(rows_of(ks.read_arrow(data, topics=TOPICS, include_deleted=True)), every_acked,
               "read_arrow include_deleted")
    with open(os.path.join(data, "log-start-offset-checkpoint"), "rb") as f:
        log_start = {(t, p): o for t, p, o in OffsetCheckpoint.parse(f.read()).entries}
    assert log_start[("j-admin", 2)] == 4   # DeleteRecords reached the checkpoint

    # the coordinators' state, as read_internal decodes it: the last commit of every partition
    # is what the Java consumers committed, the transaction ended committed, both group types
    internal = ks.read_internal(data)
    last = {}
    for row in internal["OffsetCommit"].to_pylist():
        k = row["key"]
        last[(k["group"], k["topic"], k["partition"])] = row["value"]["offset"] if row["value"] else None
    want = {("j-txn-group", "j-txn", 0): 20}
    for phase in ("group", "group848"):
        (committed_event,) = jv.of(events, phase, "committed")
        want.update({(f"j-{phase}", f"j-{phase}", int(p)): o for p, o in committed_event["offsets"].items()})
    assert last == want
    txn_states = [r["value"]["transaction_status"] for r in internal["TransactionLog"].to_pylist()
                  if r["key"]["transactional_id"] == "j-txn-producer"]
    assert txn_states[-1] == 4   # CompleteCommit
    assert {r["key"]["group"] for r in internal["GroupMetadata"].to_pylist()} == {"j-group"}
    assert {r["key"]["group_id"] for r in internal["ConsumerGroupMetadata"].to_pylist()} == {"j-group848"}

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(["logdir", data, "--format", "json", "--no-segments"])
    assert code == 0, out.getvalue()[-2000:]      # no damage
    doc = json.loads(out.getvalue())
    assert doc["problems"] == [] and doc["clean_shutdown"]
    parts = {(p["topic"], p["partition"]): p for p in doc["partitions"]}
    for topic in ("j-codecs", "ck-codecs"):
        for p in range(3):
            assert parts[(topic, p)]["offsets"] == [0, 150] and parts[(topic, p)]["damage"] == []
    assert parts[("j-txn", 0)]["offsets"] == [0, 33] and parts[("j-txn", 0)]["aborted_transactions"] == 1
    assert parts[("j-admin", 2)]["offsets"] == [0, 10] and parts[("j-admin", 2)]["log_start_offset"] == 4
    assert parts[("j-codecs", 0)]["log_start_offset"] == 0

    for isolation, deleted_too, want in (("read_uncommitted", False, everything),
                                         ("read_committed", False, committed),
                                         ("read_uncommitted", True, every_acked)):
        df = (spark.read.format("kafka-segments").option("isolation", isolation)
              .option("includeDeleted", str(deleted_too).lower())
              .option("topics", ",".join(TOPICS)).load(data))
        rows = [r.asDict() for r in df.select("topic", "partition", "offset", "key", "value",
                                              "compression", "is_control").collect()]
        for r in rows:
            r["key"], r["value"] = bytes(r["key"]), bytes(r["value"])
        check_rows(rows, want, f"spark {isolation}{' includeDeleted' if deleted_too else ''}")
