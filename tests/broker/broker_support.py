"""Helpers for the broker tests: a recording channel and request round trips through the
sans-I/O core."""
from __future__ import annotations

from typing import Any, Optional

import kproto
from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore
from kproto.broker.timer import FakeClock
from kproto.framing import RequestHeader, decode_response, encode_request
from kproto.records import RecordBatchBuilder


class Recorder:
    """A channel that keeps what the core sends."""

    def __init__(self) -> None:
        self.frames: list[Optional[bytes]] = []
        self.closed: Optional[str] = None

    def respond(self, frame: Optional[bytes]) -> None:
        self.frames.append(frame)

    def close(self, reason: str) -> None:
        self.closed = reason


class Client:
    """Sends requests to a core and decodes the answers."""

    def __init__(self, core: BrokerCore) -> None:
        self.core = core
        self.channel = Recorder()
        self.cid = 0
        self.sent: list[tuple[int, int, int]] = []

    def send(self, api_key: int, version: int, body: Any) -> int:
        """Send without waiting; returns the index its answer will have in ``channel.frames``."""
        self.cid += 1
        header = RequestHeader(request_api_key=api_key, request_api_version=version,
                               correlation_id=self.cid, client_id="test")
        self.sent.append((api_key, version, self.cid))
        self.core.handle(self.channel, encode_request(header, body)[4:])
        return len(self.sent) - 1

    def answer(self, index: int) -> Any:
        api_key, version, cid = self.sent[index]
        frame = self.channel.frames[index]
        assert frame is not None
        header, body = decode_response(frame, api_key, version)
        assert header.correlation_id == cid
        return body

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        before = len(self.channel.frames)
        i = self.send(api_key, version, kproto.request(api_key).cls(**fields))
        assert len(self.channel.frames) == before + 1, "no immediate answer"
        return self.answer(i)


def batch(values: list[bytes], *, timestamp: int = 1_700_000_000_000, producer_id: int = -1,
          producer_epoch: int = -1, base_sequence: int = -1, compression: int = 0) -> bytes:
    b = RecordBatchBuilder(base_offset=0, producer_id=producer_id, producer_epoch=producer_epoch,
                           base_sequence=base_sequence, compression=compression)
    for i, v in enumerate(values):
        b.append(timestamp + i, b"k%d" % i, v, [])
    return b.build()


def fake_core(path: Any, clock: FakeClock, **config: Any) -> BrokerCore:
    """A core on ``clock`` (record timestamps follow it from 2023-11-14), advertising port 9092."""
    return BrokerCore(str(path), BrokerConfig(port=9092, **config), clock=clock,
                      wall_clock=lambda: 1_700_000_000_000 + clock.now_ms())


def produce_jobs(bootstrap: str, start: int, n: int) -> None:
    """``job-<i>`` for i in start..start+n-1 into topic ``jobs``, partition i % 6, with
    confluent-kafka (the group interop tests' workload)."""
    import confluent_kafka

    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i in range(start, start + n):
        p.produce("jobs", value=b"job-%d" % i, partition=i % 6)
    assert p.flush(10) == 0


def wait_for(cond, timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``cond`` every 20 ms until it holds; AssertionError after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def metadata_on_disk(data_dir: Any) -> Any:
    """The MetadataImage a reader of ``data_dir``'s ``__cluster_metadata-0`` gets from the files
    alone: the latest snapshot, then the log's data records after it."""
    import os

    from kproto.broker.cluster.snapshots import decode_snapshot
    from kproto.records.batch import RecordBatch
    from kproto.records.reader import BatchReader
    from kproto.storage.metadata_image import MetadataImage

    part = os.path.join(os.fspath(data_dir), "__cluster_metadata-0")
    image, start = MetadataImage(), 0
    snapshots = sorted(f for f in os.listdir(part) if f.endswith(".checkpoint"))
    if snapshots:
        start = int(snapshots[-1].split("-")[0])
        with open(os.path.join(part, snapshots[-1]), "rb") as f:
            for value in decode_snapshot(f.read())[1]:
                image.replay_value(value, start - 1)
    for name in sorted(f for f in os.listdir(part) if f.endswith(".log")):
        with open(os.path.join(part, name), "rb") as f:
            for b in BatchReader(f.read(), verify_crc=True):
                if isinstance(b, RecordBatch) and not b.is_control:
                    for r in b.records():
                        if r.offset >= start:
                            image.replay_value(r.value, r.offset)
    return image
