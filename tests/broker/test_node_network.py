"""The cluster's node-to-node network: real connections to a broker's listener, and the
faults a test injects (cut links lose requests and answers until the sender's timeout,
slow links delay both ways)."""
from __future__ import annotations

import asyncio
import time

import kproto
from kproto.broker import Broker, Intercept
from kproto.broker.cluster.network import NodeNetwork
from kproto.schemas.api_keys import ApiKey as K

ME, NODE = 99, 1


def metadata_body():
    return kproto.request(K.METADATA).cls(topics=None, allow_auto_topic_creation=False)


async def call(transport, api_key, version, body, timeout_ms=2000):
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    start = time.monotonic()
    transport.send(NODE, api_key, version, body, fut.set_result, timeout_ms)
    answer = await fut
    return answer, time.monotonic() - start


def test_requests_cuts_slow_links_and_healing(tmp_path):
    async def main():
        async with Broker(tmp_path / "d", num_partitions=1) as broker:
            host, port = broker.bootstrap.rsplit(":", 1)
            net = NodeNetwork()
            net.register(NODE, host, int(port))
            t = net.transport(ME)
            answer, _ = await call(t, K.METADATA, 12, metadata_body())
            assert answer is not None and [b.node_id for b in answer.brokers] == [broker.core.config.node_id]

            net.partition(ME, NODE)
            assert net.is_cut(NODE, ME)
            answer, took = await call(t, K.METADATA, 12, metadata_body(), timeout_ms=300)
            assert answer is None and 0.25 < took < 2.0        # no answer until the timeout, no reset
            assert net.lost == 1

            # an answer that arrives while the link is cut is lost too (the broker holds this
            # one back 400 ms)
            broker.control(K.METADATA, Intercept(delay_ms=400), times=1)
            net.heal()
            waiting = asyncio.ensure_future(call(t, K.METADATA, 12, metadata_body(), timeout_ms=1500))
            await asyncio.sleep(0.1)
            net.partition(ME, NODE)
            answer, took = await waiting
            assert answer is None and took > 1.2

            net.heal()
            net.slow(ME, NODE, 150)
            answer, took = await call(t, K.METADATA, 12, metadata_body())
            assert answer is not None and took >= 0.3           # delayed both ways
            net.slow(ME, NODE, 0)
            answer, took = await call(t, K.METADATA, 12, metadata_body())
            assert answer is not None and took < 0.3
            # a node that went away: no answer, then it is back on a new port
            await net.close()
        answer, _ = await call(t, K.METADATA, 12, metadata_body(), timeout_ms=300)
        assert answer is None
        async with Broker(tmp_path / "d", num_partitions=1) as again:
            host, port = again.bootstrap.rsplit(":", 1)
            net.register(NODE, host, int(port))
            answer, _ = await call(t, K.METADATA, 12, metadata_body())
            assert answer is not None
            await net.close()

    asyncio.run(main())


def test_healing_one_node_mends_its_links_alone():
    net = NodeNetwork()
    net.isolate(1, [1, 2, 3])
    net.partition(2, 3)
    net.slow(1, 2, 100)
    net.slow(2, 3, 100)
    net.heal(1)
    assert not net.is_cut(1, 2) and not net.is_cut(3, 1) and net.is_cut(2, 3)
    assert net._delay_ms == {frozenset((2, 3)): 100}
    net.heal()
    assert not net.is_cut(2, 3) and net._delay_ms == {}
