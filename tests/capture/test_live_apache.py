"""Today's clients against Apache Kafka 4.4.0 over SASL_PLAINTEXT (SCRAM), captured with tcpdump
on loopback and read back with :mod:`kproto.capture`: no problems (but requests in flight when
a client closed its connection), every topic id named, every acknowledged record found in the
Produce requests (value by value, in batches of the client's codec) and in the Fetch (or
ShareFetch) responses, the SASL handshakes and SCRAM exchanges decoded. tshark's reading of
each capture is printed beside kproto's, exchange by exchange: every request and response
tshark reads is one of kproto's exchanges (its malformed PDUs and notes are information: its
dissector stops at older versions than Kafka 4.4 speaks). ``KPROTO_KEEP_LIVE_CAPTURES=DIR``
keeps the captures with their truth files (how tests/capture/data/live_apache was recorded).

The module runs on the session's shared ``apache_kafka_cluster`` (3 brokers and a controller;
the other cluster tests' clients use its PLAINTEXT listener, these its SASL_PLAINTEXT one), and
captures the SASL ports of all three brokers: partitions and group coordinators spread over
them. Each client has a topic and a capture of its own: confluent-kafka (librdkafka: gzip, a
transaction, a KIP-848 group, admin), kafka-python (lz4, a classic group), aiokafka (snappy, a
classic group), the Java 4.4 client (zstd, a transaction, a KIP-848 group, admin; and lz4 with
a share group, KIP-932), kproto's client (no compression, admin, a classic group); kcat
(Debian's, an older librdkafka) is refused at SCRAM's last step, as Kafka 4 refuses every
librdkafka before 2.6.1, and its capture shows why.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import live_capture
from capture_live_checks import check_capture, check_scram_refused, check_tshark, decode, ground_truth
from kproto.capture.table import record_batches
from kproto.testing import APACHE_CLUSTER_SCRAM_USERS, apache

((USER, PASSWORD),) = APACHE_CLUSTER_SCRAM_USERS.items()
KEEP = os.environ.get("KPROTO_KEEP_LIVE_CAPTURES")  # a folder: keep the captures and their truth


@pytest.fixture(autouse=True)
def _tcpdump():
    live_capture.require()   # before any Kafka node is started for nothing


@pytest.fixture
def kafka(apache_kafka_cluster):
    assert len(apache_kafka_cluster.broker_ids) == 3
    return apache_kafka_cluster


def _value(client, i):
    # compressible: librdkafka and kafka-python send a batch uncompressed when compressing
    # would not make it smaller, and the capture is to show each codec
    return f"{client}-{i} " + "compressible " * 12


def _ports(kafka):
    return [kafka.nodes[b].sasl_port for b in kafka.broker_ids]


def _known_everywhere(kafka, topic, partitions):
    """Wait (through the PLAINTEXT listener, outside the capture) until every broker knows the
    topic a client just created: a broker learns it from the metadata log a moment after the
    controller answered CreateTopics, and a client asking it before is told it does not exist."""
    kafka.wait_for(lambda: all(kafka.leader(topic, p, b) is not None for b in kafka.broker_ids
                               for p in range(partitions)), 30, f"{topic} on every broker")


def _check(kafka, path, name, client, acked, consumed, **expect):
    exchanges = check_capture(path, _ports(kafka), acked, consumed, **expect)
    check_tshark(path, _ports(kafka), exchanges)
    if KEEP:
        os.makedirs(KEEP, exist_ok=True)
        shutil.copy(path, Path(KEEP) / f"{name}.pcap")
        truth = ground_truth(name, exchanges, _ports(kafka), acked, client)
        (Path(KEEP) / f"{name}.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    return exchanges


def _confluent_conf(kafka, mechanism, **extra):
    return {"bootstrap.servers": kafka.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": USER, "sasl.password": PASSWORD, **extra}


def test_confluent_kafka(kafka, tmp_path):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    topic, acked, consumed = "live-ck", [], []
    with live_capture.tcpdump(tmp_path / "ck.pcap", _ports(kafka)) as path:
        admin = AdminClient(_confluent_conf(kafka, "SCRAM-SHA-512", **{"client.id": "ck-admin"}))
        admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(60)
        _known_everywhere(kafka, topic, 3)
        admin.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)].result(20)
        admin.list_topics(topic, timeout=10)

        def ack(err, msg):
            assert err is None, err
            acked.append((msg.topic(), msg.partition(), msg.offset(), msg.value().decode()))

        producer = confluent_kafka.Producer(_confluent_conf(
            kafka, "SCRAM-SHA-512", **{"client.id": "ck-producer", "compression.type": "gzip",
                                       "linger.ms": 5, "acks": "all"}))
        for i in range(9):
            producer.produce(topic, _value("ck", i).encode(), key=f"k{i}".encode(), on_delivery=ack)
        assert producer.flush(60) == 0

        txn = confluent_kafka.Producer(_confluent_conf(
            kafka, "SCRAM-SHA-512", **{"client.id": "ck-txn", "transactional.id": "ck-live-txn",
                                       "compression.type": "gzip"}))
        txn.init_transactions(60)
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, _value("ck-txn", i).encode(), partition=i, on_delivery=ack)
        txn.commit_transaction(60)

        consumer = confluent_kafka.Consumer(_confluent_conf(
            kafka, "SCRAM-SHA-256", **{"client.id": "ck-consumer", "group.id": "ck-live-848",
                                       "group.protocol": "consumer", "auto.offset.reset": "earliest",
                                       "enable.auto.commit": False, "isolation.level": "read_committed"}))
        consumer.subscribe([topic])
        for _ in range(150):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                consumed.append(msg.value().decode())
            if len(consumed) >= len(acked):
                break
        consumer.commit(asynchronous=False)
        consumer.close()
        del admin, producer, txn   # no client left reconnecting once the module's Kafka stops
    assert sorted(consumed) == sorted(v for *_, v in acked)
    _check(kafka, path, "confluent_kafka",
           f"confluent-kafka {confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})", acked, consumed,
           apis={"SaslHandshake", "SaslAuthenticate", "CreateTopics", "DescribeConfigs", "Produce",
                 "InitProducerId", "AddPartitionsToTxn", "EndTxn", "ConsumerGroupHeartbeat",
                 "OffsetCommit", "Fetch"},
           mechanisms={"SCRAM-SHA-256", "SCRAM-SHA-512"}, codecs={"gzip"})


def test_kafka_python(kafka, tmp_path):
    kafka_python = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient, NewTopic

    conf = dict(bootstrap_servers=kafka.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER, sasl_plain_password=PASSWORD)
    topic, acked, consumed = "live-kafka-python", [], []
    with live_capture.tcpdump(tmp_path / "kp.pcap", _ports(kafka)) as path:
        admin = KafkaAdminClient(client_id="kp-admin", **conf)
        admin.create_topics([NewTopic(topic, 2, 1)])
        admin.close()
        producer = kafka_python.KafkaProducer(client_id="kp-producer", compression_type="lz4",
                                              acks="all", linger_ms=5, **conf)
        futures = [(producer.send(topic, _value("kp", i).encode(), key=f"k{i}".encode()), _value("kp", i))
                   for i in range(8)]
        producer.flush(20)
        for future, value in futures:
            md = future.get(20)
            acked.append((md.topic, md.partition, md.offset, value))
        producer.close()
        consumer = kafka_python.KafkaConsumer(topic, client_id="kp-consumer", group_id="kp-live-classic",
                                              auto_offset_reset="earliest", enable_auto_commit=False,
                                              **conf)
        for _ in range(60):
            for records in consumer.poll(500).values():
                consumed += [r.value.decode() for r in records]
            if len(consumed) >= len(acked):
                break
        consumer.commit()
        consumer.close()
    assert sorted(consumed) == sorted(v for *_, v in acked)
    _check(kafka, path, "kafka_python", f"kafka-python {kafka_python.__version__}", acked, consumed,
           apis={"SaslHandshake", "SaslAuthenticate", "CreateTopics", "Produce", "JoinGroup",
                 "SyncGroup", "OffsetCommit", "Fetch"}, mechanisms={"SCRAM-SHA-256"}, codecs={"lz4"})


def test_aiokafka(kafka, tmp_path):
    aiokafka = pytest.importorskip("aiokafka")
    conf = dict(bootstrap_servers=kafka.sasl_bootstrap, security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=USER, sasl_plain_password=PASSWORD)
    topic, acked, consumed = "live-aiokafka", [], []

    async def run():
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        admin = AIOKafkaAdminClient(client_id="aio-admin", **conf)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 2, 1)])
        await admin.close()
        producer = aiokafka.AIOKafkaProducer(client_id="aio-producer", compression_type="snappy",
                                             linger_ms=5, acks="all", **conf)
        await producer.start()
        try:
            futures = [(await producer.send(topic, _value("aio", i).encode(), key=f"k{i}".encode()),
                        _value("aio", i))
                       for i in range(8)]
            for future, value in futures:
                md = await future
                acked.append((md.topic, md.partition, md.offset, value))
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, client_id="aio-consumer", group_id="aio-live-classic",
                                             auto_offset_reset="earliest", enable_auto_commit=False, **conf)
        await consumer.start()
        try:
            for _ in range(60):
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    consumed.extend(r.value.decode() for r in records)
                if len(consumed) >= len(acked):
                    break
            await consumer.commit()
        finally:
            await consumer.stop()

    with live_capture.tcpdump(tmp_path / "aio.pcap", _ports(kafka)) as path:
        asyncio.run(run())
    assert sorted(consumed) == sorted(v for *_, v in acked)
    _check(kafka, path, "aiokafka", f"aiokafka {aiokafka.__version__}", acked, consumed,
           apis={"SaslHandshake", "SaslAuthenticate", "CreateTopics", "Produce", "JoinGroup",
                 "SyncGroup", "OffsetCommit", "Fetch"}, mechanisms={"SCRAM-SHA-512"}, codecs={"snappy"})


def test_kproto_client(kafka, tmp_path):
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.consumer import Consumer
    from kproto.client.producer import Producer
    from kproto.client.protocol import SaslConfig

    topic, acked, consumed = "live-kproto", [], []

    async def run():
        sasl = SaslConfig("SCRAM-SHA-256", USER, PASSWORD)
        async with Cluster(kafka.sasl_bootstrap, sasl=sasl, client_id="kproto-live") as cluster:
            admin = Admin(cluster)
            await admin.create_topics({topic: 2})
            await asyncio.to_thread(_known_everywhere, kafka, topic, 2)
            await admin.describe_topics([topic])
            async with Producer(cluster) as producer:
                futures = [(await producer.send(topic, _value("kproto", i).encode(), key=f"k{i}".encode()),
                            _value("kproto", i)) for i in range(8)]
                for future, value in futures:
                    md = await future
                    acked.append((md.topic, md.partition, md.offset, value))
            async with Consumer(cluster, [topic], group_id="kproto-live-classic",
                                enable_auto_commit=False) as consumer:
                for _ in range(60):
                    consumed.extend(r.value.decode() for r in await consumer.getmany(timeout=0.5))
                    if len(consumed) >= len(acked):
                        break
                await consumer.commit()
            await admin.list_group_offsets("kproto-live-classic")

    with live_capture.tcpdump(tmp_path / "kproto.pcap", _ports(kafka)) as path:
        asyncio.run(run())
    assert sorted(consumed) == sorted(v for *_, v in acked)
    _check(kafka, path, "kproto_client", "kproto's asyncio client", acked, consumed,
           apis={"SaslHandshake", "SaslAuthenticate", "CreateTopics", "Produce", "JoinGroup",
                 "SyncGroup", "OffsetCommit", "OffsetFetch", "Fetch"}, mechanisms={"SCRAM-SHA-256"},
           codecs={"none"})


def _java_classpath(workdir: Path, program: str = "LiveTraffic") -> str:
    version = "4.4.0"
    found = {os.path.basename(j)[:-len(".jar")]: j for j in apache.client_jars(version)}
    jars = [found[n] for n in ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")
            if n in found]
    javac = shutil.which("javac")
    if javac is None or len(jars) < 5:
        pytest.skip("Java 17 and the kafka-clients 4.4.0 jars (tools/setup.sh) are needed")
    source = Path(__file__).with_name("java") / f"{program}.java"
    proc = subprocess.run([javac, "-nowarn", "-cp", jars[0], "-d", str(workdir), str(source)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return os.pathsep.join([str(workdir), *jars])


def test_java_client(kafka, tmp_path):
    cp = _java_classpath(tmp_path)
    topic = "live-java"
    cmd = [shutil.which("java") or "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-cp", cp, "LiveTraffic", kafka.sasl_bootstrap, "SCRAM-SHA-512", USER, PASSWORD, topic,
           "java-live-848"]
    with live_capture.tcpdump(tmp_path / "java.pcap", _ports(kafka)) as path:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    acked = [(x["topic"], x["partition"], x["offset"], x["value"]) for x in lines if "value" in x]
    assert [x["done"] for x in lines if "done" in x] == [len(acked)] and len(acked) == 9
    _check(kafka, path, "java_client", "Apache Kafka's Java client 4.4.0 (kafka-clients)", acked, None,
           apis={"SaslHandshake", "SaslAuthenticate", "CreateTopics", "DescribeConfigs", "Produce",
                 "InitProducerId", "EndTxn", "ConsumerGroupHeartbeat", "OffsetCommit",
                 "OffsetFetch", "ConsumerGroupDescribe", "Fetch"}, mechanisms={"SCRAM-SHA-512"},
           codecs={"zstd"})


def test_java_share_consumer(kafka, tmp_path):
    """A share group (KIP-932): the Java client's KafkaShareConsumer acknowledges each record;
    its ShareGroupHeartbeat, ShareFetch and ShareAcknowledge exchanges decode, and every record
    produced is in a ShareFetch response, as the capture's record table has it too."""
    cp = _java_classpath(tmp_path, "ShareTraffic")
    topic = "live-java-share"
    cmd = [shutil.which("java") or "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-cp", cp, "ShareTraffic", kafka.sasl_bootstrap, "SCRAM-SHA-256", USER, PASSWORD, topic,
           "java-live-share"]
    with live_capture.tcpdump(tmp_path / "share.pcap", _ports(kafka)) as path:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    acked = [(x["topic"], x["partition"], x["offset"], x["value"]) for x in lines if "value" in x]
    consumed = [x["consumed"] for x in lines if "consumed" in x]
    assert [x["done"] for x in lines if "done" in x] == [len(acked)] and len(acked) == 6
    exchanges = _check(kafka, path, "java_share", "Apache Kafka's Java client 4.4.0 (KafkaShareConsumer)",
                       acked, consumed,
                       apis={"SaslHandshake", "SaslAuthenticate", "CreateTopics", "IncrementalAlterConfigs",
                             "Produce", "ShareGroupHeartbeat", "ShareFetch", "ShareAcknowledge",
                             "ShareGroupDescribe", "DescribeShareGroupOffsets"},
                       mechanisms={"SCRAM-SHA-256"}, codecs={"lz4"})
    share_fetches = [e for e in exchanges if e.api_name == "ShareFetch"]
    rows = {(r["topic"], r["partition"], r["offset"], r["value"].decode())
            for b in record_batches(share_fetches, str(path)) for r in b.to_pylist()}
    assert set(acked) <= rows, sorted(set(acked) - rows)


