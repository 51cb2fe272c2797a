"""Consumer positions on the real peers: seek_to_beginning / seek_to_end, position, pause / resume."""
from __future__ import annotations

import pytest

from kproto.client.admin import Admin
from kproto.client.consumer import Consumer
from kproto.client.producer import Producer
from kproto.errors import KprotoError

from test_client_io_interop import cluster_for, consume_all, created_topic, run


@pytest.mark.apache
def test_seek_pause_resume(peer):
    topic = created_topic(peer, "positions")
    p0, p1 = (topic, 0), (topic, 1)

    async def main():
        async with await cluster_for(peer) as cluster:
            producer = await Producer(cluster).start()

            async def write(part, values):
                for v in values:
                    await producer.send(topic, v, partition=part)
                await producer.flush()

            await write(0, [b"a%d" % i for i in range(10)])
            await write(1, [b"b%d" % i for i in range(5)])
            consumer = await Consumer(cluster, [topic], auto_offset_reset="earliest").start()
            first = await consume_all(consumer, 15)
            assert consumer.position(*p0) == 10 and consumer.position(*p1) == 5

            await consumer.seek_to_beginning([p0])
            assert consumer.position(*p0) == 0 and consumer.position(*p1) == 5
            again = await consume_all(consumer, 10)

            consumer.pause(p1)
            assert consumer.paused() == {p1}
            await write(0, [b"a10"])
            await write(1, [b"b5", b"b6"])
            while_paused = await consume_all(consumer, 3, deadline_s=3)
            consumer.resume(p1)
            after_resume = await consume_all(consumer, 2)

            await write(0, [b"a11", b"a12"])
            await consumer.seek_to_end()
            ends = await Admin(cluster).list_offsets([p0, p1, (topic, 2)], "latest")
            at_end = {tp: consumer.position(*tp) for tp in ends}
            nothing = await consume_all(consumer, 1, deadline_s=2)
            with pytest.raises(KprotoError, match="not assigned"):
                consumer.pause((topic, 99))
            await producer.close()
            await consumer.close()
            return first, again, while_paused, after_resume, ends, at_end, nothing

    first, again, while_paused, after_resume, ends, at_end, nothing = run(main())
    assert sorted(r.value for r in first) == sorted([b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(5)])
    assert [(r.partition, r.value) for r in again] == [(0, b"a%d" % i) for i in range(10)]
    assert [(r.partition, r.value) for r in while_paused] == [(0, b"a10")]
    assert [(r.partition, r.value) for r in after_resume] == [(1, b"b5"), (1, b"b6")]
    assert at_end == ends
    if peer.name != "tansu":  # tansu's ListOffsets LATEST is not the high watermark (librdkafka
        # reads the same value: test_client_io_admin.py::test_list_offsets_agree_with_librdkafka)
        assert ends[p0] == 13 and nothing == []
