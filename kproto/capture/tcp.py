"""Per-direction TCP stream reassembly (sans-I/O).

Segments go in in capture order; contiguous stream bytes come out in stream order, as
:class:`StreamData` chunks, with :class:`StreamGap` marking bytes that were never captured.
Retransmissions and overlaps are trimmed (first copy wins), out-of-order segments are held
until the hole before them fills. A hole is declared lost (and reported with its exact size,
known from sequence numbers) when the receiver acknowledged past it and it stayed unfilled
for a while, when too much data piles up behind it, or at the end of the capture.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

__all__ = ["StreamData", "StreamGap", "TcpStream"]

def _sdiff(a: int, b: int) -> int:
    """Signed difference a - b of two 32-bit sequence numbers."""
    return ((a - b + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


@dataclass(slots=True)
class StreamData:
    """Stream bytes starting at stream ``offset``, from the segment captured at ``ts``."""

    data: bytes
    ts: float
    offset: int


@dataclass(slots=True)
class StreamGap:
    """``size`` stream bytes starting at ``offset`` that are missing from the capture."""

    size: int
    ts: float
    offset: int
    reason: str = ""


StreamEvent = Union[StreamData, StreamGap]


class TcpStream:
    """Reassembler for one direction of one TCP connection."""

    __slots__ = ("next_seq", "offset", "pending", "pending_bytes", "midstream", "acked_past",
                 "_ack_deadline", "max_pending", "ack_grace", "fin_seq", "retransmitted_bytes")

    def __init__(self, *, max_pending: int = 16 << 20, ack_grace: int = 32) -> None:
        self.next_seq: Optional[int] = None   # sequence number of the next byte expected
        self.offset = 0                       # stream offset of next_seq (bytes + gaps so far)
        self.pending: dict[int, tuple[bytes, float]] = {}  # seq -> (payload, ts), out of order
        self.pending_bytes = 0
        self.midstream = False                # True if the stream start (SYN) was not captured
        # an acknowledgement past the bytes seen, waiting for them (None: nothing outstanding)
        self.acked_past: Optional[int] = None
        self._ack_deadline = 0
        self.max_pending = max_pending
        self.ack_grace = ack_grace            # packets to wait for a late (reordered) segment
        self.fin_seq: Optional[int] = None
        self.retransmitted_bytes = 0

    def segment(self, seq: int, payload: Union[bytes, memoryview], ts: float, *, syn: bool = False,
                fin: bool = False, tick: int = 0) -> list[StreamEvent]:
        """Add one captured segment of this direction; return the stream events it releases."""
        if syn:
            if self.next_seq is None:
                self.next_seq = (seq + 1) & 0xFFFFFFFF
            seq = (seq + 1) & 0xFFFFFFFF
        if self.next_seq is None:
            if not payload:
                return []
            self.next_seq = seq
            self.midstream = True
        if fin:
            self.fin_seq = (seq + len(payload)) & 0xFFFFFFFF
        if not payload:
            return self._check_ack(tick, ts)
        out: list[StreamEvent] = []
        d = _sdiff(seq, self.next_seq)
        if d <= 0:
            n = len(payload)
            if -d >= n:
                self.retransmitted_bytes += n
                return self._check_ack(tick, ts)
            self.retransmitted_bytes += -d
            out.append(StreamData(bytes(payload[-d:]), ts, self.offset))
            self._advance(n + d)
            if self.pending:
                self._drain(out)
        else:
            old = self.pending.get(seq)
            if old is None or len(old[0]) < len(payload):
                self.pending[seq] = (bytes(payload), ts)
                self.pending_bytes += len(payload) - (len(old[0]) if old else 0)
            if self.pending_bytes > self.max_pending:
                self._skip_hole(out, ts, "too much data behind a hole")
        out.extend(self._check_ack(tick, ts))
        return out

    def in_order(self, seq: int, n: int) -> bool:
        """Take the ``n`` payload bytes of a segment at ``seq`` (no SYN or FIN) if they are the
        next ones expected while nothing is held or acknowledged ahead: then :meth:`segment`
        would release exactly them (the caller uses the payload itself) and nothing else.
        False: nothing done, :meth:`segment` decides."""
        if seq != self.next_seq or self.pending or self.acked_past is not None:
            return False
        self.next_seq = (seq + n) & 0xFFFFFFFF
        self.offset += n
        return True

    def acked(self, ack: int, tick: int = 0, ts: float = 0.0) -> list[StreamEvent]:
        """Note an acknowledgement number sent by the peer for this direction."""
        nxt = self.next_seq
        if nxt is None or (self.acked_past is None and not 0 < (ack - nxt) & 0xFFFFFFFF < 1 << 31):
            return []  # nothing acknowledged past the bytes seen, nothing outstanding
        past = _sdiff(ack, nxt)
        if self.fin_seq is not None and ack == (self.fin_seq + 1) & 0xFFFFFFFF:
            past -= 1
        if past > 0 and (self.acked_past is None or _sdiff(ack, self.acked_past) > 0):
            if self.acked_past is None:
                self._ack_deadline = tick + self.ack_grace
            self.acked_past = ack
        return self._check_ack(tick, ts)

    def flush(self, ts: float = 0.0) -> list[StreamEvent]:
        """End of capture: release everything held, reporting the holes before it."""
        out: list[StreamEvent] = []
        while self.pending:
            self._skip_hole(out, ts, "segment not captured")
        if self.acked_past is not None and self.next_seq is not None:
            missing = _sdiff(self._acked_limit(), self.next_seq)
            if missing > 0:
                out.append(StreamGap(missing, ts, self.offset, "acknowledged but not captured"))
                self._advance(missing)
            self.acked_past = None
        return out

    # -- internals -------------------------------------------------------------------------------

    def _acked_limit(self) -> int:
        """Highest acknowledged sequence number that stands for data (a FIN takes one too)."""
        limit = self.acked_past
        assert limit is not None  # only called while an acknowledgement is outstanding
        if self.fin_seq is not None and limit == (self.fin_seq + 1) & 0xFFFFFFFF:
            limit = self.fin_seq
        return limit

    def _advance(self, n: int) -> None:
        assert self.next_seq is not None  # the stream has started
        self.next_seq = (self.next_seq + n) & 0xFFFFFFFF
        self.offset += n
        if self.acked_past is not None and _sdiff(self.acked_past, self.next_seq) <= 0:
            self.acked_past = None

    def _drain(self, out: list[StreamEvent]) -> None:
        """Release held segments that now start at or before the next expected byte."""
        pending = self.pending
        while pending:
            nxt = self.next_seq
            assert nxt is not None  # the stream has started
            hit = pending.pop(nxt, None)
            if hit is None:
                for s in sorted(pending, key=lambda s: _sdiff(s, nxt)):
                    if _sdiff(s, nxt) > 0:
                        return
                    hit = pending.pop(s)
                    skip = -_sdiff(s, nxt)
                    self.pending_bytes -= len(hit[0])
                    self.retransmitted_bytes += min(skip, len(hit[0]))
                    if skip < len(hit[0]):
                        out.append(StreamData(hit[0][skip:], hit[1], self.offset))
                        self._advance(len(hit[0]) - skip)
                    break
                continue
            self.pending_bytes -= len(hit[0])
            out.append(StreamData(hit[0], hit[1], self.offset))
            self._advance(len(hit[0]))

    def _skip_hole(self, out: list[StreamEvent], ts: float, reason: str) -> None:
        """Declare the hole before the earliest held segment lost, then release what follows."""
        nxt = self.next_seq
        assert nxt is not None  # segments are held only once the stream has started
        first = min(self.pending, key=lambda s: _sdiff(s, nxt))
        missing = _sdiff(first, nxt)
        if missing > 0:
            out.append(StreamGap(missing, self.pending[first][1], self.offset, reason))
            self._advance(missing)
        self._drain(out)

    def _check_ack(self, tick: int, ts: float) -> list[StreamEvent]:
        if self.acked_past is None or tick < self._ack_deadline:
            return []
        assert self.next_seq is not None  # an acknowledgement is noted only once started
        out: list[StreamEvent] = []
        # The receiver has had the bytes up to acked_past for ack_grace packets: what we hold
        # nothing of in that range was lost by the capture, not by the network.
        limit = self._acked_limit()
        while self.acked_past is not None and _sdiff(limit, self.next_seq) > 0:
            nxt = self.next_seq
            if self.pending and _sdiff(min(self.pending, key=lambda s: _sdiff(s, nxt)), limit) < 0:
                self._skip_hole(out, ts, "acknowledged but not captured")
            else:
                missing = _sdiff(limit, self.next_seq)
                out.append(StreamGap(missing, ts, self.offset,
                                     "acknowledged but not captured"))
                self._advance(missing)
        self.acked_past = None
        return out
