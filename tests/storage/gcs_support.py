"""A GCS-compatible server on loopback for the remote-storage tests: gcp-storage-emulator
(pure Python, the dev extra) in a process of its own (pyarrow's GCS client holds the GIL
while it opens a file, so a server thread in the test's process would never answer it),
in memory, with one bucket; pyarrow's GcsFileSystem reaches it with ``endpoint_override``,
``scheme="http"`` and anonymous credentials."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass

from s3_support import start_server_process

GCS_BUCKET = "kproto-gcs"


@dataclass
class GcsServer:
    """A running emulator: ``endpoint`` (``127.0.0.1:PORT``), ``options`` for kproto's readers."""

    endpoint: str
    process: subprocess.Popen

    @property
    def options(self) -> dict[str, str]:
        """``storage_options`` for kproto's readers (the GcsFileSystem arguments)."""
        return {"endpoint_override": self.endpoint, "scheme": "http", "anonymous": "true"}

    def filesystem(self):
        import pyarrow.fs as pafs

        return pafs.GcsFileSystem(anonymous=True, endpoint_override=self.endpoint, scheme="http")

    def upload_tree(self, local: str, prefix: str) -> str:
        """Every file under ``local`` at ``gs://GCS_BUCKET/prefix/<relative path>`` (objects
        only, no folder markers, as gsutil writes them); the URI."""
        gcs = self.filesystem()
        for root, _dirs, files in os.walk(local):
            for name in files:
                path = os.path.join(root, name)
                rel = os.path.relpath(path, local).replace(os.sep, "/")
                with open(path, "rb") as src, \
                        gcs.open_output_stream(f"{GCS_BUCKET}/{prefix}/{rel}") as dst:
                    dst.write(src.read())
        return f"gs://{GCS_BUCKET}/{prefix}"

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()


def start_gcs_server() -> GcsServer:
    proc, port = start_server_process(
        ["gcp_storage_emulator", "start", "--host", "127.0.0.1", "--port", "{port}",
         "--in-memory", "--default-bucket", GCS_BUCKET], "gcp-storage-emulator")
    return GcsServer(f"127.0.0.1:{port}", proc)
