"""Free TCP ports for servers a test starts in another process (Apache Kafka's JVMs, Spark's
standalone daemons, an S3 server), which bind them some seconds after they are picked.

A port the OS picks with ``bind(0)`` comes from the ephemeral range, the same range every outgoing
connection takes its local port from; on a busy machine a client connection can take it between
the pick and the server's bind, and the server then fails with "Address already in use". So the
ports here are picked at random *outside* that range, where only servers bind, and each is
checked free by binding it.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000       # below: well-known and registered services a machine may run
_MIN_ROOM = 2_000      # fewer ports than this outside the ephemeral range: use the OS's pick


def ephemeral_range() -> tuple[int, int]:
    """The OS's ephemeral port range (Linux's ``ip_local_port_range``; the default elsewhere)."""
    try:
        low, high = (int(x) for x in _RANGE_FILE.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _candidates() -> range | None:
    low, high = ephemeral_range()
    below, above = range(_LOWEST, low), range(high + 1, 65536)
    best = max(below, above, key=len)
    return best if len(best) >= _MIN_ROOM else None


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports nothing is bound to on ``host`` now, outside the ephemeral range
    where it leaves room (else the OS's picks). All are held until every one is found."""
    pool = _candidates()
    rng = random.SystemRandom()
    socks: list[socket.socket] = []
    try:
        tries = 0
        while len(socks) < n:
            s = socket.socket()
            socks.append(s)
            if pool is None or tries >= 50 * n:   # no room, or that room is full: the OS's pick
                s.bind((host, 0))
                continue
            tries += 1
            try:
                s.bind((host, rng.choice(pool)))
            except OSError:   # taken (or picked twice): another
                socks.pop().close()
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port(host: str = "127.0.0.1") -> int:
    """One port of :func:`free_ports`."""
    return free_ports(1, host)[0]
