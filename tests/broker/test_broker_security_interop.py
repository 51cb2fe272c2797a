"""Security with real clients on 127.0.0.1: confluent-kafka (librdkafka) over SASL_PLAINTEXT
(PLAIN, SCRAM-SHA-512), SSL and SASL_SSL; a user without rights gets the authorization errors
until kproto's Admin grants them with create_acls; kproto's own client with SASL PLAIN and
SCRAM over TCP and TLS. The TLS certificate is self-signed for 127.0.0.1, made with the
``cryptography`` package."""
from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl

import pytest

from kproto.testing import BrokerThread

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
x509 = pytest.importorskip("cryptography.x509")

USERS = {"admin": "admin-pw", "alice": "alice-pw"}
SASL = dict(sasl_enabled_mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), sasl_users=USERS,
            group_initial_rebalance_delay_ms=0)


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """(cert.pem, key.pem) of a self-signed certificate for 127.0.0.1."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kproto test broker")])
    now = datetime.datetime.now(datetime.timezone.utc)
    crt = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
           .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
           .not_valid_after(now + datetime.timedelta(days=1))
           .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                       x509.DNSName("localhost")]), critical=False)
           .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
           .sign(key, hashes.SHA256()))
    d = tmp_path_factory.mktemp("tls")
    (d / "cert.pem").write_bytes(crt.public_bytes(serialization.Encoding.PEM))
    (d / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                  serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return str(d / "cert.pem"), str(d / "key.pem")


def server_context(cert):
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*cert)
    return ctx


@pytest.fixture
def start(tmp_path):
    brokers = []

    def run(**config):
        b = BrokerThread(tmp_path / f"kafka{len(brokers)}", **config).start()
        brokers.append(b)
        return b
    yield run
    for b in brokers:
        b.stop()


def ck_conf(broker, protocol, mechanism=None, user=None, cert=None, **extra):
    conf = {"bootstrap.servers": broker.bootstrap, "security.protocol": protocol}
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": USERS[user]})
    if cert:
        conf["ssl.ca.location"] = cert[0]
    conf.update(extra)
    return conf


def roundtrip(conf, topic, n=20, group=None):
    """Produce ``n`` records with acks=all (idempotent) and read them back in a group."""
    p = ck.Producer({**conf, "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for i in range(n):
        p.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(20) == 0 and not errors, errors
    c = ck.Consumer({**conf, "group.id": group or f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = []
    try:
        deadline = 200
        while len(got) < n and deadline:
            m = c.poll(0.1)
            deadline -= 1
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got == [b"v%d" % i for i in range(n)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_confluent_kafka_sasl_plaintext(start, mechanism):
    broker = start(**SASL)
    roundtrip(ck_conf(broker, "SASL_PLAINTEXT", mechanism, "alice"), f"t-{mechanism.lower()}")


def test_confluent_kafka_wrong_password_is_refused(start):
    broker = start(**SASL)
    errors = []
    conf = ck_conf(broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice")
    conf["sasl.password"] = "wrong"
    p = ck.Producer({**conf, "error_cb": errors.append})
    p.produce("t", b"x")
    for _ in range(50):
        p.poll(0.1)
        if errors:
            break
    assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()


def test_confluent_kafka_ssl_and_sasl_ssl(start, cert):
    broker = start(ssl_context=server_context(cert), group_initial_rebalance_delay_ms=0)
    assert broker.broker.security_protocol == "SSL"
    roundtrip(ck_conf(broker, "SSL", cert=cert), "tls")
    broker = start(ssl_context=server_context(cert), **SASL)
    assert broker.broker.security_protocol == "SASL_SSL"
    roundtrip(ck_conf(broker, "SASL_SSL", "SCRAM-SHA-256", "alice", cert=cert), "sasl-tls")


def test_acls_refuse_then_kproto_admin_grants(start):
    from kproto.client.admin import Acl, AclFilter, Admin
    from kproto.client.cluster import Cluster
    from kproto.client.protocol import SaslConfig

    broker = start(authorizer=True, super_users=("User:admin",), **SASL)
    admin_conf = ck_conf(broker, "SASL_PLAINTEXT", "PLAIN", "admin")
    alice = ck_conf(broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", "alice")
    ca = AdminClient(admin_conf)
    ca.create_topics([NewTopic("secret", 1, 1)])["secret"].result(10)

    # alice: no rights. Her producer asks for the topic's metadata: TOPIC_AUTHORIZATION_FAILED
    p = ck.Producer({**alice, "enable.idempotence": False})
    errs = []
    p.produce("secret", b"x", on_delivery=lambda err, msg: errs.append(err))
    p.flush(10)
    assert errs and errs[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "secret" not in AdminClient(alice).list_topics(timeout=10).topics  # all topics: left out

    async def grant(acls):
        async with Cluster(broker.bootstrap, sasl=SaslConfig("PLAIN", "admin", "admin-pw")) as cluster:
            admin = Admin(cluster)
            await admin.create_acls(acls)
            return await admin.describe_acls(AclFilter(principal="User:alice"))

    # DESCRIBE only: she sees the topic and finds the group's coordinator, but may not fetch
    asyncio.run(asyncio.wait_for(grant([Acl("topic", "secret", "User:alice", "describe"),
                                        Acl("group", "readers", "User:alice", "describe")]), 20))
    assert "secret" in AdminClient(alice).list_topics(timeout=10).topics
    c = ck.Consumer({**alice, "group.id": "readers", "auto.offset.reset": "earliest"})
    c.assign([ck.TopicPartition("secret", 0, 0)])
    seen = set()
    for _ in range(100):
        m = c.poll(0.1)
        if m is not None and m.error():
            seen.add(m.error().code())
        if ck.KafkaError.TOPIC_AUTHORIZATION_FAILED in seen:
            break
    c.close()
    assert seen == {ck.KafkaError.TOPIC_AUTHORIZATION_FAILED}

    got = asyncio.run(asyncio.wait_for(grant([
        Acl("topic", "secret", "User:alice", "write"),
        Acl("topic", "sec", "User:alice", "read", pattern_type="prefixed"),
        Acl("group", "readers", "User:alice", "read")]), 20))
    assert sorted((a.resource_type, a.resource_name, a.pattern_type, a.operation) for a in got) == [
        ("group", "readers", "literal", "describe"), ("group", "readers", "literal", "read"), ("topic", "sec", "prefixed", "read"),
        ("topic", "secret", "literal", "describe"), ("topic", "secret", "literal", "write")]
    roundtrip(alice, "secret", n=5, group="readers")  # idempotent (WRITE on a topic) and a group member


def test_kproto_client_sasl_plain_scram_and_tls(start, cert):
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.consumer import Consumer
    from kproto.client.producer import Producer
    from kproto.client.protocol import SaslConfig
    from kproto.client.sasl import SaslAuthenticationError

    plain = start(**SASL)
    tls = start(ssl_context=server_context(cert), **SASL)
    client_ctx = ssl.create_default_context(cafile=cert[0])

    async def use(bootstrap, sasl, ctx, topic):
        async with Cluster(bootstrap, sasl=sasl, ssl=ctx) as cluster:
            await Admin(cluster).create_topics({topic: 1})
            producer = await Producer(cluster).start()
            for i in range(5):
                await producer.send(topic, b"r%d" % i, partition=0)
            await producer.flush()
            await producer.close()
            consumer = await Consumer(cluster, [topic]).start()
            got: list = []
            for _ in range(20):
                got += [r.value for r in await consumer.getmany(timeout=1)]
                if len(got) >= 5:
                    break
            await consumer.close()
            assert got == [b"r%d" % i for i in range(5)]

    async def main():
        await use(plain.bootstrap, SaslConfig("PLAIN", "alice", "alice-pw"), None, "k-plain")
        await use(plain.bootstrap, SaslConfig("SCRAM-SHA-512", "alice", "alice-pw"), None, "k-scram")
        await use(tls.bootstrap, SaslConfig("SCRAM-SHA-256", "admin", "admin-pw"), client_ctx, "k-tls")
        with pytest.raises(SaslAuthenticationError, match="SASL_AUTHENTICATION_FAILED"):
            async with Cluster(plain.bootstrap, sasl=SaslConfig("PLAIN", "alice", "bad")) as cluster:
                await cluster.refresh_metadata([])
    asyncio.run(asyncio.wait_for(main(), 60))
