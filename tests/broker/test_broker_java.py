"""The Java client (Apache Kafka's kafka-clients 3.9.1, Java 17) against kproto's broker on
127.0.0.1: admin operations, produce with every codec and acks (idempotent with acks=all), a
group of two members with commits and rebalances on join and leave (the classic protocol, and
KIP-848's group.protocol=consumer), a transactional producer
read at read_committed and read_uncommitted, and the consumer's incremental fetch sessions,
seen on the broker's side through a request hook (KIP-227: a non-zero session id, then
requests that carry only what changed).

The program is ``java/KprotoInterop.java`` (see ``java_interop``); it prints JSON lines that
are checked here against what the broker received."""
from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest

import java_interop as jv
from kproto.records import iter_batches
from kproto.schemas.api_keys import ApiKey

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ACKS = {"0": 0, "1": 1, "all": -1}


@pytest.fixture(scope="session")
def java_cp(tmp_path_factory):
    return jv.classpath(str(tmp_path_factory.mktemp("java")))


class Wire:
    """Requests as the broker received them (hooks that record and let everything through)."""

    def __init__(self, broker):
        self.fetches: dict[str, list[tuple]] = defaultdict(list)
        self.produces: list[tuple] = []
        broker.control(ApiKey.FETCH, self._fetch, times=None)
        broker.control(ApiKey.PRODUCE, self._produce, times=None)
        self.group_calls: Counter = Counter()
        for key in (ApiKey.JOIN_GROUP, ApiKey.CONSUMER_GROUP_HEARTBEAT):
            broker.control(key, self._group_call, times=None)

    def _group_call(self, header, body):
        self.group_calls[(header.request_api_key, header.client_id.rsplit("-", 1)[0])] += 1
        return None

    def _fetch(self, header, body):
        self.fetches[header.client_id].append((
            body.session_id, body.session_epoch, body.isolation_level,
            [(t.topic_id, p.partition, (p.fetch_offset, p.log_start_offset, p.partition_max_bytes,
                                        p.current_leader_epoch, p.last_fetched_epoch))
             for t in body.topics for p in t.partitions],
            [(t.topic_id, p) for t in body.forgotten_topics_data for p in t.partitions]))
        return None

    def _produce(self, header, body):
        for t in body.topic_data:
            for p in t.partition_data:
                for b in iter_batches(bytes(p.records)):
                    self.produces.append((header.client_id, body.acks, body.transactional_id,
                                          t.name, p.index, b.compression, b.producer_id, b.count))
        return None


def check_group(ev, phase, classic):
    """Members a, then a and b (two partitions each), a alone after b left, then c resuming at
    the commits: every record consumed exactly once, ownership as the protocol hands it over."""
    prefix = f"j-{phase}-"
    produced = {(a["partition"], a["offset"]): (a["key"], a["value"]) for a in ev(phase, "acked")}
    assert len(produced) == 280
    consumed = [(c["partition"], c["offset"], c["key"], c["value"]) for c in ev(phase, "consumed")]
    assert Counter((p, o) for p, o, _, _ in consumed).most_common(1)[0][1] == 1, "a record consumed twice"
    assert {(p, o): (k, v) for p, o, k, v in consumed} == produced
    by_member = Counter(c["member"] for c in ev(phase, "consumed"))
    assert by_member[prefix + "a"] >= 100 and by_member[prefix + "b"] >= 20   # b: ten of 200-240 in each of its two
    b_parts = {c["partition"] for c in ev(phase, "consumed") if c["member"] == prefix + "b"}
    assert len(b_parts) == 2
    # who owns what, after each callback
    changes = [(e["member"][len(prefix):], e["owned"])
               for e in sorted(ev(phase, "assigned") + ev(phase, "revoked"), key=lambda e: e["seq"])]
    owned = {}
    history = []
    for member, parts in changes:
        owned[member] = parts
        flat = [p for ps in owned.values() for p in ps]
        assert len(flat) == len(set(flat)), f"{phase}: a partition owned twice: {owned}"
        history.append({m: tuple(ps) for m, ps in owned.items() if ps})
    split = {"a": tuple(sorted({0, 1, 2, 3} - b_parts)), "b": tuple(sorted(b_parts))}
    assert history[0] == {"a": (0, 1, 2, 3)}
    assert split in history and history.index(split) > 0
    assert {"a": (0, 1, 2, 3)} in history[history.index(split):]
    assert history[-2:] == [{"c": (0, 1, 2, 3)}, {}]   # c, then c's own close
    if classic:   # eager: everything revoked, then the new assignment, at a higher generation
        generations = [e["generation"] for e in sorted(ev(phase, "assigned"), key=lambda e: e["seq"])]
        assert generations == sorted(generations) and len(set(generations)) >= 4
    ends = {p: 1 + max(o for q, o in produced if q == p) for p in range(4)}
    assert ev(phase, "committed")[0]["offsets"] == {str(p): e for p, e in ends.items()}
    (resumed,) = ev(phase, "resumed")
    assert resumed["positions"] == {str(p): e for p, e in ends.items()} and resumed["consumed_total"] == 280
    (group,) = ev(phase, "describe-group")
    assert group["state"] == "Stable"
    assert (group["type"], group["assignor"]) == (("Classic", "range") if classic else ("Consumer", "uniform"))
    assert group["members"] == [prefix + "c:[0, 1, 2, 3]"]
    assert group["offsets"] == {f"j-{phase}-{p}": e for p, e in ends.items()}


