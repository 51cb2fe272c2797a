"""Broker security without sockets: the SASL state machine of a connection (PLAIN, SCRAM,
the legacy v0 flow, what is refused before authentication), the authorizer's rules and the
authorization errors KafkaApis gives, through BrokerCore."""
from __future__ import annotations

import pytest

import kproto
from kproto.broker.security.acl import (ALL, ALLOW, CLUSTER, DENY, DESCRIBE, DESCRIBE_CONFIGS, GROUP,
                               IDEMPOTENT_WRITE, LITERAL, PREFIXED, READ, TOPIC, WRITE, ALTER_CONFIGS,
                               AclBinding, Authorizer, TRANSACTIONAL_ID)
from kproto.broker.security.auth import CredentialStore, PlainServer, SaslFailed, ScramCredential, ScramServer
from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore
from kproto.client.sasl import ScramClient, salted_password
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client, batch

USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}


def make_core(tmp_path, **kw):
    return BrokerCore(str(tmp_path / "data"), BrokerConfig(**kw))


@pytest.fixture
def sasl_core(tmp_path):
    core = make_core(tmp_path, sasl_enabled_mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
                     sasl_users=USERS)
    yield core
    core.close()


def login_plain(client, user, password, authzid=""):
    hs = client.call(K.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    assert hs.error_code == 0 and "PLAIN" in hs.mechanisms
    return client.call(K.SASL_AUTHENTICATE, 2, auth_bytes=f"{authzid}\0{user}\0{password}".encode())


def login_scram(client, mechanism, user, password):
    assert client.call(K.SASL_HANDSHAKE, 1, mechanism=mechanism).error_code == 0
    mech = ScramClient(mechanism, user, password)
    token = mech.initial()
    while token is not None:
        r = client.call(K.SASL_AUTHENTICATE, 1, auth_bytes=token)
        if r.error_code:
            return r, mech
        token = mech.step(bytes(r.auth_bytes))
    return r, mech


# ------------------------------------------------------------------ SASL

def test_only_api_versions_and_handshake_before_authentication(sasl_core):
    client = Client(sasl_core)
    versions = client.call(K.API_VERSIONS, 3, client_software_name="t", client_software_version="1")
    keys = {a.api_key: (a.min_version, a.max_version) for a in versions.api_keys}
    assert keys[K.SASL_HANDSHAKE] == (0, 1) and keys[K.SASL_AUTHENTICATE] == (0, 2)
    client.send(K.METADATA, 12, kproto.request(K.METADATA).cls(topics=None))
    assert client.channel.closed == "Unexpected Kafka request of type METADATA during SASL handshake."
    # after the handshake only SaslAuthenticate
    client = Client(sasl_core)
    assert client.call(K.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == 0
    client.send(K.API_VERSIONS, 0, kproto.request(K.API_VERSIONS).cls())
    assert "during SASL authentication" in client.channel.closed


def test_plain_good_and_bad_credentials(sasl_core):
    client = Client(sasl_core)
    r = login_plain(client, "alice", "alice-secret")
    assert r.error_code == 0 and bytes(r.auth_bytes) == b""
    assert sasl_core.security.session(client.channel).principal == "User:alice"
    assert client.call(K.METADATA, 12, topics=None).brokers  # now served
    # authenticated: a second handshake or authenticate is KafkaApis' ILLEGAL_SASL_STATE
    assert client.call(K.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == E.ILLEGAL_SASL_STATE
    assert client.call(K.SASL_AUTHENTICATE, 2, auth_bytes=b"x").error_code == E.ILLEGAL_SASL_STATE

    client = Client(sasl_core)
    r = login_plain(client, "alice", "wrong")
    assert r.error_code == E.SASL_AUTHENTICATION_FAILED
    assert r.error_message == "Authentication failed: Invalid username or password"
    assert client.channel.closed
    client = Client(sasl_core)
    r = login_plain(client, "alice", "alice-secret", authzid="bob")
    assert r.error_code == E.SASL_AUTHENTICATION_FAILED and "authorization id" in r.error_message


def test_unsupported_mechanism_is_refused_and_closed(tmp_path):
    core = make_core(tmp_path, sasl_enabled_mechanisms=("SCRAM-SHA-512",), sasl_users=USERS)
    client = Client(core)
    r = client.call(K.SASL_HANDSHAKE, 1, mechanism="PLAIN")
    assert r.error_code == E.UNSUPPORTED_SASL_MECHANISM and list(r.mechanisms) == ["SCRAM-SHA-512"]
    assert client.channel.closed
    core.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_kproto_client_halves(sasl_core, mechanism):
    client = Client(sasl_core)
    r, mech = login_scram(client, mechanism, "bob", "bob-secret")
    assert r.error_code == 0 and mech.complete  # the client checked the server's signature
    assert sasl_core.security.session(client.channel).principal == "User:bob"
    client = Client(sasl_core)
    r, mech = login_scram(client, mechanism, "bob", "nope")
    assert r.error_code == E.SASL_AUTHENTICATION_FAILED
    assert r.error_message == ("Authentication failed during authentication due to invalid "
                               f"credentials with SASL mechanism {mechanism}")
    assert client.channel.closed
    client = Client(sasl_core)
    r, _ = login_scram(client, mechanism, "nobody", "x")
    assert r.error_code == E.SASL_AUTHENTICATION_FAILED and client.channel.closed


def test_scram_server_checks_nonce_and_proof():
    store = CredentialStore()
    store.scram[("SCRAM-SHA-256", "u")] = ScramCredential.from_password("SCRAM-SHA-256", "pw", 4096, b"salt")
    server = ScramServer("SCRAM-SHA-256", store, nonce="srv")
    client = ScramClient("SCRAM-SHA-256", "u", "pw", nonce="cli")
    first = server.step(client.initial())
    assert first == b"r=clisrv,s=c2FsdA==,i=4096"
    final = client.step(first)
    assert final is not None
    tampered = final.replace(b"r=clisrv", b"r=clixxx")
    server2 = ScramServer("SCRAM-SHA-256", store, nonce="srv")
    server2.step(b"n,,n=u,r=cli")
    with pytest.raises(SaslFailed):
        server2.step(tampered)
    client.step(server.step(final))
    assert client.complete and server.complete and server.username == "u"
    # the same credential as one made from the salted password (AlterUserScramCredentials)
    salted = salted_password("sha256", "pw", b"salt", 4096)
    assert ScramCredential.from_salted("SCRAM-SHA-256", salted, b"salt", 4096) == \
        store.scram[("SCRAM-SHA-256", "u")]


def test_plain_server_messages():
    store = CredentialStore({"u": "p"})
    for token, message in [(b"u\0p", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
                           (b"\0\0p", "Authentication failed: username not specified"),
                           (b"\0u\0", "Authentication failed: password not specified")]:
        with pytest.raises(SaslFailed, match=message):
            PlainServer(store).step(token)


def test_legacy_v0_handshake_then_raw_tokens(sasl_core):
    client = Client(sasl_core)
    assert client.call(K.SASL_HANDSHAKE, 0, mechanism="SCRAM-SHA-512").error_code == 0
    mech = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    token = mech.initial()
    while token is not None:
        sasl_core.handle(client.channel, token)  # no Kafka header: the raw token
        frame = client.channel.frames.pop()
        assert frame is not None and int.from_bytes(frame[:4], "big") == len(frame) - 4
        token = mech.step(frame[4:])
    assert mech.complete
    client.channel.frames.clear()
    client.sent.clear()
    assert client.call(K.METADATA, 12, topics=None).brokers
    # a bad raw token closes the connection
    client = Client(sasl_core)
    client.call(K.SASL_HANDSHAKE, 0, mechanism="PLAIN")
    sasl_core.handle(client.channel, b"\0alice\0bad")
    assert client.channel.closed


def test_plaintext_listener_answers_sasl_requests_with_illegal_state(tmp_path):
    core = make_core(tmp_path)
    client = Client(core)
    assert client.call(K.SASL_HANDSHAKE, 1, mechanism="PLAIN").error_code == E.ILLEGAL_SASL_STATE
    assert client.call(K.METADATA, 12, topics=None).brokers
    core.close()


def test_scram_credentials_altered_described_and_kept(tmp_path):
    core = make_core(tmp_path, sasl_enabled_mechanisms=("SCRAM-SHA-256",), sasl_users={"alice": "a"})
    client = Client(core)
    assert login_scram(client, "SCRAM-SHA-256", "alice", "a")[0].error_code == 0
    salted = salted_password("sha512", "carol-pw", b"0123456789", 8192)
    req = kproto.request(K.ALTER_USER_SCRAM_CREDENTIALS).cls
    r = client.call(K.ALTER_USER_SCRAM_CREDENTIALS, 0, deletions=[req.ScramCredentialDeletion(
        name="alice", mechanism=1), req.ScramCredentialDeletion(name="zed", mechanism=1)],
        upsertions=[req.ScramCredentialUpsertion(name="carol", mechanism=2, iterations=8192,
                                                 salt=b"0123456789", salted_password=salted),
                    req.ScramCredentialUpsertion(name="dan", mechanism=2, iterations=100,
                                                 salt=b"s", salted_password=b"x")])
    assert [(x.user, x.error_code) for x in r.results] == [
        ("alice", 0), ("zed", E.RESOURCE_NOT_FOUND), ("carol", 0), ("dan", E.UNACCEPTABLE_CREDENTIAL)]
    d = client.call(K.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, users=None)
    assert [(x.user, [(c.mechanism, c.iterations) for c in x.credential_infos]) for x in d.results] == [
        ("carol", [(2, 8192)])]
    core.close()
    # after a restart: alice stays deleted, carol logs in with SCRAM-SHA-512
    core = make_core(tmp_path, sasl_enabled_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                     sasl_users={"alice": "a"})
    r, mech = login_scram(Client(core), "SCRAM-SHA-512", "carol", "carol-pw")
    assert r.error_code == 0 and mech.complete
    r, _ = login_scram(Client(core), "SCRAM-SHA-256", "alice", "a")
    assert r.error_code == E.SASL_AUTHENTICATION_FAILED
    core.close()


# ------------------------------------------------------------------ authorizer rules

def acl(rtype, name, principal, op, perm=ALLOW, pattern=LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_authorizer_rules():
    az = Authorizer(super_users=["User:admin"], acls=[
        acl(TOPIC, "orders", "User:alice", READ),
        acl(TOPIC, "pay-", "User:alice", WRITE, pattern=PREFIXED),
        acl(TOPIC, "pay-secret", "User:alice", ALL, perm=DENY),
        acl(TOPIC, "*", "User:bob", DESCRIBE),
        acl(GROUP, "g", "User:*", READ, host="10.0.0.1"),
        acl(TOPIC, "cfg", "User:carol", ALTER_CONFIGS),
    ])
    ok = az.authorize
    assert ok("User:alice", "127.0.0.1", READ, TOPIC, "orders")
    assert ok("User:alice", "127.0.0.1", DESCRIBE, TOPIC, "orders")        # READ implies DESCRIBE
    assert not ok("User:alice", "127.0.0.1", WRITE, TOPIC, "orders")
    assert ok("User:alice", "127.0.0.1", WRITE, TOPIC, "pay-in")            # prefixed
    assert not ok("User:alice", "127.0.0.1", WRITE, TOPIC, "pay-secret")    # DENY wins
    assert ok("User:bob", "127.0.0.1", DESCRIBE, TOPIC, "anything")          # wildcard name
    assert not ok("User:bob", "127.0.0.1", READ, TOPIC, "anything")
    assert ok("User:dave", "10.0.0.1", READ, GROUP, "g")                      # wildcard principal
    assert not ok("User:dave", "127.0.0.1", READ, GROUP, "g")                 # other host
    assert ok("User:carol", "h", DESCRIBE_CONFIGS, TOPIC, "cfg")              # implied
    assert ok("User:admin", "h", WRITE, CLUSTER, "kafka-cluster")             # super user
    assert not ok("User:eve", "h", READ, TOPIC, "nobody-has-acls")            # no ACL: denied
    open_az = Authorizer(allow_everyone_if_no_acl_found=True, acls=az.acls)
    assert open_az.authorize("User:eve", "h", READ, GROUP, "no-acl-names-it")
    assert not open_az.authorize("User:eve", "h", READ, GROUP, "g")          # ACLs exist
    assert not open_az.authorize("User:eve", "h", READ, TOPIC, "x")          # TOPIC "*" covers it
    # authorizeByResourceType
    assert az.authorize_any("User:alice", "h", WRITE, TOPIC)
    assert not az.authorize_any("User:bob", "h", WRITE, TOPIC)
    denied_all = Authorizer(acls=[acl(TOPIC, "t", "User:x", WRITE), acl(TOPIC, "*", "User:x", WRITE, perm=DENY)])
    assert not denied_all.authorize_any("User:x", "h", WRITE, TOPIC)


# ------------------------------------------------------------------ enforcement in the core

@pytest.fixture
def secured(tmp_path):
    core = make_core(tmp_path, sasl_enabled_mechanisms=("PLAIN",), sasl_users=USERS, authorizer=True,
                     super_users=("User:admin",))
    yield core
    core.close()


def user(core, name):
    client = Client(core)
    assert login_plain(client, name, USERS[name]).error_code == 0
    return client


def create_acls(client, *bindings):
    cls = kproto.request(K.CREATE_ACLS).cls
    r = client.call(K.CREATE_ACLS, 3, creations=[cls.AclCreation(
        resource_type=b.resource_type, resource_name=b.resource_name, resource_pattern_type=b.pattern_type,
        principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission)
        for b in bindings])
    return [x.error_code for x in r.results]


def metadata(client, *topics):
    cls = kproto.request(K.METADATA).cls
    r = client.call(K.METADATA, 12, topics=[cls.MetadataRequestTopic(name=t) for t in topics],
                    allow_auto_topic_creation=True)
    return [(t.name, t.error_code) for t in r.topics]


def produce(client, topic, version=9, **kw):
    cls = kproto.request(K.PRODUCE).cls
    r = client.call(K.PRODUCE, version, acks=-1, timeout_ms=1000, topic_data=[cls.TopicProduceData(
        name=topic, partition_data=[cls.PartitionProduceData(index=0, records=batch([b"v"]))])], **kw)
    return r.responses[0].partition_responses[0].error_code


def test_topic_rights(secured):
    admin, alice = user(secured, "admin"), user(secured, "alice")
    ctr = kproto.request(K.CREATE_TOPICS).cls
    r = admin.call(K.CREATE_TOPICS, 7, topics=[ctr.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                                               for n in ("t1", "t2")], timeout_ms=1000)
    assert [t.error_code for t in r.topics] == [0, 0]
    # alice has no ACL: produce, metadata, list offsets, fetch, create refused
    assert produce(alice, "t1") == E.TOPIC_AUTHORIZATION_FAILED
    md = alice.call(K.METADATA, 12, topics=None)
    assert md.topics == []                                         # all-topics: left out
    md = alice.call(K.METADATA, 12, topics=[kproto.request(K.METADATA).cls.MetadataRequestTopic(name="t1")])
    assert [(t.name, t.error_code) for t in md.topics] == [("t1", E.TOPIC_AUTHORIZATION_FAILED)]
    r = alice.call(K.CREATE_TOPICS, 7, topics=[ctr.CreatableTopic(name="t3", num_partitions=1,
                                                                   replication_factor=1)], timeout_ms=1000)
    assert r.topics[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    fr = kproto.request(K.FETCH).cls
    f = alice.call(K.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                   session_id=0, session_epoch=-1, topics=[fr.FetchTopic(topic="t1", partitions=[
                       fr.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                   forgotten_topics_data=[], rack_id="")
    assert f.responses[0].partitions[0].error_code == E.TOPIC_AUTHORIZATION_FAILED
    # the admin grants WRITE on t1 and READ on the t prefix
    assert create_acls(admin, acl(TOPIC, "t1", "User:alice", WRITE),
                       acl(TOPIC, "t", "User:alice", READ, pattern=PREFIXED)) == [0, 0]
    assert produce(alice, "t1") == 0
    assert produce(alice, "t2") == E.TOPIC_AUTHORIZATION_FAILED
    md = alice.call(K.METADATA, 12, topics=None)
    assert sorted(t.name for t in md.topics) == ["t1", "t2"]
    f = alice.call(K.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                   session_id=0, session_epoch=-1, topics=[fr.FetchTopic(topic="t1", partitions=[
                       fr.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                   forgotten_topics_data=[], rack_id="")
    assert f.responses[0].partitions[0].error_code == 0 and f.responses[0].partitions[0].records
    # alice may not manage ACLs
    assert create_acls(alice, acl(TOPIC, "t2", "User:alice", WRITE)) == [E.CLUSTER_AUTHORIZATION_FAILED]
    assert alice.call(K.DESCRIBE_ACLS, 3, resource_type_filter=1, resource_name_filter=None,
                      pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                      permission_type=1).error_code == E.CLUSTER_AUTHORIZATION_FAILED


def test_group_transaction_and_cluster_rights(secured):
    admin, bob = user(secured, "admin"), user(secured, "bob")
    jg = kproto.request(K.JOIN_GROUP).cls
    join = dict(group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
                group_instance_id=None, protocol_type="consumer",
                protocols=[jg.JoinGroupRequestProtocol(name="range", metadata=b"")], reason=None)
    assert bob.call(K.JOIN_GROUP, 9, **join).error_code == E.GROUP_AUTHORIZATION_FAILED
    assert bob.call(K.FIND_COORDINATOR, 4, key_type=0, coordinator_keys=["g"]).coordinators[0].error_code == \
        E.GROUP_AUTHORIZATION_FAILED
    assert bob.call(K.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=-1,
                    producer_id=-1, producer_epoch=-1).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert bob.call(K.INIT_PRODUCER_ID, 4, transactional_id="tx", transaction_timeout_ms=60000,
                    producer_id=-1, producer_epoch=-1).error_code == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert produce(bob, "t", transactional_id="tx") == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    dg = bob.call(K.DESCRIBE_GROUPS, 5, groups=["g"], include_authorized_operations=False)
    assert dg.groups[0].error_code == E.GROUP_AUTHORIZATION_FAILED
    assert create_acls(admin, acl(GROUP, "g", "User:bob", READ), acl(TOPIC, "x", "User:bob", WRITE),
                       acl(TRANSACTIONAL_ID, "tx", "User:bob", WRITE)) == [0, 0, 0]
    assert bob.call(K.JOIN_GROUP, 9, **join).error_code == E.MEMBER_ID_REQUIRED  # through to the coordinator
    # WRITE on any topic is enough for an idempotent producer (Kafka 3.x)
    assert bob.call(K.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout_ms=-1,
                    producer_id=-1, producer_epoch=-1).error_code == 0
    assert create_acls(admin, acl(CLUSTER, "other", "User:bob", IDEMPOTENT_WRITE)) == [E.INVALID_REQUEST]
    # configs of the broker need the cluster's DESCRIBE_CONFIGS
    dc = kproto.request(K.DESCRIBE_CONFIGS).cls
    r = bob.call(K.DESCRIBE_CONFIGS, 4, resources=[dc.DescribeConfigsResource(
        resource_type=4, resource_name="1", configuration_keys=None)], include_synonyms=False,
        include_documentation=False)
    assert r.results[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
    r = admin.call(K.DESCRIBE_CONFIGS, 4, resources=[dc.DescribeConfigsResource(
        resource_type=4, resource_name="1", configuration_keys=None)], include_synonyms=False,
        include_documentation=False)
    assert r.results[0].error_code == 0 and r.results[0].configs


def test_acls_described_deleted_and_kept_across_restart(tmp_path):
    kw = dict(sasl_enabled_mechanisms=("PLAIN",), sasl_users=USERS, authorizer=True,
              super_users=("User:admin",))
    core = make_core(tmp_path, **kw)
    admin = user(core, "admin")
    assert create_acls(admin, acl(TOPIC, "a", "User:alice", READ), acl(TOPIC, "ab", "User:alice", WRITE,
                                                                           pattern=PREFIXED),
                       acl(GROUP, "g", "User:bob", READ), acl(TOPIC, "", "User:x", READ),
                       acl(TOPIC, "a", "alice", READ)) == [0, 0, 0, E.INVALID_REQUEST, E.INVALID_REQUEST]
    core.close()
    core = make_core(tmp_path, **kw)
    admin = user(core, "admin")
    # MATCH: the bindings that apply to topic "abc"
    r = admin.call(K.DESCRIBE_ACLS, 3, resource_type_filter=TOPIC, resource_name_filter="abc",
                   pattern_type_filter=2, principal_filter=None, host_filter=None, operation=1,
                   permission_type=1)
    assert [(x.resource_name, x.pattern_type) for x in r.resources] == [("ab", PREFIXED)]
    dl = kproto.request(K.DELETE_ACLS).cls
    r = admin.call(K.DELETE_ACLS, 3, filters=[dl.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter="User:alice", host_filter=None, operation=1, permission_type=1)])
    assert sorted(m.resource_name for m in r.filter_results[0].matching_acls) == ["a", "ab"]
    r = admin.call(K.DESCRIBE_ACLS, 3, resource_type_filter=1, resource_name_filter=None,
                   pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                   permission_type=1)
    assert [(x.resource_type, x.resource_name) for x in r.resources] == [(GROUP, "g")]
    core.close()


def test_without_authorizer_acl_apis_are_security_disabled(tmp_path):
    core = make_core(tmp_path)
    client = Client(core)
    assert create_acls(client, acl(TOPIC, "a", "User:x", READ)) == [E.SECURITY_DISABLED]
    assert client.call(K.DESCRIBE_ACLS, 3, resource_type_filter=1, resource_name_filter=None,
                       pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                       permission_type=1).error_code == E.SECURITY_DISABLED
    # auto-created: the asking request answered before the topic is there, as Kafka does
    assert metadata(client, "auto") == [("auto", E.UNKNOWN_TOPIC_OR_PARTITION)]
    assert metadata(client, "auto") == [("auto", 0)]
    assert produce(client, "auto") == 0  # everything allowed, as before
    core.close()


def test_anonymous_principal_on_a_plaintext_listener_with_an_authorizer(tmp_path):
    core = make_core(tmp_path, authorizer=True)
    client = Client(core)
    assert produce(client, "t") == E.TOPIC_AUTHORIZATION_FAILED
    core.close()
    core = make_core(tmp_path, authorizer=True, super_users=("User:ANONYMOUS",))
    client = Client(core)
    assert create_acls(client, acl(TOPIC, "t", "User:*", ALL)) == [0]
    core.close()
    core = make_core(tmp_path, authorizer=True)
    client = Client(core)
    assert metadata(client, "t", "u") == [("t", E.UNKNOWN_TOPIC_OR_PARTITION), ("u", E.TOPIC_AUTHORIZATION_FAILED)]
    assert metadata(client, "t", "u") == [("t", 0), ("u", E.TOPIC_AUTHORIZATION_FAILED)]
    assert produce(client, "t") == 0  # the ACL was kept; User:* covers ANONYMOUS
    core.close()


def test_transaction_and_producer_descriptions_need_describe_and_read(secured):
    admin, bob = user(secured, "admin"), user(secured, "bob")
    ctr = kproto.request(K.CREATE_TOPICS).cls
    admin.call(K.CREATE_TOPICS, 7, topics=[ctr.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                                           for n in ("t", "u")], timeout_ms=1000)
    for tid in ("tx1", "tx2"):
        r = admin.call(K.INIT_PRODUCER_ID, 4, transactional_id=tid, transaction_timeout_ms=60000,
                       producer_id=-1, producer_epoch=-1)
        assert r.error_code == 0
    pid = r.producer_id
    ap = kproto.request(K.ADD_PARTITIONS_TO_TXN).cls
    r = admin.call(K.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="tx2", v3_and_below_producer_id=pid,
                   v3_and_below_producer_epoch=0, v3_and_below_topics=[
                       ap.AddPartitionsToTxnTopic(name=t, partitions=[0]) for t in ("t", "u")])
    assert [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition] == [0, 0]

    def described():
        r = bob.call(K.DESCRIBE_TRANSACTIONS, 0, transactional_ids=["tx1", "tx2"])
        return [(s.transactional_id, s.error_code, [t.topic for t in s.topics]) for s in r.transaction_states]

    def listed():
        return [t.transactional_id for t in bob.call(K.LIST_TRANSACTIONS, 1).transaction_states]

    def producers():
        dp = kproto.request(K.DESCRIBE_PRODUCERS).cls
        r = bob.call(K.DESCRIBE_PRODUCERS, 0, topics=[dp.TopicRequest(name="t", partition_indexes=[0])])
        return r.topics[0].partitions[0].error_code

    denied = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert described() == [("tx1", denied, []), ("tx2", denied, [])]
    assert listed() == [] and producers() == E.TOPIC_AUTHORIZATION_FAILED
    assert create_acls(admin, acl(TRANSACTIONAL_ID, "tx2", "User:bob", DESCRIBE),
                       acl(TOPIC, "t", "User:bob", READ)) == [0, 0]
    # READ implies DESCRIBE on the topic; u stays hidden in tx2's partitions
    assert described() == [("tx2", 0, ["t"]), ("tx1", denied, [])]
    assert listed() == ["tx2"] and producers() == 0


def test_an_acks0_produce_to_a_denied_topic_closes_the_connection(secured):
    admin, alice = user(secured, "admin"), user(secured, "alice")
    ctr = kproto.request(K.CREATE_TOPICS).cls
    admin.call(K.CREATE_TOPICS, 7, topics=[ctr.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                                           for n in ("t1", "t2")], timeout_ms=1000)
    assert create_acls(admin, acl(TOPIC, "t1", "User:alice", WRITE)) == [0]
    cls = kproto.request(K.PRODUCE).cls

    def acks0(*topics):
        before = len(alice.channel.frames)
        alice.send(K.PRODUCE, 9, cls(acks=0, timeout_ms=1000, topic_data=[cls.TopicProduceData(
            name=t, partition_data=[cls.PartitionProduceData(index=0, records=batch([b"v"]))]) for t in topics]))
        return alice.channel.frames[before:]
    assert acks0("t1") == [None] and alice.channel.closed is None
    assert acks0("t1", "t2") == [] and alice.channel.closed
    assert secured.logs.get("t1", 0).log_end_offset == 2 and secured.logs.get("t2", 0).log_end_offset == 0


def test_offsets_for_leader_epoch_needs_describe_on_the_topic(secured):
    admin, alice = user(secured, "admin"), user(secured, "alice")
    ctr = kproto.request(K.CREATE_TOPICS).cls
    admin.call(K.CREATE_TOPICS, 7, topics=[ctr.CreatableTopic(name="t1", num_partitions=1, replication_factor=1)],
               timeout_ms=1000)
    req = kproto.request(K.OFFSET_FOR_LEADER_EPOCH).cls

    def ask(client, replica_id=-1):
        r = client.call(K.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=replica_id, topics=[req.OffsetForLeaderTopic(
            topic="t1", partitions=[req.OffsetForLeaderPartition(partition=0, leader_epoch=0)])])
        return r.topics[0].partitions[0].error_code
    assert ask(alice) == E.TOPIC_AUTHORIZATION_FAILED
    assert ask(admin) == 0
    assert create_acls(admin, acl(TOPIC, "t1", "User:alice", DESCRIBE)) == [0]
    assert ask(alice) == 0
    assert ask(alice, replica_id=2) == E.CLUSTER_AUTHORIZATION_FAILED   # a follower's request


def test_features_and_quorum_need_cluster_rights(secured):
    # UpdateFeatures needs ALTER on the cluster, DescribeQuorum DESCRIBE (Kafka's KafkaApis)
    admin, bob = user(secured, "admin"), user(secured, "bob")
    uf = kproto.request(K.UPDATE_FEATURES).cls
    update = dict(timeout_ms=1000, validate_only=True, feature_updates=[
        uf.FeatureUpdateKey(feature="group.version", max_version_level=1, upgrade_type=1)])
    dq = kproto.request(K.DESCRIBE_QUORUM).cls
    quorum = dict(topics=[dq.TopicData(topic_name="__cluster_metadata", partitions=[dq.PartitionData(partition_index=0)])])
    assert bob.call(K.UPDATE_FEATURES, 2, **update).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert bob.call(K.DESCRIBE_QUORUM, 2, **quorum).error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert admin.call(K.UPDATE_FEATURES, 2, **update).error_code == 0
    assert admin.call(K.DESCRIBE_QUORUM, 2, **quorum).topics[0].partitions[0].error_code == 0


def test_offsets_v10_by_topic_id_unknown_ids_before_topic_rights(secured):
    # v10 names topics by id: the broker names them first, so READ/DESCRIBE is checked on the
    # topic the id names (denied with its id in the answer), and an id no topic has is
    # UNKNOWN_TOPIC_ID before any authorisation, as Kafka answers
    admin, bob = user(secured, "admin"), user(secured, "bob")
    metadata(admin, "t")
    tid = admin.call(K.METADATA, 12, topics=[kproto.request(K.METADATA).cls.MetadataRequestTopic(name="t")],
                     allow_auto_topic_creation=False).topics[0].topic_id
    unknown = kproto.Uuid(bytes(range(16)))
    assert create_acls(admin, acl(GROUP, "g", "User:bob", READ)) == [0]
    oc = kproto.request(K.OFFSET_COMMIT).cls
    r = bob.call(K.OFFSET_COMMIT, 10, group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[
        oc.OffsetCommitRequestTopic(topic_id=i, partitions=[oc.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=1)]) for i in (tid, unknown)])
    assert sorted((t.topic_id == tid, t.partitions[0].error_code) for t in r.topics) == [
        (False, E.UNKNOWN_TOPIC_ID), (True, E.TOPIC_AUTHORIZATION_FAILED)]
    of = kproto.request(K.OFFSET_FETCH).cls
    r = bob.call(K.OFFSET_FETCH, 10, require_stable=False, groups=[of.OffsetFetchRequestGroup(
        group_id="g", topics=[of.OffsetFetchRequestTopics(topic_id=i, partition_indexes=[0]) for i in (tid, unknown)])])
    assert sorted((t.topic_id == tid, t.partitions[0].error_code) for t in r.groups[0].topics) == [
        (False, E.UNKNOWN_TOPIC_ID), (True, E.TOPIC_AUTHORIZATION_FAILED)]


def test_share_group_rights(secured):
    admin, alice = user(secured, "admin"), user(secured, "alice")
    ctr = kproto.request(K.CREATE_TOPICS).cls
    r = admin.call(K.CREATE_TOPICS, 7, topics=[ctr.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                                               for n in ("s1", "s2")], timeout_ms=1000)
    ids = {t.name: t.topic_id for t in r.topics}

    def hb():
        return alice.call(K.SHARE_GROUP_HEARTBEAT, 1, group_id="sg", member_id="m", member_epoch=0,
                          subscribed_topic_names=["s1"]).error_code
    assert hb() == E.GROUP_AUTHORIZATION_FAILED
    assert create_acls(admin, acl(GROUP, "sg", "User:alice", READ)) == [0]
    assert hb() == E.TOPIC_AUTHORIZATION_FAILED                      # no DESCRIBE on s1
    assert create_acls(admin, acl(TOPIC, "s1", "User:alice", READ)) == [0]  # READ implies DESCRIBE
    assert hb() == 0
    d = alice.call(K.SHARE_GROUP_DESCRIBE, 1, group_ids=["sg", "other"], include_authorized_operations=False)
    assert sorted((g.group_id, g.error_code) for g in d.groups) == [("other", E.GROUP_AUTHORIZATION_FAILED),
                                                                    ("sg", 0)]
    sf = kproto.request(K.SHARE_FETCH).cls
    f = alice.call(K.SHARE_FETCH, 1, group_id="sg", member_id="m", share_session_epoch=0, max_wait_ms=0,
                   min_bytes=1, max_bytes=1 << 20, max_records=10, batch_size=10, forgotten_topics_data=[],
                   topics=[sf.FetchTopic(topic_id=ids[n], partitions=[sf.FetchPartition(partition_index=0)])
                           for n in ("s1", "s2")])
    got = {t.topic_id: [p.error_code for p in t.partitions] for t in f.responses}
    assert (f.error_code, got[ids["s2"]]) == (0, [E.TOPIC_AUTHORIZATION_FAILED])
    assert got.get(ids["s1"], [0]) == [0]
    rd = kproto.request(K.READ_SHARE_GROUP_STATE).cls
    r = alice.call(K.READ_SHARE_GROUP_STATE, 0, group_id="sg", topics=[rd.ReadStateData(
        topic_id=ids["s1"], partitions=[rd.PartitionData(partition=0, leader_epoch=0)])])
    assert r.results[0].partitions[0].error_code == E.CLUSTER_AUTHORIZATION_FAILED
