"""Log directories written by Apache Kafka itself under scripted workloads, for the tests that
judge kproto's storage reader and ``dump-log`` by Kafka's own ``DumpLogSegments``.

One dedicated Apache Kafka node writes every kind of data a log dir holds (every codec,
idempotent and transactional batches with commits and aborts, a compacted topic after the
cleaner ran, DeleteRecords, segments rolled by size, ``__consumer_offsets``,
``__transaction_state``, a share group's ``__share_group_state``, the KRaft metadata log and a
snapshot). Its data dir is copied after
a clean shutdown (``clean``) and after kill -9 (``killed``), and what a consumer read from
each topic before the broker stopped is kept beside it.
"""
from __future__ import annotations

import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kproto.testing.apache import ApacheKafka, client_jars, java

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

#: Broker settings: the cleaner runs often and a metadata snapshot is taken after little data.
BROKER_CONFIG = {
    "auto.create.topics.enable": "false",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.compaction.lag.ms": "0",
    "metadata.log.max.record.bytes.between.snapshots": "4000",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "share.coordinator.state.topic.num.partitions": "1",
}

#: A compacted topic cleaned often. Tombstones are kept a day: the first pass of the cleaner
#: gives their batches a delete horizon, and no later pass changes the partition between what
#: a consumer reads and the copy of the log dir.
COMPACT_CONFIG = {"cleanup.policy": "compact", "segment.ms": "300",
                  "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "86400000",
                  "min.compaction.lag.ms": "0"}

SEGMENT_BYTES = 1024 * 1024      # Kafka's smallest segment.bytes


@dataclass
class KafkaLogDirs:
    """What the workload made: the copies of the data dir and what consumers read."""
    clean: Path                     #: log dir copied after a clean shutdown
    killed: Path                    #: log dir copied after kill -9 (more data appended first)
    topics: dict[str, str] = field(default_factory=dict)   #: role -> topic name
    #: (topic, isolation) -> [(partition, offset, key, value, headers, timestamp)] a consumer read
    consumed: dict[tuple[str, str], list[tuple]] = field(default_factory=dict)
    #: the records the share group accepted: [{"offset": o, "delivery": count}]
    shared: list[dict[str, int]] = field(default_factory=list)


def _producer(bootstrap: str, **conf: Any):
    import confluent_kafka
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **conf})


def _produce(p, topic: str, n: int, prefix: str, tombstone_every: int = 0,
             keys: int | None = None) -> None:
    for i in range(n):
        key = f"k{i % keys if keys else i}".encode()
        value = None if tombstone_every and i % tombstone_every == tombstone_every - 1 \
            else f"{prefix}-{i}-é\tx".encode()
        headers = [("h1", b"v1"), ("h2", None)] if i % 3 == 0 else None
        p.produce(topic, value, key, headers=headers)
    assert p.flush(30) == 0


def consume_all(bootstrap: str, topic: str, isolation: str) -> list[tuple]:
    """Every record of ``topic`` (1 partition) as a fresh consumer with ``isolation`` reads it."""
    import confluent_kafka
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": isolation, "enable.partition.eof": True})
    try:
        c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        rows: list[tuple] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                if m.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return rows
                raise RuntimeError(str(m.error()))
            rows.append((m.partition(), m.offset(), m.key(), m.value(),
                         [(k, v) for k, v in (m.headers() or [])], m.timestamp()[1]))
        raise TimeoutError(f"consuming {topic}")
    finally:
        c.close()


SHARED_RECORDS = 8
JAVA_DIR = Path(__file__).resolve().parent / "java"


