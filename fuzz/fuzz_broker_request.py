"""Fuzz the broker's request handler (kproto.broker.core.BrokerCore) with mutated request frames.

The first byte picks a template request (one valid frame per implemented API, encoded by
kproto's codecs) and how the rest is used: as the template's whole body after its header, or
written over the template at a position. The frame goes to one BrokerCore (fake clock, a topic
with data, a group) that lives across inputs (renewed every ``RENEW`` inputs in a fresh
directory). The promise: no exception escapes ``BrokerCore.handle``; the channel gets at most
one answer or a close per request; after the fake clock runs past every wait, every request
has been answered or its connection closed, and an ApiVersions request on a new connection is
answered (the broker keeps serving).

Nothing may escape. Run: ``python fuzz/fuzz_broker_request.py -runs=2000``.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from typing import Any, Optional

import atheris

# runnable from a checkout without installing kproto
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

with atheris.instrument_imports():
    import kproto
    from kproto.broker.configs import BrokerConfig
    from kproto.broker.core import BrokerCore
    from kproto.broker.log import LogConfig
    from kproto.broker.timer import FakeClock
    from kproto.framing import RequestHeader, encode_request, request_header_version
    from kproto.records import RecordBatchBuilder
    from kproto.schemas.api_keys import ApiKey as K

RENEW = 300  # inputs per core: the directory and the in-memory state stay small


class _Channel:
    def __init__(self) -> None:
        self.answers = 0
        self.closed: Optional[str] = None

    def respond(self, frame: Optional[bytes]) -> None:
        assert self.closed is None, "answered after the close"
        self.answers += 1

    def close(self, reason: str) -> None:
        self.closed = reason


def _batch() -> bytes:
    b = RecordBatchBuilder(base_offset=0)
    for i in range(3):
        b.append(1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i, [])
    return b.build()


def _frame(key: int, version: int, **fields: Any) -> bytes:
    header = RequestHeader(request_api_key=key, request_api_version=version, correlation_id=7,
                           client_id="fuzz")
    return encode_request(header, kproto.request(key).cls(**fields))[4:]


def _templates() -> list[bytes]:
    R = lambda k: kproto.request(k).cls  # noqa: E731
    p, f, lo, cf = R(K.PRODUCE), R(K.FETCH), R(K.LIST_OFFSETS), R(K.DESCRIBE_CONFIGS)
    ia, dr, cp, ct = R(K.INCREMENTAL_ALTER_CONFIGS), R(K.DELETE_RECORDS), R(K.CREATE_PARTITIONS), R(K.CREATE_TOPICS)
    jg, oc = R(K.JOIN_GROUP), R(K.OFFSET_COMMIT)
    return [
        _frame(K.API_VERSIONS, 3, client_software_name="f", client_software_version="1"),
        _frame(K.METADATA, 12, topics=None, allow_auto_topic_creation=True),
        _frame(K.PRODUCE, 9, acks=-1, timeout_ms=100, topic_data=[p.TopicProduceData(
            name="t", partition_data=[p.PartitionProduceData(index=0, records=_batch())])]),
        _frame(K.FETCH, 12, max_wait_ms=50, min_bytes=1, max_bytes=1 << 16, session_id=0, session_epoch=0,
               topics=[f.FetchTopic(topic="t", partitions=[f.FetchPartition(
                   partition=0, fetch_offset=0, partition_max_bytes=1 << 16)])]),
        _frame(K.LIST_OFFSETS, 7, replica_id=-1, topics=[lo.ListOffsetsTopic(
            name="t", partitions=[lo.ListOffsetsPartition(partition_index=0, timestamp=-2)])]),
        _frame(K.CREATE_TOPICS, 7, timeout_ms=100, topics=[ct.CreatableTopic(
            name="n", num_partitions=2, replication_factor=1, configs=[
                ct.CreatableTopicConfig(name="retention.ms", value="1000")])]),
        _frame(K.CREATE_PARTITIONS, 3, timeout_ms=100, topics=[cp.CreatePartitionsTopic(
            name="t", count=3, assignments=None)]),
        _frame(K.DESCRIBE_CONFIGS, 4, include_synonyms=True, resources=[
            cf.DescribeConfigsResource(resource_type=2, resource_name="t", configuration_keys=None)]),
        _frame(K.INCREMENTAL_ALTER_CONFIGS, 1, resources=[ia.AlterConfigsResource(
            resource_type=2, resource_name="t", configs=[
                ia.AlterableConfig(name="cleanup.policy", config_operation=2, value="compact")])]),
        _frame(K.DELETE_RECORDS, 2, timeout_ms=100, topics=[dr.DeleteRecordsTopic(
            name="t", partitions=[dr.DeleteRecordsPartition(partition_index=0, offset=1)])]),
        _frame(K.DESCRIBE_LOG_DIRS, 4, topics=None),
        _frame(K.DESCRIBE_CLUSTER, 1, endpoint_type=1),
        _frame(K.JOIN_GROUP, 9, group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
               member_id="", protocol_type="consumer", reason=None, protocols=[
                   jg.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")]),
        _frame(K.OFFSET_COMMIT, 9, group_id="g", generation_id_or_member_epoch=-1, member_id="",
               topics=[oc.OffsetCommitRequestTopic(name="t", partitions=[
                   oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
        _frame(K.INIT_PRODUCER_ID, 5, transactional_id=None, transaction_timeout_ms=1000),
    ]


class _State:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="fuzz_broker_")
        self.clock = FakeClock(1_000)
        clock = self.clock
        self.core = BrokerCore(self.dir, BrokerConfig(
            port=9092, group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=2,
            transaction_state_num_partitions=2, max_partitions_per_request=16,
            log=LogConfig(segment_bytes=4096)), clock=clock,
            wall_clock=lambda: 1_700_000_000_000 + clock.now_ms())
        self.inputs = 0
        for frame in TEMPLATES[:3]:  # a topic with a batch in it
            self.core.handle(_Channel(), frame)

    def close(self) -> None:
        self.core.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TEMPLATES = _templates()
PING = TEMPLATES[0]
_state: Optional[_State] = None


def _current() -> _State:
    global _state
    if _state is None or _state.inputs >= RENEW:
        if _state is not None:
            _state.close()
        _state = _State()
    _state.inputs += 1
    return _state


@atexit.register
def _cleanup() -> None:
    if _state is not None:
        _state.close()


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    st = _current()
    template = TEMPLATES[data[0] % len(TEMPLATES)]
    rest = data[1:]
    if data[0] & 0x80:
        # the template's header (key, version, correlation id, client id) with a fuzzed body
        key, ver = int.from_bytes(template[:2], "big"), int.from_bytes(template[2:4], "big")
        frame = template[:14 + (request_header_version(key, ver) == 2)] + rest
    else:
        pos = (rest[0] if rest else 0) % (len(template) + 1)
        body = rest[1:]
        frame = template[:pos] + body + template[pos + len(body):]
    channel = _Channel()
    st.core.handle(channel, frame)
    assert channel.answers <= 1
    # every wait (long polls, rebalances, hooks) ends within a minute of fake time
    for _ in range(4):
        st.clock.advance(15_000)
        st.core.advance_clock()
    assert channel.answers == 1 or channel.closed is not None, "a request left unanswered"
    ping = _Channel()
    st.core.handle(ping, PING)
    assert ping.answers == 1 and ping.closed is None, "the broker stopped answering"


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
