"""Cutting a reassembled Kafka byte stream into size-prefixed frames (sans-I/O).

A :class:`FrameCutter` takes the :mod:`kproto.capture.tcp` events of one direction. Bytes lost
inside a frame whose size is known only damage that frame (``Frame.missing``); when a gap or
garbage hides a frame boundary the cutter resynchronises on the next *plausible* frame start,
which a :class:`FrameRule` defines (requests: sane size, known API key, a version the schemas
define or up to :data:`NEWER_VERSIONS` above the newest, sane client id; responses: a
correlation id still pending on the connection).
"""
from __future__ import annotations

import functools
import struct
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Callable, Container, Iterable, Optional, Union

import numpy as np

from kproto.capture.tcp import StreamData, StreamGap
from kproto.framing import DEFAULT_MAX_FRAME
from kproto.problems import Problems

__all__ = ["Frame", "FrameCutter", "FrameRule", "RequestRule", "ResponseRule", "DEFAULT_MAX_FRAME",
           "NEWER_VERSIONS"]

#: Versions above the newest the schemas know that still make a plausible request start: clients
#: newer than the schemas speak them (a client of a Kafka release after the schemas' talking to a
#: broker that knows its versions), and a release rarely adds more than one or two versions to
#: an API.
NEWER_VERSIONS = 3
_first = itemgetter(0)
_START_WAIT = 4 << 20  # bytes buffered at most to see whether a stream starts with a whole frame
_I32 = struct.Struct(">i")
_REQ_HEAD = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id length


@dataclass(slots=True)
class Frame:
    """One Kafka frame: ``data`` is the frame without its 4-byte size prefix.

    ``missing`` counts bytes of the frame the capture lost (then ``data`` holds only the bytes
    present, before and after the holes, and is not decodable). ``problems`` are stream-level
    problems that precede this frame (``gap``: bytes the capture lost; ``resync``: bytes skipped
    while resynchronising).
    """

    data: bytes
    size: int
    ts_start: float
    ts_end: float
    offset: int
    missing: int = 0
    truncated: bool = False
    problems: Problems = field(default_factory=Problems)
    intact: int = -1   # leading bytes of ``data`` before the first hole (-1: no hole)


class FrameRule:
    """What a plausible frame start looks like in one direction."""

    #: bytes needed after the size prefix for :meth:`plausible` / for :meth:`sane`
    head_bytes = 4
    sane_bytes = 0

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame

    def sane(self, buf: Union[bytes, bytearray, memoryview], pos: int) -> bool:
        """Loose check for a frame start while in sync (a bad one means garbage: resync)."""
        raise NotImplementedError

    def plausible(self, buf: Union[bytes, bytearray], pos: int) -> bool:
        """Strict check for a frame start found by scanning after sync was lost."""
        raise NotImplementedError

    def boundary(self, buf: Union[bytes, bytearray], pos: int) -> bool:
        """Could a frame start at ``pos`` of a stream whose beginning was not captured? (Needs
        ``4 + head_bytes`` bytes.)"""
        return self.plausible(buf, pos)

    def candidates(self, arr: np.ndarray) -> Iterable[int]:
        """Positions in ``arr`` (uint8) worth a :meth:`plausible` check, in increasing order."""
        n = len(arr) - 4 - self.head_bytes + 1
        if n <= 0:
            return ()
        size = _be32(arr, n)
        ok = (size >= self.head_bytes) & (size <= self.max_frame)
        return np.flatnonzero(ok & self._vector_filter(arr, n)).tolist()

    def _vector_filter(self, arr: np.ndarray, n: int) -> np.ndarray:
        return np.ones(n, dtype=bool)


def _be32(arr: np.ndarray, n: int, at: int = 0) -> np.ndarray:
    a = arr.astype(np.int64)
    v = (a[at:at + n] << 24) | (a[at + 1:at + 1 + n] << 16) | (a[at + 2:at + 2 + n] << 8) | a[at + 3:at + 3 + n]
    return np.where(v >= 1 << 31, v - (1 << 32), v)


def _be16(arr: np.ndarray, n: int, at: int) -> np.ndarray:
    a = arr.astype(np.int32)
    v = (a[at:at + n] << 8) | a[at + 1:at + 1 + n]
    return np.where(v >= 1 << 15, v - (1 << 16), v)


