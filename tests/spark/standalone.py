"""A Spark standalone cluster (one master, one worker) on loopback, for tests that must not
depend on local mode: the classes that ship with pyspark, run through ``bin/spark-class``, on
free ports, with logs and the worker's work dir under a temp dir.

    with standalone_cluster(tmp_path) as cluster:
        spark = SparkSession.builder.master(cluster.master_url)...

Executors run ``sys.executable`` (set ``spark.pyspark.python`` or ``PYSPARK_PYTHON`` for the
driver too), which must have kproto and pyarrow.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pyspark

from kproto.testing.ports import free_ports

HOST = "127.0.0.1"
SPARK_CLASS = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def cluster_env(root: Path) -> dict[str, str]:
    """Environment of the cluster's JVMs (and of a driver that should join them): loopback
    only, logs and scratch space under ``root``, executors on this interpreter."""
    # a port taken after free_ports() picked it: fail (and start again) rather than take the
    # next one, which the master URL would not name
    opts = (os.environ.get("SPARK_DAEMON_JAVA_OPTS", "") + " -Dspark.port.maxRetries=0").strip()
    return {**os.environ, "SPARK_LOCAL_IP": HOST, "SPARK_LOCAL_HOSTNAME": HOST,
            "SPARK_DAEMON_JAVA_OPTS": opts,
            "SPARK_LOG_DIR": str(root / "logs"), "SPARK_LOCAL_DIRS": str(root / "local"),
            "SPARK_WORKER_DIR": str(root / "work"), "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable}


@dataclass
class Standalone:
    """A running master and worker; :meth:`stop` ends them (and the executors they started)."""

    root: Path
    master_url: str
    master_ui: str
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def work_dir(self) -> Path:
        """The worker's work dir: ``app-*/<executor id>/stderr`` per executor it ran."""
        return self.root / "work"

    @property
    def worker_pid(self) -> int:
        """The worker JVM's process id: the parent of the executor JVMs it launches."""
        return self.processes["worker"].pid

    def state(self) -> dict:
        """The master's view (its web UI's ``/json``: workers, applications)."""
        with urllib.request.urlopen(self.master_ui + "/json/", timeout=5) as r:
            return json.load(r)

    def executor_logs(self) -> list[Path]:
        """The ``stderr`` logs of every executor the worker ran."""
        return sorted(self.work_dir.glob("app-*/*/stderr"))

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the master's and worker's logs (for failure messages)."""
        out = []
        for name in ("master", "worker"):
            path = self.root / "logs" / f"{name}.log"
            if path.exists():
                out.append(f"--- {name}\n" + path.read_text(errors="replace")[-chars:])
        return "\n".join(out)

    def stop(self) -> None:
        """SIGTERM to each process group (the worker's holds its executors and their Python
        workers), then SIGKILL to what is left after a grace period."""
        for p in reversed(list(self.processes.values())):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.processes.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _spawn(root: Path, name: str, args: list[str]) -> subprocess.Popen:
    log = open(root / "logs" / f"{name}.log", "wb")
    try:
        # its own session: stop() signals the JVM and everything it forked, nothing else
        return subprocess.Popen([SPARK_CLASS, *args], env=cluster_env(root), cwd=root,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    finally:
        log.close()


class _Exited(RuntimeError):
    """A JVM of the cluster ended while starting (a port taken meanwhile, most likely)."""


def start_standalone(root: Path, *, cores: int = 1, memory: str = "1g",
                     timeout: float = 90, attempts: int = 3) -> Standalone:
    """Start a master and a worker of ``cores`` cores and ``memory`` under ``root`` and wait
    until the worker is registered ALIVE with the master; new ports on each of ``attempts``
    when a JVM exits while starting (another process may bind a free port first)."""
    for attempt in range(attempts):
        try:
            return _start(Path(root) / f"try{attempt}", cores, memory, timeout)
        except _Exited:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _start(root: Path, cores: int, memory: str, timeout: float) -> Standalone:
    for sub in ("logs", "local", "work"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    port, ui, worker_port, worker_ui = free_ports(4, HOST)
    cluster = Standalone(root, f"spark://{HOST}:{port}", f"http://{HOST}:{ui}")
    try:
        cluster.processes["master"] = _spawn(root, "master", [
            "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(port),
            "--webui-port", str(ui)])
        cluster.processes["worker"] = _spawn(root, "worker", [
            "org.apache.spark.deploy.worker.Worker", "--host", HOST,
            "--port", str(worker_port), "--webui-port", str(worker_ui),
            "--cores", str(cores), "--memory", memory, "--work-dir", str(cluster.work_dir),
            cluster.master_url])
        deadline = time.monotonic() + timeout
        while True:
            for name, p in cluster.processes.items():
                if p.poll() is not None:
                    raise _Exited(f"standalone {name} exited ({p.returncode})\n"
                                  + cluster.log_tail())
            with contextlib.suppress(OSError, ValueError):
                if any(w.get("state") == "ALIVE" for w in cluster.state().get("workers", [])):
                    return cluster
            if time.monotonic() > deadline:
                raise TimeoutError("standalone worker not registered\n" + cluster.log_tail())
            time.sleep(0.5)
    except BaseException:
        cluster.stop()
        raise


@contextlib.contextmanager
def standalone_cluster(root: Path, **kwargs) -> Iterator[Standalone]:
    """:func:`start_standalone`, stopped on leaving the block (also on failure)."""
    cluster = start_standalone(root, **kwargs)
    try:
        yield cluster
    finally:
        cluster.stop()
