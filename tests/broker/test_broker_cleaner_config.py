"""The log cleaner's settings as Kafka runs them: ``log.cleaner.io.max.bytes.per.second``
throttles the cleaning (Kafka's Throttler), ``log.cleaner.threads`` rounds run at once on
different logs, and the ``log.cleaner.*`` configs Kafka reconfigures at run time are dynamic
broker configs (IncrementalAlterConfigs, cluster-wide default or per broker), described with
their source and taken without a restart."""
from __future__ import annotations

import time

import kproto
from kproto.broker.cleaner import Throttler
from kproto.broker.configs import BrokerConfig
from kproto.broker.retention import roll
from kproto.broker.core import BrokerCore
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K

from broker_support import Client
from test_broker_admin import configs_of, describe
from test_broker_compaction import kbatch
from test_broker_core import create

DYNAMIC_BROKER, DYNAMIC_DEFAULT_BROKER, STATIC_BROKER, DEFAULT = 2, 3, 4, 5
MB = 1024 * 1024


def alter(client, name, configs, rtype=4):
    req = kproto.request(K.INCREMENTAL_ALTER_CONFIGS).cls
    resp = client.call(K.INCREMENTAL_ALTER_CONFIGS, 1, resources=[req.AlterConfigsResource(
        resource_type=rtype, resource_name=name, configs=[
            req.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v)
            for k, v in configs.items()])])
    return [(r.error_code, r.error_message) for r in resp.responses]


def make_core(path, **config):
    return BrokerCore(str(path), BrokerConfig(**config))


def fill(core, topic, megabytes, partitions=1):
    """A compacted topic of ``partitions`` partitions, each ``megabytes`` MB of 1 KiB values over
    100 keys, in closed segments of 256 KiB."""
    create(Client(core), topic, partitions=partitions,
           configs={"cleanup.policy": "compact", "segment.bytes": str(256 * 1024)})
    value = b"v" * 1024
    for p in range(partitions):
        lg = core.logs.get(topic, p)
        i = 0
        while lg.total_bytes < megabytes * MB:
            lg.append_internal(kbatch([(b"k%d" % ((i + j) % 100), value) for j in range(50)],
                                      ts=1_700_000_000_000, base_offset=lg.log_end_offset))
            i += 50
        roll(lg)
    return core.logs.topics[topic]


def test_throttler_sleeps_until_the_rate_is_met_as_kafkas():
    now = [0.0]
    naps: list[float] = []

    def sleep(s):
        naps.append(s)
        now[0] += s
    t = Throttler(1000.0, check_interval_ms=300, clock=lambda: now[0], sleep=sleep)
    now[0] = 0.1
    t.maybe_throttle(500)          # within the first 300 ms: counted only
    assert naps == []
    now[0] = 0.4
    t.maybe_throttle(500)          # 1000 bytes in 0.4 s: 2500/s, sleeps until 1 s has passed
    assert naps == [1000 / 1000 - 0.4]
    now[0] += 0.5
    t.maybe_throttle(200)          # a new period: 200 bytes in 0.5 s is under the rate
    assert len(naps) == 1
    t.rate = 1.7976931348623157e308  # Kafka's default: no limit at all
    t.maybe_throttle(10**12)
    assert len(naps) == 1


def test_cleaning_at_a_limit_takes_at_least_its_bytes_over_the_limit(tmp_path):
    core = make_core(tmp_path / "d", log_cleaner_backoff_ms=3_600_000)
    client = Client(core)
    try:
        size = fill(core, "c", 2).logs[0].total_bytes
        # unthrottled first: how fast this machine cleans it
        t0 = time.monotonic()
        assert core.cleaner.clean_now(now=1_700_000_100_000)
        free = time.monotonic() - t0
        fill(core, "d", 2)
        limit = 4 * MB   # bytes read and written per second, all cleaner threads together
        assert alter(client, "", {"log.cleaner.io.max.bytes.per.second": str(limit)}) == [(0, None)]
        # Kafka checks the rate every 300 ms, so a round shorter than that is never slowed. A
        # check at every call makes the bound below hold however fast this machine cleans (with
        # 20 ms, a machine that cleaned the 2 MB in 21 ms was never slowed)
        core.cleaner.throttler.check_interval = 0.0
        t0 = time.monotonic()
        assert core.cleaner.clean_now(now=1_700_000_100_000)
        took = time.monotonic() - t0
        # the round read the 2 MB twice (the offset map, then the copy) and wrote what it kept:
        # at least size / limit seconds (within 10%)
        assert took >= 0.9 * size / limit, (took, free)
        assert core.cleaner.throttler.slept > 0
        assert core.logs.get("d", 0).total_bytes < size / 10   # and it did clean
    finally:
        core.close()


