"""Both sources on a real cluster: a Spark standalone master and worker on loopback
(:mod:`standalone`), one application whose driver runs in a subprocess (this file as a
script; the session's local SparkSession cannot share the process). ``kafka-segments`` over the
fixture log dirs and examples/logdir gives the fixtures' expected records and
``kproto.storage.read_arrow``'s rows; ``kafka-pcap`` over all shared captures gives exactly
the exchanges of ``kproto decode-pcap --format jsonl``, and with ``expand=records`` the
rows the reader gives in the test's process; and the tasks ran in the worker's
executor, on this interpreter, not in the driver."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from kproto.capture.table import capture_files
from kproto.spark import KafkaPcapReader, parse_pcap_options, pcap_spark_schema, spark_schema
from kproto.storage import read_arrow

from spark_expected import LOGDIRS, by_partition, expected_rows, partition_dirs, spark_rows
from standalone import standalone_cluster
from test_spark_pcap import DIRS, assert_as_decode_pcap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(REPO, "examples", "logdir")

def _where(source: str):
    """A ``mapPartitions`` function reporting, from inside each task, its process, that
    process's ancestors, the command line of the nearest JVM among them and the Python it runs
    (a plain RDD function: ``mapInArrow`` would need pandas)."""
    def where(rows):
        import os
        import sys

        n = sum(1 for _ in rows)
        chain, jvm, pid = [], "", os.getpid()
        while pid > 1:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
            chain.append(pid)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if not jvm and os.path.basename(cmd.split(" ", 1)[0]).startswith("java"):
                jvm = cmd
        yield {"source": source, "pid": os.getpid(), "ancestors": chain, "executor_jvm": jvm,
               "python": sys.executable, "rows": n}
    return where


def drive(master: str, out: str, roots: list[str], captures: list[str]) -> None:
    """The application: every check's data collected from one SparkSession on ``master``,
    written as Arrow IPC files into ``out``."""
    from pyspark.sql import SparkSession, functions as F

    import kproto.spark

    spark = (SparkSession.builder.master(master).appName("kproto-standalone-test")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.memory", "1g").config("spark.executor.memory", "1g")
             .config("spark.executor.cores", "1").config("spark.cores.max", "1")
             .config("spark.pyspark.python", sys.executable)
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    try:
        kproto.spark.register(spark)
        segments = None
        for root in roots:
            df = spark.read.format("kafka-segments").load(root).withColumn("root", F.lit(root))
            segments = df if segments is None else segments.unionByName(df)
        pcap = spark.read.format("kafka-pcap").load(captures)
        # one narrow column: the scans run in full, the rows cross to Python cheaply
        where = segments.select("offset").rdd.mapPartitions(_where("kafka-segments")).union(
            pcap.select("index").rdd.mapPartitions(_where("kafka-pcap"))).collect()
        with open(os.path.join(out, "where.json"), "w") as f:
            json.dump(where, f)
        records = spark.read.format("kafka-pcap").option("expand", "records").load(captures)
        for name, df in (("segments", segments), ("pcap", pcap), ("records", records)):
            table = df.toArrow()
            with pa.OSFile(os.path.join(out, name + ".arrow"), "wb") as f, \
                    pa.ipc.new_file(f, table.schema) as w:
                w.write_table(table)
        with open(os.path.join(out, "app_id"), "w") as f:
            f.write(spark.sparkContext.applicationId)
    finally:
        spark.stop()


def _read(path: str) -> pa.Table:
    with pa.memory_map(path) as f:
        return pa.ipc.open_file(f).read_all()


def _key(r: dict) -> tuple:
    return r["topic"], r["partition"], r["offset"]


def test_both_sources_on_a_standalone_cluster(tmp_path):
    brokers = sorted({p.split("/")[0] for p in partition_dirs()})
    roots = [os.path.join(LOGDIRS, b) for b in brokers] + [EXAMPLE]
    files = [f for f, _ in capture_files(DIRS)]
    out = tmp_path / "out"
    out.mkdir()
    with standalone_cluster(tmp_path / "cluster", cores=1, memory="1g") as cluster:
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        run = subprocess.run(
            [sys.executable, __file__, cluster.master_url, str(out), os.pathsep.join(roots),
             os.pathsep.join(DIRS)], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=240)
        assert run.returncode == 0, run.stderr[-4000:] + cluster.log_tail()
        app = (out / "app_id").read_text()
        apps = {a["id"] for a in cluster.state().get("completedapps", [])
                + cluster.state().get("activeapps", [])}
        assert app in apps  # the master ran the application, not a local[*] one
        logs = [p for p in cluster.executor_logs() if p.parts[-3] == app]
        worker_pid = cluster.worker_pid
        finished = sum(p.read_text(errors="replace").count("Finished task") for p in logs)

    # the tasks ran in the worker's executor JVM, on this interpreter
    where = json.loads((out / "where.json").read_text())
    assert {w["source"] for w in where} == {"kafka-segments", "kafka-pcap"}
    for w in where:
        assert worker_pid in w["ancestors"], w
        assert "org.apache.spark.executor.CoarseGrainedExecutorBackend" in w["executor_jvm"], w
        assert f"--app-id {app}" in w["executor_jvm"], w
        assert w["python"] == sys.executable
    assert logs and finished >= len(where)

    # kafka-segments: the fixtures' expected records, and read_arrow's rows of examples/logdir
    segments = _read(str(out / "segments.arrow"))
    target = to_arrow_schema(spark_schema(), timezone="UTC")
    assert segments.schema.remove(segments.schema.get_field_index("root")) == target
    for root in roots:
        got = segments.filter(pc.equal(segments["root"], root)).drop_columns(["root"])
        assert got.num_rows, root
        rows = by_partition(spark_rows(got))
        if root == EXAMPLE:
            want = by_partition(spark_rows(read_arrow(root).cast(target)))
        else:
            broker = os.path.basename(root)
            want = {}
            for part in partition_dirs():
                if part.startswith(broker + "/"):
                    topic, n = os.path.basename(part).rsplit("-", 1)
                    if r := expected_rows(part, "read_uncommitted", False):
                        want[(topic, int(n))] = r
        assert sorted(rows) == sorted(want), root
        for key, part_rows in want.items():
            assert sorted(rows[key], key=_key) == part_rows, (root, key)
    counts = {w["source"]: 0 for w in where}
    for w in where:
        counts[w["source"]] += w["rows"]
    assert counts["kafka-segments"] == segments.num_rows

    # kafka-pcap: exactly decode-pcap's exchanges, file by file
    pcap = _read(str(out / "pcap.arrow"))
    assert_as_decode_pcap(pcap, files)
    assert counts["kafka-pcap"] == pcap.num_rows

    # expand=records: the rows the reader gives in this process, task by task
    records = _read(str(out / "records.arrow"))
    reader = KafkaPcapReader(parse_pcap_options({"paths": json.dumps(DIRS),
                                                 "expand": "records"}),
                             pcap_spark_schema("records"))
    want = pa.Table.from_batches([rb for t in reader.partitions() for rb in reader.read(t)],
                                 schema=records.schema)
    assert records.num_rows > 500
    assert records.to_pylist() == want.to_pylist()


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2], sys.argv[3].split(os.pathsep), sys.argv[4].split(os.pathsep))