# KIP-848 members reconcile at each heartbeat: the fixture's 500 ms (TEST_DEFAULTS), not
# Kafka's 5 s interval, keeps this fast
def test_java_client_against_the_broker(kafka_broker, java_cp):
    wire = Wire(kafka_broker)
    started = time.monotonic()
    events = jv.run(java_cp, kafka_broker.bootstrap, "admin", "produce", "group", "group848", "session", "txn")
    for seq, e in enumerate(events):
        e["seq"] = seq
    elapsed = time.monotonic() - started
    assert elapsed < 60
    ev = lambda phase, event: jv.of(events, phase, event)  # noqa: E731

    # ---------------------------------------------------------------- admin
    (existing,) = ev("admin", "create-existing")
    assert existing["error"] == "TopicExistsException"
    (listed,) = ev("admin", "list-topics")
    assert {"j-codecs", "j-group", "j-group848", "j-session", "j-txn", "j-admin", "j-scratch"} <= set(listed["names"])
    described = {d["topic"]: d for d in ev("admin", "describe-topic")}
    assert {t: d["partitions"] for t, d in described.items()} == \
        {"j-codecs": 3, "j-group": 4, "j-group848": 4, "j-session": 3, "j-txn": 1, "j-admin": 2, "j-scratch": 1}
    assert all(d["leaders"] == [1] * d["partitions"] and not d["internal"] for d in described.values())
    (cluster,) = ev("admin", "describe-cluster")
    assert cluster["nodes"] == [kafka_broker.bootstrap + "/1"] and cluster["controller"] == 1
    assert cluster["cluster_id"] == kafka_broker.broker.core.logs.cluster_id
    (configs,) = ev("admin", "describe-configs")
    assert configs == {**configs, "retention.ms": "3600000", "source": "DYNAMIC_TOPIC_CONFIG",
                       "cleanup.policy": "delete"}
    assert ev("admin", "create-partitions")[0]["partitions"] == 3
    admin_acked = ev("admin", "acked")
    assert [(a["partition"], a["offset"]) for a in admin_acked] == [(2, i) for i in range(10)]
    assert ev("admin", "list-offsets")[0]["offsets"] == {
        "earliest": 0, "latest": 10, "max_timestamp_offset": 9, "max_timestamp": 1_700_000_009_000,
        "for_timestamp": 5}
    assert ev("admin", "delete-records")[0] == {**ev("admin", "delete-records")[0],
                                                "low_watermark": 4, "earliest": 4}
    assert ev("admin", "delete-topic")[0]["still_listed"] is False

    # ---------------------------------------------------------------- produce: codecs and acks
    acked = ev("produce", "acked")
    assert Counter((a["codec"], a["acks"]) for a in acked) == {(c, k): 30 for c in CODECS for k in ACKS}
    with_offsets = [(a["partition"], a["offset"]) for a in acked if a["acks"] != "0"]
    assert all(o >= 0 for _, o in with_offsets) and len(set(with_offsets)) == len(with_offsets)
    assert all(a["offset"] == -1 for a in acked if a["acks"] == "0")  # acks=0: no answer, no offset
    # on the wire: each producer's batches carry its codec and acks; idempotent ones a producer id
    for codec, ack in [(c, k) for c in CODECS for k in ACKS]:
        batches = [p for p in wire.produces if p[0] == f"j-produce-{codec}-{ack}"]
        assert sum(b[7] for b in batches) == 30, (codec, ack)
        assert {(b[1], b[3], b[5]) for b in batches} == {(ACKS[ack], "j-codecs", CODECS[codec])}
        assert all((b[6] >= 0) == (ack == "all") for b in batches), (codec, ack)
    # batching happened (linger.ms=5): fewer batches than records for at least some producers
    assert len([p for p in wire.produces if p[0].startswith("j-produce-")]) < 450

    # ---------------------------------------------------------------- groups: join, leave, commits
    check_group(ev, "group", classic=True)
    check_group(ev, "group848", classic=False)
    assert set(wire.group_calls) == {(ApiKey.JOIN_GROUP, "j-group"),
                                     (ApiKey.CONSUMER_GROUP_HEARTBEAT, "j-group848")}

    # ---------------------------------------------------------------- incremental fetch sessions
    topic_id = described["j-session"]["topic_id"]
    fetches = wire.fetches["j-session-consumer"]
    assert len(fetches) >= 10
    session_id, epoch, _, parts, forgotten = fetches[0]
    assert (session_id, epoch, forgotten) == (0, 0, [])  # a full fetch asking for a new session
    assert sorted(p for _, p, _ in parts) == [0, 1, 2]
    sid = fetches[1][0]
    assert sid != 0, "the broker granted no fetch session"
    view = {p: fields for _, p, fields in parts}   # the session's partitions, as the broker holds them
    idle = only_p1 = 0
    for i, (session_id, epoch, _, parts, forgotten) in enumerate(fetches[1:], start=1):
        assert session_id == sid
        if epoch == -1:           # the close at the end (FINAL_EPOCH)
            assert i == len(fetches) - 1
            continue
        assert epoch == i, "session epochs go up by one"
        assert all(str(t) == topic_id for t, _, _ in parts + [(t, p, None) for t, p in forgotten])
        for _, p, fields in parts:   # only what changed: a new partition or a changed position
            assert view.get(p) != fields, f"request {i} repeats partition {p} unchanged"
            view[p] = fields
        for _, p in forgotten:
            assert p in view
            del view[p]
        idle += not parts and not forgotten
        only_p1 += [p for _, p, _ in parts] == [1] and not forgotten
    assert idle >= 3, "idle incremental fetches name no partition"
    assert only_p1 >= 3, "a record in partition 1 is followed by fetches naming partition 1 alone"
    forgetting = [f for f in fetches if f[4]]
    assert [(f[3], [p for _, p in f[4]]) for f in forgetting] == [([], [2])]
    adding = [f for f in fetches if [p for _, p, _ in f[3]] == [2]]
    assert adding and adding[0][3][0][2][0] == 5  # partition 2 back, at the position sought
    (positions,) = ev("session", "positions")
    assert {str(p): f[0] for p, f in view.items()} == positions["positions"] == {"0": 10, "1": 13, "2": 10}

    # ---------------------------------------------------------------- transactions
    txn_acked = ev("txn", "acked")
    assert [a["offset"] for a in txn_acked] == list(range(0, 10)) + list(range(11, 21)) + list(range(22, 32))
    reads = {r["isolation"]: r for r in ev("txn", "read")}
    committed_keys = [a["key"] for a in txn_acked if a["outcome"] == "commit"]
    assert reads["read_committed"]["keys"] == committed_keys   # the aborted ten are not seen
    assert reads["read_uncommitted"]["keys"] == [a["key"] for a in txn_acked]
    assert reads["read_committed"]["end"] == reads["read_uncommitted"]["end"] == 33  # three markers
    assert ev("txn", "txn-offset")[0]["offset"] == 20
    assert {f[2] for f in wire.fetches["j-txn-read_committed"]} == {1}
    assert {f[2] for f in wire.fetches["j-txn-read_uncommitted"]} == {0}
    txn_batches = [p for p in wire.produces if p[0] == "j-txn-producer"]
    assert {b[2] for b in txn_batches} == {"j-txn-producer"} and all(b[6] >= 0 for b in txn_batches)
    # kafka-transactions.sh's view: the producer's three transactions ended committed
    [adm] = ev("txn", "txn-admin")
    assert "j-txn-producer=CompleteCommit" in adm["listed"]
    assert (adm["state"], adm["timeout_ms"], adm["partitions"]) == ("CompleteCommit", 30000, 0)
    assert {adm["producer_id"]} == {b[6] for b in txn_batches}
    [st] = adm["producers"]
    assert (st["producer_id"], st["epoch"], st["last_sequence"], st["open"]) == (
        adm["producer_id"], adm["epoch"], 29, False)  # 30 records over three transactions

    timings = {e["phase"]: e["ms"] for e in events if e["event"] == "done"}
    (client,) = ev("admin", "client")
    print(f"kafka-clients {client['version']} on Java {client['java']}: {elapsed:.1f} s in all, phases (ms) {timings}, fetch session {sid}: "
          f"{len(fetches)} fetches, {idle} idle, {only_p1} naming partition 1 alone")