def share_consume(bootstrap: str, group: str, topic: str, n: int) -> Callable[[], list[dict[str, int]]]:
    """Start ``java/KprotoShareConsumer.java`` (Kafka 4.4.0's Java client, run from its
    source): share group ``group`` accepts ``n`` records of ``topic``, the first released once
    first. The JVM runs while the caller goes on; the function returned waits for it and
    returns each accepted record's offset and delivery count."""
    import json
    import os
    import subprocess

    proc = subprocess.Popen([java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                             "-cp", os.pathsep.join(client_jars("4.4.0")),
                             str(JAVA_DIR / "KprotoShareConsumer.java"), bootstrap, group, topic,
                             str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def result() -> list[dict[str, int]]:
        try:
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, err[-3000:]
        return [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return result


def _cleaned(log_dir: Path, topic: str) -> bool:
    ckpt = log_dir / "cleaner-offset-checkpoint"
    return ckpt.is_file() and any(line.startswith(f"{topic} ") and int(line.split()[2]) > 0
                                  for line in ckpt.read_text().splitlines()[2:])


def build(root: Path) -> KafkaLogDirs:
    """Run the workloads on a new Apache Kafka node under ``root``; return the copies."""
    import confluent_kafka
    from confluent_kafka.admin import AdminClient

    kafka = ApacheKafka(root / "kafka", config=BROKER_CONFIG)
    kafka.start_all()
    out = KafkaLogDirs(clean=root / "clean", killed=root / "killed")
    try:
        b = kafka.bootstrap
        t = out.topics
        for codec in CODECS:
            t[f"codec-{codec}"] = name = f"codec-{codec}"
            kafka.create_topic(name, 1, 1)
            _produce(_producer(b, **{"compression.type": codec}), name, 30, codec)
        t["idempotent"] = "idem"
        kafka.create_topic("idem", 1, 1)
        _produce(_producer(b, **{"enable.idempotence": True, "compression.type": "lz4"}), "idem", 25, "i")
        # transactions: commit, abort, commit, with plain idempotent writes in between
        t["transactional"] = "txn"
        kafka.create_topic("txn", 1, 1)
        tp = _producer(b, **{"transactional.id": "tx-1"})
        tp.init_transactions(30)
        plain = _producer(b, **{"enable.idempotence": True})
        for outcome in ("commit", "abort", "commit", "abort"):
            tp.begin_transaction()
            _produce(tp, "txn", 4, f"tx-{outcome}")
            _produce(plain, "txn", 2, "plain")
            (tp.commit_transaction if outcome == "commit" else tp.abort_transaction)(30)
        # __share_group_state: a share group (Kafka 4.4 has share.version 2 finalized at
        # format) reads a topic with Kafka's Java share consumer, one record released once;
        # its JVM runs while the cleaner is awaited
        t["share"] = "shared"
        kafka.create_topic("shared", 1, 1)
        _produce(_producer(b), "shared", SHARED_RECORDS, "s")
        shared = share_consume(b, "share-group", "shared", SHARED_RECORDS)
        # a compacted topic with tombstones, after the cleaner has run
        t["compacted"] = "compact"
        kafka.create_topic("compact", 1, 1, configs=COMPACT_CONFIG)
        cp = _producer(b)
        for round_ in range(3):
            _produce(cp, "compact", 12, f"c{round_}", tombstone_every=4, keys=6)
            time.sleep(0.4)  # segment.ms: the next append rolls the segment
        kafka.wait_for(lambda: _cleaned(kafka.log_dir(1), "compact"), 60, "the cleaner",
                       interval=0.5)
        # DeleteRecords
        t["deleted"] = "deleted"
        kafka.create_topic("deleted", 1, 1)
        _produce(_producer(b), "deleted", 20, "d")
        admin = AdminClient({"bootstrap.servers": b})
        futures = admin.delete_records([confluent_kafka.TopicPartition("deleted", 0, 7)])
        for f in futures.values():
            f.result(30)
        # segments rolled by size
        t["rolled"] = "rolled"
        kafka.create_topic("rolled", 1, 1, configs={"segment.bytes": SEGMENT_BYTES,
                                                    "index.interval.bytes": 4096})
        rp = _producer(b, **{"batch.size": 65536})
        for i in range(260):
            rp.produce("rolled", b"x" * 5000, f"r{i}".encode())
        assert rp.flush(30) == 0
        # __consumer_offsets: a classic group's commit
        c = confluent_kafka.Consumer({"bootstrap.servers": b, "group.id": "classic-group",
                                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe(["codec-none"])
        deadline = time.monotonic() + 30
        while c.poll(0.5) is None and time.monotonic() < deadline:
            pass
        c.commit(offsets=[confluent_kafka.TopicPartition("codec-none", 0, 5)], asynchronous=False)
        c.close()
        out.shared = shared()
        for role, topic in t.items():
            if role != "rolled":
                for iso in ("read_uncommitted", "read_committed"):
                    out.consumed[(topic, iso)] = consume_all(b, topic, iso)
        meta = kafka.log_dir(1) / "__cluster_metadata-0"
        kafka.wait_for(lambda: any(not f.name.startswith("0" * 20) for f in meta.glob("*.checkpoint")),
                       30, "a metadata snapshot", interval=0.5)
        # the clients go before the broker does (they would log its absence until collected)
        del tp, plain, cp, rp, admin, c
        kafka.stop(1)
        shutil.copytree(kafka.log_dir(1), out.clean)
        # the same node, more appends, then kill -9: active segments, preallocated indexes
        kafka.start(1)
        _produce(_producer(b, **{"compression.type": "zstd"}), "codec-zstd", 10, "after")
        _produce(_producer(b, **{"enable.idempotence": True}), "idem", 10, "after")
        kafka.stop(1, abrupt=True)
        shutil.copytree(kafka.log_dir(1), out.killed)
    finally:
        kafka.close()
    return out


# -- Kafka's DumpLogSegments output, parsed ------------------------------------------------------
DUMP_LOG_SEGMENTS = "org.apache.kafka.tools.DumpLogSegments"
_PAIR = re.compile(r"(?:^| )(\w+): ")


def _pairs(text: str) -> dict[str, str]:
    """``name: value name: value ...`` (values without ``word: `` in them) as a dict."""
    parts = _PAIR.split(text)
    return dict(zip(parts[1::2], (v.strip() for v in parts[2::2])))


def run_dump(version: str, files: list[Path], *options: str) -> dict[str, list[str]]:
    """Kafka's DumpLogSegments over ``files`` (one JVM): each file's output lines, by path."""
    from kproto.testing import apache
    out = apache.run_tool(version, DUMP_LOG_SEGMENTS, *options,
                          "--files", ",".join(str(f) for f in files), timeout=180).stdout
    dumps: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in out.splitlines():
        if line.startswith("Dumping "):
            lines = dumps.setdefault(line[len("Dumping "):], [])
        else:
            lines.append(line)
    return dumps


def parse_batch_line(line: str) -> dict[str, Any]:
    """A ``baseOffset: ...`` line of Kafka's tool as the facts it states."""
    p = _pairs(line)
    ts_type = "LogAppendTime" if "LogAppendTime" in p else "CreateTime"
    dh = p["deleteHorizonMs"]
    return {"base_offset": int(p["baseOffset"]), "last_offset": int(p["lastOffset"]),
            "count": int(p["count"]), "base_sequence": int(p["baseSequence"]),
            "last_sequence": int(p["lastSequence"]), "producer_id": int(p["producerId"]),
            "producer_epoch": int(p["producerEpoch"]),
            "partition_leader_epoch": int(p["partitionLeaderEpoch"]),
            "is_transactional": p["isTransactional"] == "true", "is_control": p["isControl"] == "true",
            "delete_horizon_ms": None if dh == "OptionalLong.empty" else int(dh[len("OptionalLong["):-1]),
            "position": int(p["position"]), "timestamp_type": ts_type,
            "max_timestamp": int(p[ts_type]), "size_in_bytes": int(p["size"]),
            "magic": int(p["magic"]), "compression": p["compresscodec"], "crc": int(p["crc"]),
            "is_valid": p["isvalid"] == "true"}


def parse_record_line(line: str) -> dict[str, Any]:
    """A ``| offset: ...`` line of Kafka's tool: the record's facts; ``key``/``payload`` as the
    text Kafka printed (absent when null), the rest of a control or decoded record under
    ``tail``."""
    assert line.startswith("| "), line
    head, tail = line[2:], ""
    key = payload = None
    if " headerKeys: [" in head:
        head, rest = head.split(" headerKeys: [", 1)
        header_keys, rest = rest.split("]", 1)
        rest = rest[1:]
        if rest.startswith("key: "):
            rest = rest[len("key: "):]
            key, sep, after = rest.partition(" payload: ")
            payload = after if sep else None
        elif rest.startswith("payload: "):
            payload = rest[len("payload: "):]
        else:
            tail = rest
    p = _pairs(head)
    ts_type = "LogAppendTime" if "LogAppendTime" in p else "CreateTime"
    return {"offset": int(p["offset"]), "timestamp": int(p[ts_type]),
            "key_size": int(p["keySize"]), "value_size": int(p["valueSize"]),
            "sequence": int(p["sequence"]),
            "header_keys": [k for k in header_keys.split(",") if k] if header_keys else [],
            "key": key, "payload": payload, "tail": tail}


def parse_log_dump(lines: list[str]) -> tuple[int | None, list[dict[str, Any]]]:
    """Kafka's dump of a segment (or KRaft snapshot): its ``Log starting offset`` (``Snapshot
    end offset``) and its batches, each with its records under ``records``."""
    start, batches = None, []
    for line in lines:
        if line.startswith("Log starting offset: "):
            start = int(line.split(": ")[1])
        elif line.startswith("Snapshot end offset: "):
            start = int(line[len("Snapshot end offset: "):].split(",")[0])
        elif line.startswith("baseOffset: "):
            batches.append({**parse_batch_line(line), "records": []})
        elif line.startswith("| offset: "):
            batches[-1]["records"].append(parse_record_line(line))
        elif line.strip():
            raise AssertionError(f"a line of DumpLogSegments this parser does not know: {line!r}")
    return start, batches


def run_dump_bytes(version: str, files: list[Path], *options: str) -> bytes:
    """Kafka's DumpLogSegments output over ``files`` as the bytes it wrote (no newline
    translation: values may hold carriage returns)."""
    from kproto.testing import apache
    return apache.run_tool(version, DUMP_LOG_SEGMENTS, *options, "--files",
                           ",".join(str(f) for f in files), timeout=180, binary=True).stdout


DUMPED_SUFFIXES = ("log", "checkpoint", "index", "timeindex", "txnindex", "snapshot")


def dumped_files(root: Path) -> list[Path]:
    """The files of ``root``'s partition folders that Kafka's tool dumps, by kind."""
    return [f for ext in DUMPED_SUFFIXES for f in sorted(root.glob(f"*-*/*.{ext}"))]


def assert_format_kafka_is_kafkas(version: str, files: list[Path]) -> bytes:
    """``kproto dump-log --format kafka FILES`` prints byte for byte what Kafka's
    ``DumpLogSegments --deep-iteration --print-data-log`` prints for them; what Kafka's tool
    wrote on stderr (notices such as the offset gaps of a compacted segment)."""
    import subprocess
    import sys

    from kproto.testing import apache
    kafka = apache.run_tool(version, DUMP_LOG_SEGMENTS, "--deep-iteration", "--print-data-log",
                            "--files", ",".join(str(f) for f in files), timeout=180, check=False,
                            binary=True)
    assert kafka.returncode == 0, kafka.stderr.decode(errors="replace")[-3000:]
    ours = subprocess.run([sys.executable, "-m", "kproto", "dump-log", "--format", "kafka",
                           *map(str, files)], capture_output=True, check=True, timeout=120).stdout
    theirs = kafka.stdout
    assert theirs.count(b"\nDumping ") + 1 == len(files)
    if ours != theirs:
        a, b = ours.split(b"\n"), theirs.split(b"\n")
        first = next(i for i, (x, y) in enumerate(zip(a + [b""], b + [b""])) if x != y)
        raise AssertionError(f"line {first}:\n kproto {a[first][:300]!r}\n Kafka  {b[first][:300]!r}")
    return kafka.stderr


def run_index_sanity_check(version: str, files: list[Path]) -> dict[str, str]:
    """Kafka's ``DumpLogSegments --index-sanity-check`` verdict on each of ``files`` (one JVM):
    the line it printed after ``Dumping PATH`` (``PATH passed sanity check.``, ``PATH is
    empty.``) or ``CorruptIndexException: MESSAGE`` where the check failed (the tool itself
    stops at the first such file)."""
    from kproto.testing import apache
    out = apache.run_tool(version, str(JAVA_DIR / "KprotoIndexSanity.java"), *map(str, files),
                          timeout=180).stdout
    verdicts: dict[str, str] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("Dumping "):
            current = line[len("Dumping "):]
        elif line.strip():
            assert current is not None and current not in verdicts, line
            verdicts[current] = line
    return verdicts
