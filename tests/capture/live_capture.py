"""tcpdump on loopback for the live-traffic tests: what clients send to a broker, into a pcap."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import pytest


def unavailable() -> str | None:
    """Why tcpdump cannot capture on loopback here (None: it can)."""
    if shutil.which("tcpdump") is None:
        return "tcpdump is not installed (tools/setup.sh installs it with root and apt)"
    if os.geteuid() != 0:
        return "capturing on loopback needs root"
    return None


def require(tool: str = "tcpdump") -> None:
    """Skip without tcpdump (or ``tool``); fail under CI, where tools/setup.sh must have
    installed them."""
    reason = unavailable()
    if reason is None and tool != "tcpdump" and shutil.which(tool) is None:
        reason = f"{tool} is not installed (tools/setup.sh installs it with root and apt)"
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"tcpdump is needed under CI: {reason}", pytrace=False)
    pytest.skip(reason)


@contextmanager
def tcpdump(path: Path, ports: Sequence[int], timeout: float = 10.0, linger: float = 0.8) -> Iterator[Path]:
    """Capture the TCP traffic of ``ports`` on ``lo`` into ``path`` while the block runs.

    Packets are handed over as they come (``--immediate-mode``: otherwise the kernel passes
    them in blocks, and the last second's block is lost when tcpdump stops) and written at once
    (``-U``), through a 32 MiB buffer (``-B``: a loaded machine lets tcpdump fall behind);
    once the block is done, the capture is stopped with SIGINT, which makes tcpdump close the
    file. Packets the kernel dropped all the same fail the test: a capture missing the end of
    a connection would read as requests left unanswered at a close."""
    expr = " or ".join(f"tcp port {p}" for p in ports)
    proc = subprocess.Popen(["tcpdump", "-i", "lo", "-n", "--immediate-mode", "-U", "-B", "32768", "-s", "0",
                             "-w", str(path), expr],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + timeout
        line = b""
        while b"listening on" not in line:   # tcpdump says so once the filter is installed
            line = proc.stderr.readline()
            if not line and proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tcpdump did not start: {line!r}")
        yield path
        # A consumer that closes during a long-polling Fetch gets its answer (and resets the
        # connection) up to fetch.max.wait.ms (500 ms by default) later: in this capture, not the next.
        time.sleep(linger)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert proc.stderr is not None
    dropped = re.search(rb"(\d+) packets? dropped by kernel", proc.stderr.read())
    if dropped and int(dropped.group(1)):
        pytest.fail(f"tcpdump: {int(dropped.group(1))} packets dropped by the kernel (a loaded "
                    "machine): the capture is incomplete", pytrace=False)
