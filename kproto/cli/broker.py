"""``kproto broker``: run kproto's broker on a data directory until SIGTERM or SIGINT."""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("broker", help="run a single-node Kafka broker (for tests and tools)",
                       description="Run kproto's Kafka broker over a log directory. The first "
                                   "line on stdout is 'listening on HOST:PORT'; SIGTERM shuts "
                                   "down cleanly and a later start recovers the directory.")
    p.add_argument("--data", required=True, metavar="DIR", help="log directory")
    p.add_argument("--port", type=int, default=0, help="port (default 0: a free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on and advertise")
    p.add_argument("--node-id", type=int, default=1, help="node.id (default 1)")
    p.add_argument("--partitions", type=int, default=1,
                   help="num.partitions of auto-created topics (default 1)")
    p.add_argument("--no-auto-create", action="store_true", help="auto.create.topics.enable=false")
    p.add_argument("--json", action="store_true",
                   help='the first line as a JSON object: {"listening": "HOST:PORT", "node_id": N}')
    from kproto.cli import security
    security.add_arguments(p, cluster=False)
    p.set_defaults(func=run)


async def _serve(args: argparse.Namespace) -> int:
    from kproto.broker.server import Broker
    from kproto.cli import security

    try:
        secured = security.settings(args, cluster=False)
        broker = Broker(args.data, args.port, host=args.host, node_id=args.node_id,
                        num_partitions=args.partitions, auto_create_topics=not args.no_auto_create,
                        **secured)
        await broker.start()
    except (OSError, ValueError) as exc:
        print(f"kproto broker: {exc}", file=sys.stderr)
        return 2
    broker.warm_up()  # "listening" means ready at full speed
    print(listening_line(broker, args.json), flush=True)
    await until_signalled()
    await broker.close(clean=True)
    return 0


def listening_line(broker: Any, as_json: bool) -> str:
    """``listening on HOST:PORT``, or the same as one JSON object."""
    if as_json:
        return json.dumps({"listening": broker.bootstrap, "node_id": broker.config.node_id})
    return f"listening on {broker.bootstrap}"


async def until_signalled() -> None:
    """Return at SIGTERM or SIGINT (the servers' ``kproto broker`` and ``kproto cluster``)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


# glibc's mallopt parameters
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_freed_memory() -> bool:
    """Have glibc's allocator keep freed memory for reuse (a server process's set-up).

    Every request frame and answer of a busy broker is a fresh buffer of 100 KB to a few MB.
    glibc's defaults serve those from new mappings or trim the heap once they are freed, so
    the next one faults its pages in again (zeroed by the kernel): about a fifth of the
    broker's CPU on 1 KiB records. Kept heap memory is reused instead, as a JVM reuses its
    heap; the process's memory then stays at its peak (it is not returned to the system).
    Returns False where the C library has no ``mallopt`` (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mmap only above 32 MiB (glibc's maximum); trim only with 128 MiB free at the top; grow
    # the heap 16 MiB at a time
    return all(mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_THRESHOLD, 32 << 20), (_M_TRIM_THRESHOLD, 128 << 20), (_M_TOP_PAD, 16 << 20)))


def run(args: argparse.Namespace) -> int:
    keep_freed_memory()
    return asyncio.run(_serve(args))
