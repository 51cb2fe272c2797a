#!/usr/bin/env bash
# Apache Kafka for the tests that run it (kproto.testing.apache), and the Java client for the
# interop tests and benchmarks: jars resolved by Maven from Maven Central into a cache outside
# the repository,
#   ${KPROTO_KAFKA_CACHE:-~/.cache/kproto/kafka}/<version>/libs          server, tools, clients
#   ${KPROTO_KAFKA_CACHE:-~/.cache/kproto/kafka}/clients-<version>/libs  kafka-clients + codecs
#   ${KPROTO_KAFKA_CACHE:-~/.cache/kproto/kafka}/spark-kafka-<pyspark version>/libs
#       Spark's own Kafka source (spark-sql-kafka-0-10) for the installed pyspark, beside which
#       the kafka-segments tests and benchmark put kproto's (kproto.testing.spark)
# A stamp per folder (version and the pom's hash) makes a warm run a few file checks; a folder
# is filled under a temporary name and renamed when complete. tools/setup.sh runs this.
set -euo pipefail
cd "$(dirname "$0")"
KAFKA_SERVERS="${KPROTO_KAFKA_SERVERS:-4.4.0 4.3.1}"
KAFKA_CLIENTS="${KPROTO_KAFKA_CLIENTS:-4.4.0 3.9.1}"
cache="${KPROTO_KAFKA_CACHE:-$HOME/.cache/kproto/kafka}"

need_tools() {
    if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
        # a fresh Debian machine (CI): the JDK and Maven from its packages, as setup.sh's Chromium
        if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless maven >/dev/null 2>&1 \
                || { apt-get update -q >/dev/null 2>&1 \
                     && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless maven >/dev/null 2>&1; } || true
        fi
    fi
    command -v java >/dev/null || { echo "fetch.sh: Java 17+ (java) is needed to run Apache Kafka: install openjdk-17-jdk-headless" >&2; exit 1; }
    command -v mvn >/dev/null || { echo "fetch.sh: Maven (mvn) is needed to fetch Apache Kafka's jars: install maven" >&2; exit 1; }
}

fetch() {  # pom, version, folder under the cache[, the pom's version property]
    local pom="$1" version="$2" dest="$cache/$3" property="${4:-kafka.version}"
    local stamp
    stamp="$version $(sha256sum "$pom" | cut -d' ' -f1)"
    if [ -f "$dest/.complete" ] && [ "$(cat "$dest/.complete")" = "$stamp" ]; then
        return
    fi
    need_tools
    local tmp="$dest.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    if ! mvn -q -B -f "$pom" -D"$property"="$version" -Dout="$tmp/libs" \
            dependency:copy-dependencies >"$tmp/mvn.log" 2>&1; then
        echo "fetch.sh: Maven could not fetch Apache Kafka $version ($pom); its last lines:" >&2
        tail -20 "$tmp/mvn.log" >&2
        rm -rf "$tmp"
        exit 1
    fi
    rm -f "$tmp/mvn.log"
    echo "$version" >"$tmp/version"
    echo "$stamp" >"$tmp/.complete"
    rm -rf "$dest"
    mv "$tmp" "$dest"
    echo "$3 ($version): $(ls "$dest/libs" | wc -l) jars in $dest/libs"
}

# Spark's Kafka source at the installed pyspark's version; Maven Central has none for some
# pyspark releases (4.3.0): then the newest release of the same major version before it
spark_kafka() {
    local pyspark dest candidates v
    pyspark="$(python -c 'import importlib.metadata as m; print(m.version("pyspark"))' 2>/dev/null)" || return 0
    dest="spark-kafka-$pyspark"
    if [ -f "$cache/$dest/.complete" ] \
            && [ "$(cut -d' ' -f2 "$cache/$dest/.complete")" = "$(sha256sum spark-kafka-pom.xml | cut -d' ' -f1)" ]; then
        return
    fi
    candidates="$(python - "$pyspark" <<'PY'
import re, sys, urllib.request
want = tuple(int(x) for x in sys.argv[1].split(".")[:3])
print(sys.argv[1])
url = ("https://repo.maven.apache.org/maven2/org/apache/spark/"
       "spark-sql-kafka-0-10_2.13/maven-metadata.xml")
try:
    text = urllib.request.urlopen(url, timeout=30).read().decode()
except OSError:
    sys.exit(0)
found = [tuple(int(x) for x in v.split(".")) for v in
         re.findall(r"<version>(\d+\.\d+\.\d+)</version>", text)]
older = sorted((v for v in found if v[0] == want[0] and v < want), reverse=True)
print("\n".join(".".join(map(str, v)) for v in older[:1]))
PY
)"
    for v in $candidates; do
        if [ "$v" != "$pyspark" ]; then
            echo "fetch.sh: Maven Central has no spark-sql-kafka-0-10 $pyspark; using $v" >&2
        fi
        if ( fetch spark-kafka-pom.xml "$v" "$dest" spark.version ) 2>/dev/null; then
            return
        fi
    done
    echo "fetch.sh: no spark-sql-kafka-0-10 for pyspark $pyspark; the tests beside Spark's Kafka source will be skipped" >&2
}

mkdir -p "$cache"
for v in $KAFKA_SERVERS; do fetch pom.xml "$v" "$v"; done
for v in $KAFKA_CLIENTS; do fetch clients-pom.xml "$v" "clients-$v"; done
spark_kafka