class RequestRule(FrameRule):
    """Requests: the header starts api_key, api_version, correlation_id, client_id in every version."""

    head_bytes = 10
    sane_bytes = 4

    def __init__(self, versions: Callable[[int], Optional[range]], max_frame: int = DEFAULT_MAX_FRAME,
                 max_api_key: int = 255, newer: int = NEWER_VERSIONS) -> None:
        super().__init__(max_frame)
        self.versions = versions
        self._min_ver, self._max_ver = _version_tables(versions, max_api_key, newer)

    def sane(self, buf, pos):
        size = _I32.unpack_from(buf, pos)[0]
        # An unknown key or version keeps sync (it is reported on the exchange), a silly size not.
        return 8 <= size <= self.max_frame and buf[pos + 4] < 0x80 and buf[pos + 6] < 0x80

    def plausible(self, buf, pos):
        size, key, ver, _corr, cid = _REQ_HEAD.unpack_from(buf, pos)
        if not 10 <= size <= self.max_frame or not 0 <= key < len(self._max_ver):
            return False
        if not self._min_ver[key] <= ver <= self._max_ver[key]:
            return False
        if cid == -1:
            return True
        if cid < 0 or cid > size - 10:
            return False
        text = bytes(buf[pos + 14:pos + 14 + cid])
        return all(0x20 <= c < 0x7F for c in text)  # client ids are printable in practice

    def _vector_filter(self, arr, n):
        key = _be16(arr, n, 4)
        ver = _be16(arr, n, 6)
        idx = key & 0xFFFF
        return (key >= 0) & (ver >= self._min_ver[idx]) & (ver <= self._max_ver[idx])