def _librdkafka_of_kcat() -> tuple[int, ...]:
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=30).stdout
    return tuple(int(x) for x in version.split("librdkafka ")[1].split()[0].split(".")[:3])


def test_kcat(kafka, tmp_path):
    """Debian's kcat links librdkafka 2.0.2, which repeats the client's nonce in SCRAM's
    client-final message (fixed in librdkafka 2.6.1); Kafka 4 compares the nonce strictly
    (RFC 5802) and refuses it. The capture shows it: every exchange decoded, the second
    SaslAuthenticate answered SASL_AUTHENTICATION_FAILED, its nonce the client's followed by
    the server's (which begins with the client's)."""
    live_capture.require("kcat")
    librdkafka = _librdkafka_of_kcat()
    if librdkafka >= (2, 6, 1):
        pytest.skip(f"kcat's librdkafka {librdkafka} authenticates with SCRAM: nothing refused to capture")
    conf = ["-b", kafka.sasl_bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", f"sasl.username={USER}",
            "-X", f"sasl.password={PASSWORD}", "-X", "client.id=kcat-live"]
    with live_capture.tcpdump(tmp_path / "kcat.pcap", _ports(kafka)) as path:
        metadata = subprocess.run(["kcat", *conf, "-L", "-m", "2"], capture_output=True, text=True, timeout=60)
    assert metadata.returncode != 0 and "invalid credentials" in metadata.stderr, metadata.stderr
    check_tshark(path, _ports(kafka), check_scram_refused(path, _ports(kafka), USER))
    if KEEP:
        shutil.copy(path, Path(KEEP) / "kcat_scram_refused.pcap")
        exchanges, _ = decode(path, _ports(kafka))
        truth = ground_truth("kcat_scram_refused", exchanges, _ports(kafka), [],
                             f"kcat 1.7.1 (Debian; librdkafka {'.'.join(map(str, librdkafka))})")
        truth["scram_refused"] = True
        (Path(KEEP) / "kcat_scram_refused.truth.json").write_text(json.dumps(truth, indent=1) + "\n")
