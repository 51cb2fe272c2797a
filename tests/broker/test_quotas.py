"""Client quotas on the sans-I/O core: Kafka's sampled rate and throttle time, the order of
precedence of quota entities, AlterClientQuotas' validation and DescribeClientQuotas' filters,
the quotas kept across a restart, and throttled Produce and Fetch answers (throttle_time_ms,
the connection muted, a throttled fetch answered empty)."""
from __future__ import annotations

from typing import Any, Optional

import pytest

from kproto.broker.quotas import (CLIENT_ID, PRODUCER_BYTE_RATE, USER, ClientQuotaManager, QuotaStore,
                                  SampledRate, make_entity)
from kproto.broker.timer import FakeClock
from kproto.conformance.scenario import build
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K

from tests.broker.broker_support import Client, Recorder, batch, fake_core, metadata_on_disk


# ------------------------------------------------------------------ rates
def test_a_first_burst_is_measured_over_the_whole_window_as_kafka_does() -> None:
    r = SampledRate(samples=11, window_ms=1000)
    r.record(2000, 0)
    # 10 earlier windows assumed empty: 2000 bytes over 10 s
    assert r.window_size_ms(0) == 10_000 and r.measure(0) == pytest.approx(200.0)
    r.record(3000, 500)
    assert r.window_size_ms(500) == 10_500 and r.measure(500) == pytest.approx(5000 / 10.5)


def test_samples_older_than_the_window_are_forgotten() -> None:
    r = SampledRate(samples=11, window_ms=1000)
    r.record(50_000, 0)
    assert r.measure(10_999) > 0
    assert r.measure(11_000) == 0.0  # every sample idle for 11 windows is reset


def test_throttle_time_is_the_excess_over_the_quota_times_the_window() -> None:
    store = QuotaStore()
    store.apply(make_entity([(CLIENT_ID, "c")]), PRODUCER_BYTE_RATE, 1000.0)
    m = ClientQuotaManager(PRODUCER_BYTE_RATE, store)
    assert m.record("ANONYMOUS", "c", 5000, 0) == 0  # 500 B/s over the assumed 10 s
    # 25000 B over 10 s = 2500 B/s: (2500 - 1000) / 1000 * 10000 ms
    assert m.record("ANONYMOUS", "c", 20_000, 0) == 15_000
    assert m.record("ANONYMOUS", "other", 1 << 30, 0) == 0  # no quota for that client


PRECEDENCE = [
    ([(USER, "u"), (CLIENT_ID, "c")], ("u", "c")),
    ([(USER, "u"), (CLIENT_ID, None)], ("u", "c")),
    ([(USER, "u")], ("u", "")),
    ([(USER, None), (CLIENT_ID, "c")], ("u", "c")),
    ([(USER, None), (CLIENT_ID, None)], ("u", "c")),
    ([(USER, None)], ("u", "")),
    ([(CLIENT_ID, "c")], ("", "c")),
    ([(CLIENT_ID, None)], ("", "c")),
]


def test_quotas_apply_in_kafkas_order_of_precedence() -> None:
    store = QuotaStore()
    m = ClientQuotaManager(PRODUCER_BYTE_RATE, store)
    assert m.quota("u", "c") == (None, ("", ""))
    # configured from the least specific up: each new level wins over the ones before
    for n, (pairs, tags) in enumerate(reversed(PRECEDENCE)):
        store.apply(make_entity(pairs), PRODUCER_BYTE_RATE, float(n + 1))
        assert m.quota("u", "c") == (float(n + 1), tags), pairs
    # and removed from the most specific down, the next level takes over
    for n, (pairs, tags) in enumerate(PRECEDENCE[:-1]):
        store.apply(make_entity(pairs), PRODUCER_BYTE_RATE, None)
        assert m.quota("u", "c")[1] == PRECEDENCE[n + 1][1]
    assert m.quota("u", "other") == (1.0, ("", "other"))  # the default client id's


# ------------------------------------------------------------------ the APIs
def entity(*pairs: tuple[str, Optional[str]]) -> list[dict[str, Any]]:
    return [{"entity_type": t, "entity_name": n} for t, n in pairs]


def op(key: str, value: float = 0.0, remove: bool = False) -> dict[str, Any]:
    return {"key": key, "value": value, "remove": remove}