@functools.lru_cache(maxsize=8)
def _version_tables(versions: Callable[[int], Optional[range]], max_api_key: int,
                    newer: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy lookup tables of :class:`RequestRule` (made once, read only): the lowest and
    highest version accepted per API key (min > max if the key is unknown)."""
    max_ver = np.full(1 << 16, -1, dtype=np.int32)
    min_ver = np.zeros(1 << 16, dtype=np.int32)
    for key in range(max_api_key + 1):
        r = versions(key)
        if r is not None and len(r):
            max_ver[key] = r[-1] + newer
            min_ver[key] = r[0]
    max_ver.flags.writeable = min_ver.flags.writeable = False
    return min_ver, max_ver


class ResponseRule(FrameRule):
    """Responses: the correlation id must be one the connection is waiting for."""

    head_bytes = 4

    def __init__(self, pending: Container[int], max_frame: int = DEFAULT_MAX_FRAME) -> None:
        super().__init__(max_frame)
        self.pending = pending

    def sane(self, buf, pos):
        return 4 <= _I32.unpack_from(buf, pos)[0] <= self.max_frame

    def plausible(self, buf, pos):
        return self.sane(buf, pos) and _I32.unpack_from(buf, pos + 4)[0] in self.pending

    def boundary(self, buf, pos):
        # the requests of responses at the start of a capture were not captured: any sane
        # size followed by a non-negative correlation id will do (the caller checks that the
        # frame ends where the next one, or the captured bytes, begin)
        return self.sane(buf, pos) and _I32.unpack_from(buf, pos + 4)[0] >= 0

    def _vector_filter(self, arr, n):
        ids = np.fromiter(self.pending, dtype=np.int64) if self.pending else np.empty(0, np.int64)
        return np.isin(_be32(arr, n, 4), ids)


class FrameCutter:
    """Cut one direction's stream events into :class:`Frame` objects."""

    #: whole frames of a chunk arriving at a frame start are cut from it without buffering
    #: (False: through the buffer, the reference path)
    direct = True

    def __init__(self, rule: FrameRule, *, synced: bool = True) -> None:
        self.rule = rule
        self.buf = bytearray()
        self.base = 0              # stream offset of buf[0]
        self.synced = synced       # False: scan for a plausible frame start
        self.need: Optional[int] = None  # declared size of the frame at buf[0], once read
        self.missing = 0           # bytes of the current frame lost so far
        self.intact = -1           # bytes of the current frame's data before its first hole
        self.skipped = 0           # bytes thrown away while out of sync
        self.raw = False           # raw SASL tokens flow: any size prefix is fine
        # the stream's first bytes arrived without its SYN: they may start with a whole frame
        self.start_unsure = False
        self.pending = Problems()  # problems waiting for the next frame
        self._ts: list[tuple[int, float]] = []  # (stream offset, ts) of chunk starts in buf

    # -- input -----------------------------------------------------------------------------------

    def feed(self, event: Union[StreamData, StreamGap]) -> list[Frame]:
        """Process one stream event; return the frames it completes."""
        if isinstance(event, StreamGap):
            return self.gap(event.size, event.ts, event.reason)
        return self.data(event.data, event.ts)

    def data(self, chunk: Union[bytes, memoryview], ts: float) -> list[Frame]:
        """Add the next stream bytes (captured at ``ts``); return the frames they complete."""
        if not chunk:
            return []
        out: list[Frame] = []
        if self.direct and self.synced and not self.buf and not self.raw:
            # in sync at a frame start: whole frames of the chunk are cut from it directly
            # (what buffering it and _cut do, without the buffer)
            rule, pos, n = self.rule, 0, len(chunk)
            head = 4 + rule.sane_bytes
            while n - pos >= head and rule.sane(chunk, pos):
                end = pos + 4 + _I32.unpack_from(chunk, pos)[0]
                if end > n:
                    break
                out.append(Frame(bytes(chunk[pos + 4:end]), end - pos - 4, ts, ts, self.base,
                                 problems=self.pending))
                self.pending = Problems()
                self.base += end - pos
                pos = end
            if pos == n:
                return out
            chunk = chunk[pos:]
        self._ts.append((self.base + self.missing + len(self.buf), ts))
        self.buf += chunk
        return out + self._cut() if out else self._cut()

    def gap(self, size: int, ts: float, reason: str = "") -> list[Frame]:
        """``size`` stream bytes were not captured: damage the current frame or lose sync."""
        why = f" ({reason})" if reason else ""
        out: list[Frame] = []
        if self.synced and self.need is not None:
            remaining = 4 + self.need - len(self.buf) - self.missing
            if self.intact < 0:
                self.intact = max(len(self.buf) - 4, 0)
            if size <= remaining:
                self.missing += size
                self.pending.report("gap", f"{size} bytes of this frame missing from the "
                                    f"capture{why}", bytes_skipped=size)
                return self._cut()
            self.missing += remaining
            self.pending.report("gap", f"{remaining} bytes of this frame missing from the "
                                f"capture{why}", bytes_skipped=remaining)
            out.append(self._emit())
            size -= remaining
        self.skipped += len(self.buf)
        self.base += self.missing + len(self.buf) + size
        self.buf.clear()
        self._ts.clear()
        self.missing = 0
        self.intact = -1
        self.need = None
        self.synced = False
        self.start_unsure = False
        self.pending.report("gap", f"{size} bytes missing from the capture{why}; looking for the "
                            "next frame", bytes_skipped=size)
        return out

    def finish(self, ts: float) -> list[Frame]:
        """End of stream: a partial frame is returned ``truncated``; stray bytes become a
        problem."""
        out: list[Frame] = []
        if self.start_unsure and not self.synced and self.buf:
            self.start_unsure = False
            if self._framed_at_start(final=True):
                self.synced = True
                out += self._cut()
        if self.synced and self.buf and self.need is not None:
            unseen = 4 + self.need - len(self.buf) - self.missing
            self.pending.report("gap", f"stream ends inside a frame: {unseen} bytes never seen",
                                bytes_skipped=unseen)
            out.append(self._emit(truncated=True))
        elif self.buf:
            self.skipped += len(self.buf)
            self.buf.clear()
        if self.skipped:
            self.pending.report("resync", f"{self.skipped} bytes at the end of the stream are not "
                                "a Kafka frame", bytes_skipped=self.skipped)
            self.skipped = 0
        return out

    def take_pending(self) -> Problems:
        """Problems not attached to any frame (left over at the end of the stream)."""
        pending, self.pending = self.pending, Problems()
        return pending

    # -- internals -------------------------------------------------------------------------------

    def _cut(self) -> list[Frame]:
        out: list[Frame] = []
        rule = self.rule
        while True:
            if not self.synced and not self._resync():
                return out
            buf = self.buf
            if self.need is None:
                if len(buf) < 4 + (0 if self.raw else rule.sane_bytes):
                    return out
                if not (0 <= _I32.unpack_from(buf, 0)[0] <= rule.max_frame if self.raw
                        else rule.sane(buf, 0)):
                    self.pending.report("resync", f"implausible frame header "
                                        f"{bytes(buf[:12]).hex()}: not Kafka? looking for the "
                                        "next frame")
                    self.synced = False
                    self.skipped += 1
                    self._drop(1)
                    continue
                self.need = _I32.unpack_from(buf, 0)[0]
            if len(buf) + self.missing < 4 + self.need:
                return out
            out.append(self._emit())

    def _emit(self, truncated: bool = False) -> Frame:
        assert self.need is not None  # callers have read the frame's size
        n = min(len(self.buf), 4 + self.need - self.missing)
        end_off = self.base + self.missing + n
        ts = self._ts
        ts_start = ts[0][1] if ts else 0.0
        last = bisect_left(ts, end_off, key=_first) - 1  # chunk holding the frame's last byte
        ts_end = ts[last][1] if last >= 0 else ts_start
        with memoryview(self.buf) as buf:  # one copy of the frame's bytes
            data = buf[4:n].tobytes() if n > 4 else b""
        frame = Frame(data, self.need, ts_start, ts_end, self.base, self.missing, truncated,
                      self.pending, self.intact)
        self.pending = Problems()
        self.intact = -1
        self.base += self.missing
        self.missing = 0
        self.need = None
        self._drop(n)
        return frame

    def _drop(self, n: int) -> None:
        """Remove n bytes from the front of buf (advancing base) and stale timestamps."""
        del self.buf[:n]
        self.base += n
        ts = self._ts
        if not self.buf:
            ts.clear()
            return
        first = bisect_right(ts, self.base, key=_first) - 1  # chunk holding the new buf[0]
        if first > 0:
            del ts[:first]
        if ts and ts[0][0] < self.base:
            ts[0] = (self.base, ts[0][1])

    def _framed_at_start(self, final: bool = False) -> Optional[bool]:
        """Does the stream (its start not captured) begin with a whole frame? True when the
        first bytes are a frame :meth:`FrameRule.boundary` accepts that ends where the captured
        bytes end or where another such frame begins; None: not yet known."""
        rule, buf = self.rule, self.buf
        need = 4 + rule.head_bytes
        if len(buf) < need:
            return False if final else None
        if not rule.boundary(buf, 0):
            return False
        end = 4 + _I32.unpack_from(buf, 0)[0]
        if len(buf) == end or (len(buf) > end and final):
            return True
        if len(buf) < end:
            # a big first frame: decide on its header once a few MiB have been seen
            return len(buf) >= _START_WAIT if not final else False
        if len(buf) < end + need:
            return True if final else None
        return rule.boundary(buf, end)

    def _resync(self) -> bool:
        """Find a plausible frame start in buf; drop what precedes it. False: need more bytes."""
        if self.start_unsure:
            verdict = self._framed_at_start()
            if verdict is None:
                return False
            self.start_unsure = False
            if verdict:
                self.synced = True
                return True
        rule = self.rule
        buf = self.buf
        if len(buf) < 4 + rule.head_bytes:
            return False
        arr = np.frombuffer(buf, dtype=np.uint8)
        found = None
        for pos in rule.candidates(arr):
            if rule.plausible(buf, pos):
                found = pos
                break
        del arr  # release the export of buf before resizing it
        if found is None:
            keep = 4 + rule.head_bytes - 1
            drop = len(buf) - keep
            self.skipped += drop
            self._drop(drop)
            return False
        self.skipped += found
        if self.skipped:
            self.pending.report("resync", f"skipped {self.skipped} bytes to resynchronise on the "
                                "next plausible frame", bytes_skipped=self.skipped)
        self.skipped = 0
        self._drop(found)
        self.synced = True
        return True
