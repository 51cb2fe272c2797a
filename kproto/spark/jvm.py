"""The ``kafka-segments-jvm`` Spark data source: a DataSource V2 in Java (sources in
``kproto/spark/jvm/``) that reads a Kafka log directory into Spark's columnar batches on the
JVM, with the columns of Spark's Kafka source. :func:`jar` compiles it against the running
pyspark's jars; pass its path as ``spark.jars`` when the session is built::

    SparkSession.builder.config("spark.jars", kproto.spark.jvm.jar()).getOrCreate()
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

NAME = "kafka-segments-jvm"
SOURCES = Path(__file__).with_name("jvm")
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def _pyspark_jars() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise RuntimeError(f"{NAME}: pyspark is not installed (its jars are compiled against)") from exc
    jars = Path(pyspark.__file__).parent / "jars"
    if not any(jars.glob("spark-sql_*.jar")):
        raise RuntimeError(f"{NAME}: no spark-sql jar in {jars} (pyspark's jars folder)")
    return jars


def _jdk_tool(tool: str, what: str) -> str:
    """The path of a JDK program (``java``, ``javac``): JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = (str(Path(home) / "bin" / tool) if home and (Path(home) / "bin" / tool).exists()
             else shutil.which(tool))
    if not found:
        raise RuntimeError(f"{NAME}: {what} is not on PATH nor in JAVA_HOME")
    return found


def cache_dir() -> Path:
    """Where built jars are kept: ``$KPROTO_CACHE_DIR``, else ``$XDG_CACHE_HOME/kproto``, else
    ``~/.cache/kproto``."""
    env = os.environ.get("KPROTO_CACHE_DIR")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kproto"


def jar() -> str:
    """The path of the ``kafka-segments-jvm`` jar, compiled (``javac --release 17`` against
    pyspark's jars) into :func:`cache_dir` on first use and reused while the sources and the
    pyspark version are the same. ``RuntimeError`` names what is missing (javac, pyspark, its
    jars) or what javac said."""
    jars = _pyspark_jars()
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256()
    for path in [*sources, SOURCES / SERVICE]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(",".join(sorted(p.name for p in jars.glob("spark-sql_*.jar"))).encode())
    target = cache_dir() / f"{NAME}-{digest.hexdigest()[:16]}.jar"
    if target.exists():
        return str(target)
    javac = _jdk_tool("javac", "javac (a JDK 17 or later)")
    target.parent.mkdir(parents=True, exist_ok=True)
    # built beside the target: os.replace is atomic only within a file system (and fails
    # across two, as from a tmpfs /tmp to the home directory)
    with tempfile.TemporaryDirectory(prefix="kproto-jvm-", dir=target.parent) as tmp:
        classes = Path(tmp) / "classes"
        run = subprocess.run([javac, "--release", "17", "-nowarn", "-encoding", "UTF-8",
                              "-cp", str(jars / "*"), "-d", str(classes), *map(str, sources)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{NAME}: javac failed:\n{run.stderr or run.stdout}")
        built = Path(tmp) / "out.jar"
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            zf.write(SOURCES / SERVICE, SERVICE)
            for cls in sorted(classes.rglob("*.class")):
                zf.write(cls, cls.relative_to(classes).as_posix())
        os.replace(built, target)  # atomic: a concurrent build writes the same bytes
    return str(target)


def check_command(max_heap: str = "256m") -> list[str]:
    """The command line of ``kproto.spark.jvm.LogDirCheck``: it reads each log directory named
    on its stdin (a path, then optional tab-separated ``option=value`` pairs of the source)
    through this source's planning and reader, without a Spark session, and prints one JSON
    line per input (its rows and skipped damage, a refusal, or a crash's stack trace)."""
    classpath = os.pathsep.join([jar(), str(_pyspark_jars() / "*")])
    return [_jdk_tool("java", "java"), f"-Xmx{max_heap}", "-cp", classpath, "kproto.spark.jvm.LogDirCheck"]
