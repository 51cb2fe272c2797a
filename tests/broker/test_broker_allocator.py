"""The broker's processes keep freed memory for reuse: big frames do not fault pages in again."""
from __future__ import annotations

import asyncio
import os
import platform
import signal
import subprocess
import sys
import textwrap

import pytest

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

# a server's pattern: buffers of 100-600 KB made, filled and freed, a few alive at once
_PATTERN = textwrap.dedent("""
    import random, resource, sys
    from kproto.cli.broker import keep_freed_memory
    applied = keep_freed_memory() if sys.argv[1] == "kept" else None
    rng, alive = random.Random(1), []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(2000):
        alive.append(bytes(bytearray(rng.randrange(100_000, 600_000))))
        if len(alive) > 3:
            alive.pop(0)
    print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _PATTERN, mode], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return out[0], int(out[1])


@glibc_only
def test_kept_memory_is_reused_instead_of_faulted_in_again():
    applied, kept = _faults("kept")
    _, default = _faults("default")
    assert applied == "True"
    # glibc's defaults fault in most of the ~700 MB allocated (about 170,000 pages)
    assert default > 20_000 and kept < default / 10, (kept, default)


def _minor_faults(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


@glibc_only
def test_the_broker_command_takes_big_frames_without_faulting_pages_in(tmp_path):
    from kproto.client.cluster import Cluster
    from kproto.client.producer import Producer

    proc = subprocess.Popen([sys.executable, "-m", "kproto", "broker", "--data", str(tmp_path / "d")],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        bootstrap = line.split()[-1]

        async def produce(n: int) -> None:
            async with Cluster(bootstrap) as cluster:
                producer = await Producer(cluster, linger_ms=0).start()
                for i in range(n):
                    await asyncio.wait_for(await producer.send("big", os.urandom(300_000 + 997 * i)), 10)
                await producer.close()

        asyncio.run(produce(10))  # the topic, the connections, the first buffers
        before = _minor_faults(proc.pid)
        asyncio.run(produce(60))  # ~20 MB of frames: about 5,000 pages if each were new
        faults = _minor_faults(proc.pid) - before
        assert faults < 1_500, faults
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
