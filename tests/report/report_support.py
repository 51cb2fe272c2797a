"""Shared helpers of the report tests: where the shared captures and log dirs are (the
capture, external and storage tests' own locators), and an independent bucketing of the
numbers that ``kproto decode-pcap --format jsonl`` and ``kproto dump-log`` print."""
from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import sys
from contextlib import redirect_stdout
from pathlib import Path

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _sub in ("capture", "external", "storage"):
    if os.path.join(_TESTS, _sub) not in sys.path:
        sys.path.append(os.path.join(_TESTS, _sub))

import capture_support  # noqa: E402
import external_support  # noqa: E402
import storage_fixtures  # noqa: E402

from kproto.cli.main import main as cli_main  # noqa: E402

LOGDIRS = storage_fixtures.LOGDIRS
EXAMPLE_LOGDIR = str(Path(_TESTS).parent / "examples" / "logdir")


def all_captures() -> list[Path]:
    """The shared captures and the external ones (real fetch sessions are only in those)."""
    found = [capture_support.CAPTURES / n for n in capture_support.capture_names()]
    found += sorted(external_support.CAPTURES.rglob("*.pcap*"))
    assert found, f"no captures in {capture_support.CAPTURES}"
    return found


def jsonl(tmp_path: Path, capture: Path) -> list[dict]:
    """What ``kproto decode-pcap FILE --format jsonl`` prints, one dict per exchange."""
    out = tmp_path / f"{capture.name}.jsonl"
    cli_main(["decode-pcap", str(capture), "--format", "jsonl", "-o", str(out)])
    return [json.loads(line) for line in out.read_text().splitlines()]


def dump_log_batches(path: str) -> list[tuple[str, dict]]:
    """(partition folder name, batch line) of every batch of every ``.log`` file that
    ``kproto dump-log --format jsonl --batches-only`` prints for a log dir."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        cli_main(["dump-log", "--format", "jsonl", "--batches-only", path])
    out, current = [], None
    for line in buf.getvalue().splitlines():
        doc = json.loads(line)
        if doc.get("type") == "file":
            current = doc["path"] if doc["path"].endswith(".log") else None
        elif doc.get("type") == "batch" and current is not None:
            out.append((os.path.basename(os.path.dirname(current)), doc))
    return out


def seconds(iso: str) -> float:
    """A jsonl ``ts`` back to seconds since the epoch."""
    if iso.endswith("s"):  # a damaged packet time, printed raw
        return float(iso[:-1])
    when = dt.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc)
    return when.timestamp()


class Buckets:
    """Items placed in the buckets a report says it used (start, width). An item within
    ``slack`` of an edge (the jsonl times are rounded to the microsecond) could be on either
    side: both buckets are then ``unsure`` and compared by totals only."""

    def __init__(self, start: float, width: float, slack: float) -> None:
        self.start, self.width, self.slack = start, width, slack
        self.items: dict[int, list] = {}
        self.unsure: set[int] = set()

    def _index(self, t: float) -> int:
        return math.floor((t - self.start) / self.width)

    def add(self, t: float, item: object) -> None:
        lo, hi = self._index(t - self.slack), self._index(t + self.slack)
        if lo != hi:
            self.unsure.update((lo, hi))
        self.items.setdefault(self._index(t), []).append(item)

    def get(self, i: int) -> list:
        return self.items.get(i, [])
