"""Progress bars of the command line (tqdm), on stderr and only on a terminal: piped or
redirected output, and logs, never see them."""
from __future__ import annotations

import sys
from typing import Any, TextIO

__all__ = ["Progress", "progress_bar"]


class Progress:
    """A bar of ``total`` units (bytes by default) on ``stream``."""

    def __init__(self, total: int, desc: str, stream: TextIO, unit: str = "B") -> None:
        from tqdm import tqdm

        scaled = unit == "B"
        self.bar: Any = tqdm(total=total, desc=desc, unit=unit, unit_scale=scaled,
                             unit_divisor=1024 if scaled else 1000, leave=False, file=stream,
                             mininterval=0.2, dynamic_ncols=True)

    def update_to(self, done: int) -> None:
        """Move the bar to ``done`` units."""
        self.bar.update(max(0, done - self.bar.n))

    def close(self) -> None:
        self.bar.close()


def progress_bar(total: int, desc: str, *, unit: str = "B", enabled: bool = True,
                 minimum: int = 0) -> Progress | None:
    """A :class:`Progress` on stderr when ``enabled``, stderr is a terminal and ``total`` is at
    least ``minimum`` (short work draws no bar); None otherwise."""
    if not enabled or total < minimum or not sys.stderr.isatty():
        return None
    return Progress(total, desc, sys.stderr, unit)
