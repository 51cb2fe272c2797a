"""TLS client-certificate principals: Kafka's ssl.principal.mapping.rules (the examples of
Kafka's documentation and its SslPrincipalMapper tests), the subject written as Java's
X500Principal.getName() writes it, and ssl.client.auth on a broker whose ACLs see the mapped
principal."""
from __future__ import annotations

import asyncio
import ssl

import pytest

from kproto.broker.security.tls import NoMatchingRule, SslPrincipalMapper, subject_name

x509 = pytest.importorskip("cryptography.x509")

DOC_RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
             "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
             "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
             "DEFAULT")


def test_kafka_documentation_example():
    m = SslPrincipalMapper(DOC_RULES)
    assert m.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "serviceuser"
    assert m.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"


def test_mapper_rules_lower_upper_and_default():
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, "
                           "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, "
                           "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, "
                           "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, DEFAULT")
    assert m.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert m.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert m.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert m.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert m.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize("rules", [
    "DEFAULT", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U", "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/"])
def test_valid_rules(rules):
    SslPrincipalMapper(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU"])
def test_invalid_rules(rules):
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper(rules)


def test_rules_splitting_and_repr():
    # Kafka's Rule.toString: no trailing '/' when neither L nor U
    assert repr(SslPrincipalMapper("RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/, DEFAULT")) == \
        "SslPrincipalMapper(rules = [RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1, DEFAULT])"
    assert repr(SslPrincipalMapper("  RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/L ,DEFAULT  ")) == \
        "SslPrincipalMapper(rules = [RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/L, DEFAULT])"


def test_escaped_comma_in_a_name():
    m = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert m.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


def test_back_references_beyond_the_groups_are_literal():
    # $3 names no group (2 groups): kept as the text "$3"; $12 is read as $1 then "2"
    m = SslPrincipalMapper("RULE:^CN=(.*?),O=(.*?)$/$1-$3-$12-$2/")
    assert m.name("CN=a,O=b") == "a-$3-a2-b"


def test_no_rule_applies():
    m = SslPrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/")
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x,O=y"):
        m.name("CN=x,O=y")


def _cert_der(subject):
    import datetime

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime(2026, 1, 1)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.DER)


def test_subject_written_as_javas_x500principal():
    """The expected strings are what Java 17's X500Principal.getName() printed for the same
    subjects: ``,=+<>#;"\\`` escaped anywhere, a leading/trailing space escaped, attributes
    without an RFC 2253 keyword as OID=#<DER hex>, the last RDN first."""
    from cryptography.x509.oid import NameOID
    A, R = x509.NameAttribute, x509.RelativeDistinguishedName
    first = x509.Name([A(NameOID.COUNTRY_NAME, "US"), A(NameOID.ORGANIZATION_NAME, "Acme, Inc."),
                       A(NameOID.COMMON_NAME, 'alice=#x+y;<z>"q\\ ')])
    assert subject_name(_cert_der(first)) == r'CN=alice\=\#x\+y\;\<z\>\"q\\\ ,O=Acme\, Inc.,C=US'
    second = x509.Name([A(NameOID.EMAIL_ADDRESS, "a@b.c"), A(NameOID.COMMON_NAME, " #lead"),
                        A(NameOID.SERIAL_NUMBER, "123"), A(NameOID.DOMAIN_COMPONENT, "com"),
                        A(NameOID.USER_ID, "u1"), A(NameOID.STREET_ADDRESS, "Main St"),
                        A(NameOID.LOCALITY_NAME, "Zürich"), A(NameOID.STATE_OR_PROVINCE_NAME, "ZH")])
    assert subject_name(_cert_der(second)) == (
        r"ST=ZH,L=Zürich,STREET=Main St,UID=u1,DC=com,2.5.4.5=#1303313233,CN=\ \#lead,"
        r"1.2.840.113549.1.9.1=#16056140622e63")
    third = x509.Name([R([A(NameOID.COMMON_NAME, "b"), A(NameOID.ORGANIZATIONAL_UNIT_NAME, "a")]),
                       R([A(NameOID.TITLE, "t\x01x")])])
    assert subject_name(_cert_der(third)) == "2.5.4.12=#0c03740178,CN=b+OU=a"


# ------------------------------------------------------------------ on a broker

def test_broker_acls_see_the_certificate_principal(tmp_path):
    from kproto.client.connection import Connection
    from kproto.codecs import request
    from kproto.testing import BrokerThread
    from kproto.testing.tls import TestCA

    ca = TestCA(tmp_path / "ca")
    server = ca.issue("CN=broker")
    admin = ca.issue("CN=Admin,OU=Ops,O=Acme")
    alice = ca.issue("CN=Alice,OU=Eng,O=Acme")
    bob = ca.issue("CN=Bob,OU=Eng,O=Acme")
    stranger = ca.issue("O=Nobody")
    rules = "RULE:^CN=(.*?),OU=(.*?),O=Acme$/$1/L"
    Metadata = request(3).cls
    CreateAcls = request(30).cls

    def run(client_auth):
        broker = BrokerThread(tmp_path / f"kafka-{client_auth}", ssl_context=ca.server_context(server),
                              ssl_client_auth=client_auth, ssl_principal_mapping_rules=rules,
                              authorizer=True, super_users=("User:admin",), num_partitions=1,
                              auto_create_topics=True).start()
        try:
            return asyncio.run(asyncio.wait_for(body(broker, client_auth), 60))
        finally:
            broker.stop()

    async def metadata_error(broker, issued, topic):
        conn = await Connection.open("127.0.0.1", int(broker.bootstrap.rsplit(":", 1)[1]), ssl=ca.client_context(issued))
        try:
            md = await conn.request(Metadata(topics=[Metadata.MetadataRequestTopic(name=topic)],
                                             allow_auto_topic_creation=True), 9)
            return md.topics[0].error_code
        finally:
            await conn.close()

    async def body(broker, client_auth):
        # the super user (User:admin, from CN=Admin lower-cased) creates the topic
        assert await metadata_error(broker, admin, "orders") == 3  # created by this request
        assert await metadata_error(broker, alice, "orders") == 29  # TOPIC_AUTHORIZATION_FAILED
        conn = await Connection.open("127.0.0.1", int(broker.bootstrap.rsplit(":", 1)[1]), ssl=ca.client_context(admin))
        acl = CreateAcls.AclCreation(resource_type=2, resource_name="orders", resource_pattern_type=3,
                                     principal="User:alice", host="*", operation=8, permission_type=3)
        res = await conn.request(CreateAcls(creations=[acl]), 1)
        assert res.results[0].error_code == 0
        await conn.close()
        assert await metadata_error(broker, alice, "orders") == 0
        assert await metadata_error(broker, bob, "orders") == 29
        # a subject no rule maps: the connection is not authenticated (closed)
        with pytest.raises(Exception):
            await metadata_error(broker, stranger, "orders")
        # without a certificate: refused in the handshake (required), else User:ANONYMOUS
        if client_auth == "required":
            with pytest.raises(Exception):
                await metadata_error(broker, None, "orders")
        else:
            assert await metadata_error(broker, None, "orders") == 29

    run("required")
    run("requested")