def test_cleaner_configs_are_dynamic_and_described_with_their_source(tmp_path):
    core = make_core(tmp_path / "d", log_cleaner_backoff_ms=60_000)
    client = Client(core)
    try:
        b = configs_of(describe(client, "1", rtype=4))
        assert (b["log.cleaner.threads"].value, b["log.cleaner.threads"].config_source) == ("1", DEFAULT)
        assert (b["log.cleaner.io.max.bytes.per.second"].value,
                b["log.cleaner.io.max.bytes.per.second"].config_source) == ("1.7976931348623157E308", DEFAULT)
        assert (b["log.cleaner.backoff.ms"].value, b["log.cleaner.backoff.ms"].config_source) == ("60000", STATIC_BROKER)
        assert alter(client, "", {"log.cleaner.threads": "2", "log.cleaner.io.max.bytes.per.second": "1048576",
                                  "log.cleaner.dedupe.buffer.size": "33554432",
                                  "log.cleaner.backoff.ms": "500"}) == [(0, None)]
        # taken at once, without a restart
        cfg = core.cleaner.config
        assert (cfg.threads, cfg.max_io_bytes_per_second, cfg.dedupe_buffer_size, cfg.backoff_ms) == (
            2, 1048576.0, 33554432, 500)
        assert core.cleaner.throttler.rate == 1048576.0
        b = configs_of(describe(client, "1", rtype=4))
        e = b["log.cleaner.io.max.bytes.per.second"]
        assert (e.value, e.config_source) == ("1048576", DYNAMIC_DEFAULT_BROKER)
        assert [(s.name, s.value, s.source) for s in e.synonyms] == [
            ("log.cleaner.io.max.bytes.per.second", "1048576", DYNAMIC_DEFAULT_BROKER),
            ("log.cleaner.io.max.bytes.per.second", "1.7976931348623157E308", DEFAULT)]
        assert {(c.name, c.value, c.config_source) for c in describe(client, "", rtype=4).configs} >= {
            ("log.cleaner.threads", "2", DYNAMIC_DEFAULT_BROKER)}
        # this broker's own value wins over the cluster-wide default
        assert alter(client, "1", {"log.cleaner.threads": "3"}) == [(0, None)]
        assert core.cleaner.config.threads == 3
        e = configs_of(describe(client, "1", rtype=4))["log.cleaner.threads"]
        assert (e.value, e.config_source) == ("3", DYNAMIC_BROKER)
        # bad values are refused as Kafka's ConfigDef refuses them
        code, message = alter(client, "", {"log.cleaner.threads": "-1"})[0]
        assert code == E.INVALID_CONFIG and "log.cleaner.threads" in message
        code, _ = alter(client, "", {"log.cleaner.io.max.bytes.per.second": "fast"})[0]
        assert code == E.INVALID_CONFIG
        assert core.cleaner.config.threads == 3
        # kept in the metadata log: back after a restart
        core.close()
        core = make_core(tmp_path / "d", log_cleaner_backoff_ms=60_000)
        assert (core.cleaner.config.threads, core.cleaner.config.max_io_bytes_per_second) == (3, 1048576.0)
        # deleted: back to the start-up setting
        client = Client(core)
        assert alter(client, "", {"log.cleaner.backoff.ms": None}) == [(0, None)]
        assert core.cleaner.config.backoff_ms == 60_000
    finally:
        core.close()


