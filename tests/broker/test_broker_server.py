"""The asyncio server: hooks seen by real clients, rude connections, the command line."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import kproto.storage as ks
from kproto.broker import Broker, Intercept
from kproto.error_codes import ErrorCode as E
from kproto.schemas.api_keys import ApiKey as K


def run(coro, timeout=30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def records_of(data_dir, topic):
    table = ks.read_arrow(str(data_dir), topics=[topic])
    return sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(),
                      table.column("key").to_pylist(), table.column("value").to_pylist()))


def test_hooks_seen_by_a_real_client_and_a_bad_frame_closes_only_its_connection(tmp_path):
    from kproto.client.cluster import Cluster
    from kproto.client.producer import Producer

    async def main():
        async with Broker(tmp_path / "data") as broker:
            hook = broker.control(K.PRODUCE, Intercept(error=E.NOT_LEADER_OR_FOLLOWER), times=2)
            async with Cluster(broker.bootstrap) as cluster:
                producer = await Producer(cluster, linger_ms=0).start()
                meta = await asyncio.wait_for(await producer.send("h", b"x"), 10)
                assert meta.offset == 0 and hook.seen == 2 and not hook.active  # retried through
                # a rude client: garbage frame -> closed; the producer goes on
                reader, writer = await asyncio.open_connection(broker.host, broker.port)
                writer.write(b"\x00\x00\x00\x05garbage")
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""
                reader, writer = await asyncio.open_connection(broker.host, broker.port)
                writer.write(b"\x7f\xff\xff\xff")  # an oversized frame
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""
                meta = await asyncio.wait_for(await producer.send("h", b"y"), 10)
                assert meta.offset == 1
                await producer.close()

    run(main())


def test_cli_broker_listens_stops_on_sigterm_and_recovers(tmp_path):
    import signal
    import subprocess
    import sys

    data = tmp_path / "data"

    def start():
        proc = subprocess.Popen([sys.executable, "-m", "kproto", "broker", "--data", str(data)],
                                stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line
        return proc, line.split()[-1]

    from kproto.client.cluster import Cluster
    from kproto.client.producer import Producer
    from kproto.client.consumer import Consumer

    async def produce(bootstrap, values):
        async with Cluster(bootstrap) as cluster:
            producer = await Producer(cluster, linger_ms=0).start()
            metas = [await (await producer.send("cli", v)) for v in values]
            await producer.close()
            return [m.offset for m in metas]

    async def consume(bootstrap, n):
        async with Cluster(bootstrap) as cluster:
            consumer = await Consumer(cluster, ["cli"], enable_auto_commit=False).start()
            got = []
            deadline = time.monotonic() + 10
            while len(got) < n and time.monotonic() < deadline:
                got += await consumer.getmany(0.5)
            await consumer.close()
            return [r.value for r in got]

    proc, bootstrap = start()
    try:
        assert run(produce(bootstrap, [b"a", b"b"])) == [0, 1]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert (data / ".kafka_cleanshutdown").exists()
    proc, bootstrap = start()
    try:
        assert run(produce(bootstrap, [b"c"])) == [2]
        assert run(consume(bootstrap, 3)) == [b"a", b"b", b"c"]
    finally:
        proc.kill()  # a crash: no clean shutdown
        proc.wait(10)
    proc, bootstrap = start()
    try:
        assert run(produce(bootstrap, [b"d"])) == [3]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    assert [v for *_, v in records_of(data, "cli")] == [b"a", b"b", b"c", b"d"]
    # the directory is a Kafka log directory without damage
    logdir = subprocess.run([sys.executable, "-m", "kproto", "logdir", str(data)],
                            capture_output=True, text=True, timeout=60)
    assert logdir.returncode == 0, logdir.stdout + logdir.stderr


def test_warm_up_compiles_the_hot_codecs_before_the_first_client(tmp_path):
    """``kproto broker`` calls warm_up() before it says it listens, so its first produce burst
    is not slowed by compiling codecs (a fresh process: the codec caches are process-wide)."""
    code = f"""
import asyncio
from kproto.broker import Broker
from kproto.codecs import request, response

async def main():
    b = await Broker({str(tmp_path / 'd')!r}).start()
    hot = b._hot_codecs()
    compiled = lambda: sum(v in request(k)._compiled and v in response(k)._compiled for k, v in hot)
    before = compiled()
    b.warm_up()
    print(len(hot), before, compiled())
    await b.close()
asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    n, before, after = map(int, out.stdout.split())
    assert n >= 20 and before < n and after == n
