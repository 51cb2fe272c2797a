"""An S3-compatible server on loopback for the remote-storage tests: moto's S3 (``moto[server]``,
the dev extra) behind a WSGI layer that counts the requests and the body bytes it serves, so
tests can say what a planner read."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import unquote

from kproto.testing.ports import free_port

BUCKET = "kproto-remote"
CREDENTIALS = {"access_key": "testing", "secret_key": "testing", "region": "us-east-1"}


@dataclass
class Served:
    """One request the server answered."""

    method: str
    key: str  # object key (or bucket-level path), without the bucket
    query: str
    range: str | None
    status: int
    bytes: int  # body bytes sent


@dataclass
class S3Server:
    """A running server: ``endpoint`` (``http://127.0.0.1:PORT``), ``log`` of what it served."""

    endpoint: str
    log: list[Served] = field(default_factory=list)
    _server: object = None
    _thread: threading.Thread | None = None
    _process: subprocess.Popen | None = None

    @property
    def options(self) -> dict[str, str]:
        """``storage_options`` for kproto's readers (the S3FileSystem arguments)."""
        return {"endpoint_override": self.endpoint, "scheme": "http",
                "allow_bucket_creation": "true", **CREDENTIALS}

    def client(self):
        """A boto3 client of this server."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint,
                            aws_access_key_id=CREDENTIALS["access_key"],
                            aws_secret_access_key=CREDENTIALS["secret_key"],
                            region_name=CREDENTIALS["region"])

    def upload_tree(self, local: str, bucket: str, prefix: str) -> str:
        """Put every file under ``local`` at ``s3://bucket/prefix/<relative path>``; the URI."""
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        for root, _dirs, files in os.walk(local):
            for name in files:
                path = os.path.join(root, name)
                rel = os.path.relpath(path, local).replace(os.sep, "/")
                with open(path, "rb") as f:
                    client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=f.read())
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()
            return
        self._server.shutdown()  # type: ignore[attr-defined]
        self._thread.join()  # type: ignore[union-attr]


def start_s3_server() -> S3Server:
    """moto's S3 on an ephemeral loopback port, every request counted in ``log``."""
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_request(self, *args, **kwargs) -> None:  # the log list says it all
            pass

    app = DomainDispatcherApplication(create_backend_app)
    log: list[Served] = []

    def counting(environ, start_response):
        seen: dict = {}

        def start(status, headers, exc_info=None):
            seen["status"] = int(status.split()[0])
            return start_response(status, headers, exc_info)

        body = app(environ, start)
        try:
            chunks = list(body)  # whole, so the request is logged before the client has it
        finally:
            if hasattr(body, "close"):
                body.close()
        path = unquote(environ.get("PATH_INFO", "")).lstrip("/")
        log.append(Served(environ["REQUEST_METHOD"], path.partition("/")[2],
                          environ.get("QUERY_STRING", ""), environ.get("HTTP_RANGE"),
                          seen.get("status", 0), sum(len(c) for c in chunks)))
        return chunks

    server = make_server("127.0.0.1", 0, counting, threaded=True, request_handler=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    return S3Server(f"http://{host}:{port}", log, server, thread)


def start_server_process(argv: list[str], what: str) -> tuple[subprocess.Popen, int]:
    """``python -m <argv...>`` listening on a free loopback port (``{port}`` in ``argv``), once
    it accepts connections: ``(process, port)``."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", *(a.format(port=port) for a in argv)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


def start_s3_process() -> S3Server:
    """moto's S3 server in a process of its own (``python -m moto.server``), for benchmarks:
    it does not share this interpreter's GIL with the reader; nothing is counted."""
    proc, port = start_server_process(["moto.server", "-H", "127.0.0.1", "-p", "{port}"],
                                      "moto.server")
    return S3Server(f"http://127.0.0.1:{port}", _process=proc)


class GeneratedBody:
    """An object body made on demand, never stored: ``piece(start, end)`` gives its bytes
    ``[start, end)``. moto slices a key's value for a ranged GET, so a ranged read costs what
    it returns; a whole GET would have to make all of it."""

    def __init__(self, size: int, piece) -> None:
        self.size, self.piece = size, piece

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, item: slice) -> bytes:
        start, stop, _ = item.indices(self.size)
        return self.piece(start, stop) if stop > start else b""


def put_generated(bucket: str, key: str, body: GeneratedBody) -> None:
    """Place an object with a generated body straight into the in-process moto server's
    backend (the bucket must exist): nothing is uploaded or stored, listings and HEAD give
    its size, ranged GETs its bytes."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import FakeKey, s3_backends

    class GeneratedKey(FakeKey):
        __module__ = "moto.s3.models"  # moto's model registry files classes by module name

        @property
        def value(self):  # what moto serves and slices for a range
            return body

        @value.setter
        def value(self, new: bytes) -> None:  # FakeKey's constructor sets b""
            self.contentsize = body.size

    k = GeneratedKey(name=key, value=b"", account_id=DEFAULT_ACCOUNT_ID,
                     region_name=CREDENTIALS["region"], bucket_name=bucket,
                     etag=f"generated-{abs(hash(key))}")
    s3_backends[DEFAULT_ACCOUNT_ID]["aws"].get_bucket(bucket).keys.setlist(key, [k])