def test_log_cleaner_threads_clean_that_many_logs_at_once(tmp_path):
    core = make_core(tmp_path / "d", log_cleaner_backoff_ms=3_600_000)
    try:
        fill(core, "c", 1, partitions=3)
        cleaner = core.cleaner
        assert cleaner.start_round(now=1_700_000_100_000)
        assert not cleaner.start_round(now=1_700_000_100_000)   # one thread: one round at a time
        # at most double the current count at a time, as Kafka's LogCleaner takes it
        assert alter(Client(core), "", {"log.cleaner.threads": "2"}) == [(0, None)]
        assert alter(Client(core), "", {"log.cleaner.threads": "3"}) == [(0, None)]
        assert cleaner.start_round(now=1_700_000_100_000) and cleaner.start_round(now=1_700_000_100_000)
        assert len(cleaner.jobs) == 3 and len({j.ltc.log.partition for j in cleaner.jobs.values()}) == 3
        # each round's offset map has its share of the dedupe buffer
        assert {j.map.slots for j in list(cleaner.jobs.values())[1:]} == {134217728 // 3 // 24}
        assert not cleaner.start_round(now=1_700_000_100_000)   # no log left that is not being cleaned
        cleaner.wait()
        assert cleaner.rounds == 3 and not cleaner.jobs
    finally:
        core.close()


#: (resource, log.cleaner.threads or None to delete, error code, the threads the broker runs
#: with afterwards): Kafka's LogCleaner takes at least half and at most double its current
#: count, whether it is set for the broker or as the cluster default
THREADS_STEPS = [
    ("{node}", "3", E.INVALID_REQUEST, 1), ("{node}", "2", 0, 2), ("{node}", "5", E.INVALID_REQUEST, 2),
    ("{node}", "4", 0, 4), ("{node}", "1", E.INVALID_REQUEST, 4), ("{node}", "0", E.INVALID_REQUEST, 4),
    ("", "8", 0, 4),                     # the broker's own value stays: nothing changes for it
    ("{node}", "2", 0, 2),
    ("{node}", None, E.INVALID_REQUEST, 2),  # it would run with the default, 8
    ("", "3", 0, 2), ("{node}", None, 0, 3), ("", "1", 0, 1), ("", None, 0, 1),
]


def test_log_cleaner_threads_change_by_at_most_a_factor_of_two_as_kafkas(any_broker):
    """The same IncrementalAlterConfigs steps on Kafka 4.4.0 and kproto: the same answers."""
    import asyncio

    from kproto.client.connection import Connection
    from kproto.conformance.scenario import build

    host, port = any_broker.bootstrap.split(",")[0].rsplit(":", 1)

    async def ask(key, version, **body):
        async with await Connection.open(host, int(port)) as conn:
            return await conn.request(build(key, **body), version)

    node = str(asyncio.run(ask(K.METADATA, 12, topics=[])).brokers[0].node_id)

    def running() -> str:
        resp = asyncio.run(ask(K.DESCRIBE_CONFIGS, 4, include_synonyms=False, include_documentation=False,
                               resources=[{"resource_type": 4, "resource_name": node,
                                           "configuration_keys": ["log.cleaner.threads"]}]))
        return resp.results[0].configs[0].value

    answers = []
    for resource, value, code, after in THREADS_STEPS:
        resp = asyncio.run(ask(K.INCREMENTAL_ALTER_CONFIGS, 1, validate_only=False, resources=[{
            "resource_type": 4, "resource_name": resource.format(node=node), "configs": [{
                "name": "log.cleaner.threads", "config_operation": 0 if value is not None else 1,
                "value": value}]}]))
        answers.append((resp.responses[0].error_code, resp.responses[0].error_message))
        deadline = time.monotonic() + 10  # Kafka's broker applies a change once its record is in
        while running() != str(after) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert [code for code, _ in answers] == [code for _, _, code, _ in THREADS_STEPS]
    more = "Invalid value org.apache.kafka.common.config.ConfigException: Log cleaner threads cannot be "
    assert answers[0][1] == more + "increased to more than double the current value 1 for configuration " \
        "Invalid dynamic configuration"
    assert answers[4][1] == more + "reduced to less than half the current value 4 for configuration " \
        "Invalid dynamic configuration"
    assert answers[5][1] == "/ by zero"  # Kafka's message for 0 (its cleaner config divides by it)
    assert running() == "1"
