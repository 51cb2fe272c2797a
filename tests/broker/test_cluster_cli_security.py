"""``kproto cluster --security-protocol SASL_SSL``: the nodes' listeners and links on TLS and
SCRAM from the command line; kproto's client produces and reads back with a user's
credentials, and a wrong password is refused. ``kproto broker`` takes the same options."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest

pytest.importorskip("cryptography")


def _serve(args, n):
    proc = subprocess.Popen([sys.executable, "-m", "kproto", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines = [proc.stdout.readline().strip() for _ in range(n)]
    if not all(line.startswith("listening on ") for line in lines):
        proc.kill()
        raise AssertionError((lines, proc.stderr.read()[-3000:]))
    return proc, ",".join(line.split()[-1] for line in lines)


def _roundtrip(bootstrap, ca, sasl, topic, rf):
    from kproto.client.admin import Admin
    from kproto.client.cluster import Cluster
    from kproto.client.consumer import Consumer
    from kproto.client.producer import Producer

    async def main():
        async with Cluster(bootstrap, sasl=sasl, ssl=ca.client_context()) as cluster:
            await Admin(cluster).create_topics({topic: 1}, replication_factor=rf)
            producer = await Producer(cluster).start()
            for i in range(5):
                await producer.send(topic, b"r%d" % i, partition=0)
            await producer.flush()
            await producer.close()
            consumer = await Consumer(cluster, [topic]).start()
            got = []
            for _ in range(30):
                got += [r.value for r in await consumer.getmany(timeout=1)]
                if len(got) >= 5:
                    break
            await consumer.close()
            return got
    return asyncio.run(asyncio.wait_for(main(), 90))


def test_cli_cluster_and_broker_sasl_ssl(tmp_path):
    from kproto.client.protocol import SaslConfig
    from kproto.client.sasl import SaslAuthenticationError
    from kproto.testing.tls import TestCA

    ca = TestCA(tmp_path / "ca")
    node = ca.issue("CN=kproto-node", name="node")
    common = ["--security-protocol", "SASL_SSL", "--ssl-cert", node.cert, "--ssl-key", node.key,
              "--ssl-ca", ca.cert, "--sasl-user", "broker=b-secret", "--sasl-user", "alice=a-secret"]
    proc, bootstrap = _serve(["cluster", "--brokers", "2", "--data", str(tmp_path / "c"),
                              "--session-timeout-ms", "3000", "--heartbeat-interval-ms", "500",
                              *common], 2)
    single, single_bootstrap = _serve(["broker", "--data", str(tmp_path / "b"), *common,
                                       "--sasl-mechanisms", "PLAIN,SCRAM-SHA-256"], 1)
    try:
        alice = SaslConfig("SCRAM-SHA-512", "alice", "a-secret")
        assert _roundtrip(bootstrap, ca, alice, "cli-secure", 2) == [b"r%d" % i for i in range(5)]
        with pytest.raises(SaslAuthenticationError):
            _roundtrip(bootstrap, ca, SaslConfig("SCRAM-SHA-512", "alice", "nope"), "x", 2)
        plain = SaslConfig("PLAIN", "alice", "a-secret")
        assert _roundtrip(single_bootstrap, ca, plain, "b-secure", 1) == [b"r%d" % i for i in range(5)]
    finally:
        for p in (proc, single):
            p.send_signal(signal.SIGTERM)
        for p in (proc, single):
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err[-3000:]


def test_cli_refuses_inconsistent_security_options(tmp_path):
    out = subprocess.run([sys.executable, "-m", "kproto", "cluster", "--data", str(tmp_path / "c"),
                          "--security-protocol", "SASL_PLAINTEXT"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "--sasl-user" in out.stderr
    out = subprocess.run([sys.executable, "-m", "kproto", "broker", "--data", str(tmp_path / "b"),
                          "--security-protocol", "SSL"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--ssl-cert" in out.stderr


def test_cli_token_secret_and_inter_broker_protocol():
    from kproto.cli import security
    from kproto.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["cluster", "--data", "d", "--security-protocol", "SASL_PLAINTEXT", "--sasl-user", "broker=b",
                              "--inter-broker-protocol", "PLAINTEXT", "--delegation-token-secret-key", "s3"])
    out = security.settings(args, cluster=True)
    assert (out["inter_broker_protocol"], out["delegation_token_secret_key"]) == ("PLAINTEXT", "s3")
    args = parser.parse_args(["broker", "--data", "d", "--security-protocol", "SASL_PLAINTEXT", "--sasl-user", "a=b",
                              "--delegation-token-secret-key", "s3"])
    out = security.settings(args, cluster=False)
    assert out["delegation_token_secret_key"] == "s3" and "inter_broker_protocol" not in out
    assert "inter_broker_protocol" not in security.settings(parser.parse_args(["cluster", "--data", "d"]), cluster=True)


def test_cli_refuses_an_ssl_inter_broker_listener_without_certificates(tmp_path):
    out = subprocess.run([sys.executable, "-m", "kproto", "cluster", "--data", str(tmp_path / "c"),
                          "--inter-broker-protocol", "SSL"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "inter-broker listener needs ssl_context" in out.stderr
