"""Time buckets shared by the report aggregations (sans-I/O): a round bucket width chosen from
the span of the data, so a chart has about ``target`` points whatever the capture's length."""
from __future__ import annotations

import math

__all__ = ["Timeline", "nice_step"]


def nice_step(span: float, target: int = 100, smallest: float = 1e-3) -> float:
    """The smallest width of the form 1, 2 or 5 x 10^k that cuts ``span`` into at most
    ``target`` buckets (never below ``smallest``)."""
    if not span > 0 or not math.isfinite(span):
        return smallest
    raw = span / target
    exp = math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        step = mult * 10.0 ** exp
        if step >= raw:
            return max(step, smallest)
    return max(10.0 ** (exp + 1), smallest)  # unreachable: 10 x 10^exp >= raw


class Timeline:
    """Buckets of ``width`` starting at a multiple of ``width`` at or before ``lo`` (so bucket
    edges are round numbers) and covering ``hi``."""

    def __init__(self, lo: float, hi: float, target: int = 100, smallest: float = 1e-3) -> None:
        self.width = nice_step(hi - lo, target, smallest)
        self.start = math.floor(lo / self.width) * self.width
        self.count = self.index(hi) + 1

    def index(self, t: float) -> int:
        """The bucket holding ``t``."""
        return int((t - self.start) // self.width)

    def starts(self) -> list[float]:
        """Each bucket's start."""
        return [self.start + i * self.width for i in range(self.count)]
