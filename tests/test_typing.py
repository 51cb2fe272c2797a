"""The package type-checks: kproto ships ``py.typed``, so its annotations are part of the API."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# what a user writes first (the README's examples); mypy must accept it as it stands
USER_CODE = textwrap.dedent("""
    import kproto
    import kproto.storage as ks
    from kproto.capture import iter_exchanges
    from kproto.records import RecordBatchBuilder, iter_batches

    codec = kproto.message("MetadataRequest")
    obj = codec.cls(topics=[codec.cls.MetadataRequestTopic(name="orders")])
    data: bytes = codec.encode(obj, 12)
    back = codec.decode(data, 12)
    header = kproto.RequestHeader(request_api_key=3, request_api_version=12, correlation_id=1,
                                  client_id="me")
    frame = kproto.encode_request(header, back)
    header2, req = kproto.decode_request(frame)
    try:
        codec.decode(b"\\xff", 12)
    except kproto.DecodeError as exc:
        print(exc.path, exc.offset)

    b = RecordBatchBuilder(base_offset=0)
    b.append(0, b"k", b"v", [("h", b"x")])
    for batch in iter_batches(b.build()):
        print(batch.base_offset, batch.last_offset)

    found = kproto.Problems()
    table = ks.read_arrow("examples/logdir", isolation="read_committed", problems=found)
    print(table.num_rows, [(p.kind, p.topic, p.partition, p.bytes_skipped) for p in found])
    for ex in iter_exchanges("capture.pcapng"):
        print(ex.api_name, ex.latency_ms)


    # --strict (warn_return_any) fails these if the lazily loaded names are typed as Any
    def versions(name: str) -> range:
        return kproto.message(name).valid_versions


    def frame_of(header: object, body: object) -> bytes:
        return kproto.encode_request(header, body)


    async def client() -> None:
        from kproto.client.admin import Admin
        from kproto.client.cluster import Cluster
        from kproto.client.consumer import Consumer
        from kproto.client.producer import Producer

        async with Cluster("127.0.0.1:9092") as cluster:
            admin = Admin(cluster)
            await admin.create_topics({"events": 6}, configs={"events": {"retention.ms": "3600000"}})
            ends: dict[tuple[str, int], int] = await admin.list_offsets([("events", 0)], "latest")
            print(ends, [g.group_id for g in await admin.list_groups()])
            producer = await Producer(cluster, compression="lz4").start()
            sent = await producer.send("events", b"v", b"k")
            await producer.flush()
            meta = await sent
            await producer.close()
            consumer = await Consumer(cluster, ["events"], group_id="g").start()
            for r in await consumer.getmany(1.0):
                print(r.offset, r.value)
            await consumer.close()
            print(meta.partition, meta.offset)
""")


def test_mypy_finds_no_errors_in_kproto_or_in_user_code(tmp_path):
    # settings from pyproject's [tool.mypy]; a fresh cache so the result never depends on the past
    cache = str(tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    user = tmp_path / "user_code.py"
    user.write_text(USER_CODE)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", cache, "--strict",
                           "--ignore-missing-imports", "--follow-imports=silent", str(user)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