def alter(client: Client, *entries: tuple[list[dict[str, Any]], list[dict[str, Any]]],
          validate_only: bool = False, version: int = 1) -> list[tuple[int, list[tuple[str, str]]]]:
    i = client.send(K.ALTER_CLIENT_QUOTAS, version, build(K.ALTER_CLIENT_QUOTAS, validate_only=validate_only,
                    entries=[{"entity": e, "ops": o} for e, o in entries]))
    r = client.answer(i)
    return sorted((x.error_code, sorted((d.entity_type, d.entity_name or "<default>") for d in x.entity))
                  for x in r.entries)


def describe(client: Client, *components: tuple[str, int, Optional[str]], strict: bool = False,
             version: int = 1) -> Any:
    i = client.send(K.DESCRIBE_CLIENT_QUOTAS, version, build(K.DESCRIBE_CLIENT_QUOTAS, strict=strict,
                    components=[{"entity_type": t, "match_type": m, "match": s} for t, m, s in components]))
    r = client.answer(i)
    if r.error_code:
        return r.error_code
    return sorted((tuple(sorted((d.entity_type, d.entity_name or "<default>") for d in x.entity)),
                   tuple(sorted((v.key, v.value) for v in x.values))) for x in r.entries)


@pytest.fixture
def client(tmp_path: Any) -> Client:
    return Client(fake_core(tmp_path, FakeClock()))


def test_alter_then_describe_with_every_match_type(client: Client) -> None:
    ok = alter(client, (entity((USER, "alice")), [op("producer_byte_rate", 1024)]),
               (entity((USER, "alice"), (CLIENT_ID, "app")), [op("consumer_byte_rate", 2048),
                                                            op("request_percentage", 12.5)]),
               (entity((CLIENT_ID, None)), [op("producer_byte_rate", 100)]),
               (entity((IP, "127.0.0.1")), [op("connection_creation_rate", 10)]))
    assert [code for code, _ in ok] == [0, 0, 0, 0]
    alice = (("user", "alice"),)
    alice_app = (("client-id", "app"), ("user", "alice"))
    assert describe(client, (USER, 0, "alice")) == [
        (alice_app, (("consumer_byte_rate", 2048.0), ("request_percentage", 12.5))),
        (alice, (("producer_byte_rate", 1024.0),))]
    assert describe(client, (USER, 0, "alice"), strict=True) == [(alice, (("producer_byte_rate", 1024.0),))]
    assert describe(client, (CLIENT_ID, 1, None)) == [((("client-id", "<default>"),),
                                                      (("producer_byte_rate", 100.0),))]
    assert [e for e, _ in describe(client, (CLIENT_ID, 2, None))] == [(("client-id", "<default>"),), alice_app]
    assert len(describe(client)) == 4 and describe(client, strict=True) == []
    assert describe(client, (IP, 2, None)) == [((("ip", "127.0.0.1"),), (("connection_creation_rate", 10.0),))]
    # removed: an entity left without keys is gone
    assert alter(client, (entity((USER, "alice")), [op("producer_byte_rate", remove=True)]))[0][0] == 0
    assert describe(client, (USER, 0, "alice"), strict=True) == []


IP = "ip"


@pytest.mark.parametrize("entry, code", [
    ((entity(), [op("producer_byte_rate", 1)]), E.INVALID_REQUEST),                      # no entity
    ((entity(("group", "g")), [op("producer_byte_rate", 1)]), E.INVALID_REQUEST),        # unknown type
    ((entity((USER, "")), [op("producer_byte_rate", 1)]), E.INVALID_REQUEST),            # empty name
    ((entity((USER, "u"), (IP, "1.2.3.4")), [op("producer_byte_rate", 1)]), E.INVALID_REQUEST),
    ((entity((USER, "u")), [op("nope", 1)]), E.INVALID_REQUEST),                         # unknown key
    ((entity((USER, "u")), [op("producer_byte_rate", 1.5)]), E.INVALID_REQUEST),         # not a long
    ((entity((CLIENT_ID, "c")), [op("connection_creation_rate", 1)]), E.INVALID_REQUEST),
    ((entity((IP, "not a host name")), [op("connection_creation_rate", 1)]), E.INVALID_REQUEST),
    ((entity((USER, "u")), [op("producer_byte_rate", 1), op("producer_byte_rate", 2)]), E.INVALID_REQUEST),
    ((entity((USER, "u")), [op("producer_byte_rate", 0)]), E.INVALID_REQUEST),          # not positive
    ((entity((USER, "u")), [op("producer_byte_rate", 1e30)]), E.INVALID_REQUEST),       # beyond a long
    ((entity((IP, None)), [op("connection_creation_rate", 2.5)]), E.INVALID_REQUEST),
    ((entity((USER, "u")), [op("nope", 1), op("producer_byte_rate", 2)]), E.INVALID_REQUEST),
    ((entity((USER, "u")), [op("request_percentage", 1.5)]), E.NONE),
    ((entity((IP, None)), [op("connection_creation_rate", 3)]), E.NONE),
])
def test_alter_checks_entities_keys_and_values_as_kafkas_controller(client: Client, entry: Any, code: int) -> None:
    assert alter(client, entry)[0][0] == code
    if code:
        assert describe(client) == []  # nothing changed


