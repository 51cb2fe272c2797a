#!/usr/bin/env bash
# Set up a fresh machine for kproto's development: the package with its dev and Spark extras
# (editable, C accelerators compiled), and Debian's Chromium, which the report tests open
# pages in (no browser download is possible here). .ci/run runs this too.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q -e ".[dev,spark]"
if [ ! -x /usr/bin/chromium ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }
fi

# tcpdump (and kcat, a librdkafka client of another release): the live-capture tests record
# clients' traffic with Apache Kafka on loopback (skipped without them, failed under CI);
# tshark (Wireshark's reading of each capture, printed beside kproto's and compared with it).
# Installed when missing and possible (root with apt); setup goes on either way. tshark's
# wireshark-common asks whether users other than root may capture: answered no beforehand
# (debconf), so the install never stops at a question.
if ! command -v tcpdump >/dev/null 2>&1 || ! command -v kcat >/dev/null 2>&1 \
        || ! command -v tshark >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v debconf-set-selections >/dev/null 2>&1; then
        echo "wireshark-common wireshark-common/install-setuid boolean false" \
            | debconf-set-selections >/dev/null 2>&1 || true
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
        && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q tcpdump kcat tshark >/dev/null 2>&1 \
             || { apt-get update -q >/dev/null 2>&1 \
                  && DEBIAN_FRONTEND=noninteractive apt-get install -y -q tcpdump kcat tshark >/dev/null 2>&1; }; }; then
        echo "setup: tcpdump, kcat and tshark installed (apt)"
    else
        echo "setup: tcpdump/kcat/tshark not installed (needs root and apt): the live-capture tests will skip"
    fi
fi

# Apache Kafka's jars (server, tools, Java clients) and Spark's Kafka source for the installed
# pyspark into a cache outside the repository
bash tools/kafka/fetch.sh
