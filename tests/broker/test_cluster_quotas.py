"""Client quotas in a kproto cluster as in a KRaft cluster: AlterClientQuotas is forwarded to
the controller, which writes ClientQuotaRecords to the metadata log; every broker describes and
enforces them from its image; they are in the snapshots and a wiped broker has them again."""
from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import pytest

from kproto.broker.cluster.raft import RaftConfig
from kproto.broker.cluster.snapshots import decode_snapshot
from kproto.client.connection import Connection
from kproto.conformance.scenario import build
from kproto.schemas.api_keys import ApiKey as K
from kproto.storage.metadata_image import RecordType, decode_metadata_record
from kproto.testing import ClusterThread

SNAPSHOTTING = RaftConfig(max_bytes_between_snapshots=2048, max_retention_bytes=0, segment_bytes=4096)


def ask(c: ClusterThread, node: int, body: Any, version: int) -> Any:
    host, port = c.inspect(lambda cl: (cl.brokers[node].config.host, cl.brokers[node].config.port))

    async def go() -> Any:
        async with await Connection.open(host, port) as conn:
            return await conn.request(body, version)
    return asyncio.run(go())


def described(c: ClusterThread, node: int) -> list[tuple[tuple[tuple[str, Any], ...], tuple[tuple[str, float], ...]]]:
    r = ask(c, node, build(K.DESCRIBE_CLIENT_QUOTAS, strict=False, components=[]), 1)
    assert r.error_code == 0
    return sorted((tuple(sorted((d.entity_type, d.entity_name or "") for d in e.entity)),
                   tuple(sorted((v.key, v.value) for v in e.values))) for e in r.entries)


WANT = [((("client-id", ""), ("user", "alice")), (("request_percentage", 25.0),)),
        ((("client-id", "app"),), (("producer_byte_rate", 1000.0),))]


@pytest.mark.kafka_cluster(brokers=3, controllers=1, raft_config=SNAPSHOTTING)
def test_quotas_are_metadata_records_served_and_enforced_by_every_broker(kafka_cluster: ClusterThread) -> None:
    c = kafka_cluster
    r = ask(c, 2, build(K.ALTER_CLIENT_QUOTAS, validate_only=False, entries=[
        {"entity": [{"entity_type": "client-id", "entity_name": "app"}],
         "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]},
        {"entity": [{"entity_type": "user", "entity_name": "alice"}, {"entity_type": "client-id", "entity_name": None}],
         "ops": [{"key": "request_percentage", "value": 25.0, "remove": False}]},
        {"entity": [{"entity_type": "user", "entity_name": ""}],
         "ops": [{"key": "request_percentage", "value": 25.0, "remove": False}]}]), 1)
    assert sorted(e.error_code for e in r.entries) == [0, 0, 42]
    c.wait_for(lambda cl: all(b.core.quota_store.entries for b in cl.brokers.values()), 10, "quotas on every broker")
    for node in (1, 2, 3):
        assert described(c, node) == WANT
        # enforced there: 20 kB at once is 2000 B/s over the first 10 s, twice the quota
        assert c.inspect(lambda cl: cl.brokers[node].core.quotas.produce.record("ANONYMOUS", "app", 20_000, 0)) > 0
    # in the controller's snapshot, and back on a wiped broker from it
    for i in range(12):  # records enough to pass the 2 KiB between snapshots
        c.create_topic(f"filler{i}", 1, 1)
    c.wait_for(lambda cl: all(x.replica.snapshots.ids for x in cl.controllers.values()), 30, "a snapshot")
    cdir = c.inspect(lambda cl: cl.controllers[cl.controller_ids[0]].core.log.path)
    latest = sorted(f for f in os.listdir(cdir) if f.endswith(".checkpoint"))[-1]
    with open(os.path.join(cdir, latest), "rb") as f:
        _, values = decode_snapshot(f.read())
    assert [decode_metadata_record(v)[0] for v in values].count(RecordType.CLIENT_QUOTA) == 2
    c.stop(3)
    shutil.rmtree(os.path.join(c.data_dir, "broker-3"))
    c.start(3)
    c.wait_for(lambda cl: cl.brokers[3].core.quota_store.entries != {}, 30, "the wiped broker's quotas")
    assert described(c, 3) == WANT
    # a removal reaches every broker
    ask(c, 1, build(K.ALTER_CLIENT_QUOTAS, validate_only=False, entries=[
        {"entity": [{"entity_type": "client-id", "entity_name": "app"}],
         "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]}]), 0)
    c.wait_for(lambda cl: all(len(b.core.quota_store.entries) == 1 for b in cl.brokers.values()), 10, "removed")
    assert described(c, 2) == WANT[:1]


def test_the_controller_counts_mutations_under_the_forwarding_clients_identity(kafka_cluster: ClusterThread) -> None:
    """A broker forwards CreateTopics, CreatePartitions and DeleteTopics in an envelope with
    its client's principal and client id: the controller counts them against that client's
    controller_mutation_rate and answers as Kafka 4.4's does (the single broker's sequence,
    checked against Apache Kafka 4.4.0 there)."""
    from test_quotas_mutation import mutation_sequence

    mutation_sequence(kafka_cluster.bootstrap)


def test_a_malformed_envelope_is_refused(kafka_cluster: ClusterThread) -> None:
    """An envelope whose request or principal does not decode, or that wraps a request the
    controller does not serve: INVALID_REQUEST, nothing handled."""
    import kproto
    from kproto.broker.security.tokens import encode_principal
    from kproto.error_codes import ErrorCode as E
    from kproto.framing import RequestHeader, encode_request

    controller = kafka_cluster.active_controller()
    host, port = kafka_cluster.inspect(lambda c: (c.controllers[controller].host, c.controllers[controller].port))

    async def envelope(body: Any) -> Any:
        async with await Connection.open(host, port) as conn:
            return await conn.request(body, 0)
    meta = kproto.request(K.METADATA).cls(topics=[], allow_auto_topic_creation=False)
    metadata = encode_request(RequestHeader(request_api_key=K.METADATA, request_api_version=12,
                                            correlation_id=1, client_id="c"), meta)[4:]
    for data, principal in [(b"\x00\x13\x00", encode_principal("User:alice", False)),   # a truncated header
                            (metadata, encode_principal("User:alice", False)),          # not a controller API
                            (metadata, b"\x00\x01\x05User\x00")]:           # a principal of no known version
        resp = asyncio.run(envelope(build(K.ENVELOPE, request_data=data, request_principal=principal,
                                          client_host_address=b"\x7f\x00\x00\x01")))
        assert (resp.error_code, resp.response_data) == (E.INVALID_REQUEST, None)