def test_validate_only_changes_nothing(client: Client) -> None:
    assert alter(client, (entity((USER, "u")), [op("producer_byte_rate", 1)]), validate_only=True)[0][0] == 0
    assert describe(client) == []


@pytest.mark.parametrize("components, code", [
    ([("", 0, "x")], E.INVALID_REQUEST),
    ([(USER, 0, "a"), (USER, 2, None)], E.INVALID_REQUEST),
    ([("group", 0, "g")], E.UNSUPPORTED_VERSION),
    ([(USER, 0, None)], E.INVALID_REQUEST),
    ([(USER, 1, "a")], E.INVALID_REQUEST),
    ([(USER, 2, "a")], E.INVALID_REQUEST),
    ([(USER, 7, None)], E.INVALID_REQUEST),
    ([(IP, 2, None), (USER, 2, None)], E.INVALID_REQUEST),
])
def test_describe_refuses_bad_filters_as_kafka(client: Client, components: Any, code: int) -> None:
    assert describe(client, *components) == code


def test_quotas_are_kept_in_the_metadata_log_across_a_restart(tmp_path: Any) -> None:
    clock = FakeClock()
    core = fake_core(tmp_path, clock)
    alter(Client(core), (entity((USER, None), (CLIENT_ID, "c")), [op("producer_byte_rate", 5)]))
    core.close()
    # kept as Kafka keeps them: a ClientQuotaRecord of the node's own metadata log
    on_disk = metadata_on_disk(tmp_path)
    assert on_disk.client_quotas == {(("client-id", "c"), ("user", None)): {"producer_byte_rate": 5.0}}
    again = Client(fake_core(tmp_path, clock))
    assert describe(again) == [((("client-id", "c"), ("user", "<default>")), (("producer_byte_rate", 5.0),))]


# ------------------------------------------------------------------ throttling
class MutedRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.muted: list[int] = []

    def mute(self, throttle_ms: int) -> None:
        self.muted.append(throttle_ms)


def produce(client: Client, topic: str, values: list[bytes], acks: int = 1) -> Any:
    i = client.send(K.PRODUCE, 9, build(K.PRODUCE, 9, acks=acks, timeout_ms=1000, topic_data=[
        {"name": topic, "partition_data": [{"index": 0, "records": batch(values)}]}]))
    return client.answer(i) if acks else None


def test_a_producer_over_its_byte_rate_is_throttled_and_muted(tmp_path: Any) -> None:
    clock = FakeClock()
    client = Client(fake_core(tmp_path, clock))
    client.channel = MutedRecorder()
    client.send(K.CREATE_TOPICS, 5, build(K.CREATE_TOPICS, 5, timeout_ms=1000, validate_only=False, topics=[
        {"name": "t", "num_partitions": 1, "replication_factor": 1}]))
    alter(client, (entity((CLIENT_ID, "test")), [op("producer_byte_rate", 1000)]))
    first = produce(client, "t", [b"x" * 100])
    assert first.throttle_time_ms == 0 and client.channel.muted == []
    big = produce(client, "t", [b"x" * 30_000])
    assert big.responses[0].partition_responses[0].error_code == 0  # appended all the same
    assert big.throttle_time_ms > 10_000 and client.channel.muted == [big.throttle_time_ms]
    # an acks=0 produce has no answer; its connection is muted
    produce(client, "t", [b"x" * 30_000], acks=0)
    assert len(client.channel.muted) == 2 and client.channel.muted[1] > big.throttle_time_ms
    # another client id is not throttled
    clock.advance(1)
    assert client.core.quotas.produce.record("ANONYMOUS", "someone-else", 1 << 20, clock.now_ms()) == 0


def test_a_consumer_over_its_byte_rate_gets_an_empty_throttled_answer(tmp_path: Any) -> None:
    clock = FakeClock()
    client = Client(fake_core(tmp_path, clock))
    client.channel = MutedRecorder()
    client.send(K.CREATE_TOPICS, 5, build(K.CREATE_TOPICS, 5, timeout_ms=1000, validate_only=False, topics=[
        {"name": "t", "num_partitions": 1, "replication_factor": 1}]))
    produce(client, "t", [b"y" * 8_000])
    alter(client, (entity((CLIENT_ID, None)), [op("consumer_byte_rate", 1000)]))

    def fetch() -> Any:
        return client.answer(client.send(K.FETCH, 12, build(K.FETCH, 12, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=[
                               {"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                              "partition_max_bytes": 1 << 20}]}],
                           forgotten_topics_data=[], rack_id="")))
    first = fetch()  # 8 kB over the 10 s a first rate is measured over: within 1000 B/s
    assert first.throttle_time_ms == 0 and len(first.responses[0].partitions[0].records) > 8_000
    second = fetch()  # over: empty, throttled, its bytes not counted
    assert second.throttle_time_ms > 0 and second.responses == [] and second.error_code == 0
    third = fetch()
    assert third.throttle_time_ms == second.throttle_time_ms


def test_request_percentage_throttles_handler_time(tmp_path: Any) -> None:
    clock = FakeClock()
    client = Client(fake_core(tmp_path, clock))
    alter(client, (entity((USER, "ANONYMOUS")), [op("request_percentage", 0.0001)]))
    r = client.answer(client.send(K.METADATA, 12, build(K.METADATA, 12, topics=[], allow_auto_topic_creation=False)))
    assert r.throttle_time_ms > 0
    # ApiVersions is exempt
    assert client.call(K.API_VERSIONS, 3, client_software_name="t", client_software_version="1").throttle_time_ms == 0


# ------------------------------------------------------------------ the metadata image
def test_the_metadata_image_replays_and_snapshots_client_quota_records() -> None:
    from kproto.broker.quotas import quota_record
    from kproto.storage.metadata_image import MetadataImage, encode_metadata_record

    image = MetadataImage()
    alice = make_entity([(USER, "alice"), (CLIENT_ID, None)])
    ip = make_entity([(IP, "10.0.0.1")])
    for i, (ent, key, value) in enumerate([(alice, "producer_byte_rate", 1024.0), (alice, "request_percentage", 5.5),
                                           (ip, "connection_creation_rate", 3.0)]):
        image.replay_value(encode_metadata_record(quota_record(ent, key, value), 0), i)
    assert image.take_changes().client_quotas
    assert image.client_quotas == {alice: {"producer_byte_rate": 1024.0, "request_percentage": 5.5},
                                   ip: {"connection_creation_rate": 3.0}}
    image.replay_value(encode_metadata_record(quota_record(ip, "connection_creation_rate", None), 0), 9)
    assert image.take_changes().client_quotas and ip not in image.client_quotas
    # a snapshot's records give them back, after the configs as in Kafka's image
    again = MetadataImage()
    for obj, v in image.records():
        again.replay_value(encode_metadata_record(obj, v), 0)
    assert again.client_quotas == image.client_quotas
    assert [type(o).__name__ for o, _ in image.records()] == ["ClientQuotaRecord"] * 2
    again.note_changes_since(MetadataImage())
    assert again.take_changes().client_quotas


def test_a_followers_fetch_is_never_throttled(tmp_path: Any) -> None:
    clock = FakeClock()
    client = Client(fake_core(tmp_path, clock))
    alter(client, (entity((USER, None)), [op("request_percentage", 0.0001), op("consumer_byte_rate", 1)]))

    def fetch(replica_id: int) -> Any:
        return client.answer(client.send(K.FETCH, 12, build(K.FETCH, 12, replica_id=replica_id, max_wait_ms=0,
                                                            min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                                                            session_id=0, session_epoch=-1, topics=[],
                                                            forgotten_topics_data=[], rack_id="")))
    assert fetch(-1).throttle_time_ms > 0   # a consumer under the default user's quotas
    assert fetch(2).throttle_time_ms == 0   # a follower (broker 2)


def test_without_cluster_rights_quotas_are_neither_described_nor_altered(tmp_path: Any) -> None:
    client = Client(fake_core(tmp_path, FakeClock(), authorizer=True))
    assert describe(client) == E.CLUSTER_AUTHORIZATION_FAILED  # DESCRIBE_CONFIGS on the cluster
    assert alter(client, (entity((USER, "u")), [op("producer_byte_rate", 1)]),
                 (entity((CLIENT_ID, "c")), [op("producer_byte_rate", 1)])) == [
        (E.CLUSTER_AUTHORIZATION_FAILED, [("client-id", "c")]),
        (E.CLUSTER_AUTHORIZATION_FAILED, [("user", "u")])]       # ALTER_CONFIGS on the cluster
    assert client.core.quota_store.entries == {}
