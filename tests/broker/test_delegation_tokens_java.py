"""Apache Kafka's own Java clients with delegation tokens, on kproto's broker and on Apache
Kafka 4.4.0 alike: ``kafka-delegation-tokens --create`` (Kafka's DelegationTokenCommand over
its AdminClient) makes a token as a SCRAM user, and ``kafka-topics --list`` (TopicCommand)
authenticates with it alone (``ScramLoginModule ... tokenauth="true"``); a wrong HMAC is
refused."""
from __future__ import annotations

import re

import pytest

from kproto.testing import BrokerThread
from kproto.testing import apache
from test_security_vs_apache import APACHE, SCRAM_USERS, TOKEN_SECRET  # noqa: E402

pytestmark = pytest.mark.apache_kafka(**APACHE)

_SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def _properties(path, username: str, password: str, token: bool = False) -> str:
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                    f'sasl.jaas.config={_SCRAM} required username="{username}" password="{password}"'
                    + (' tokenauth="true"' if token else "") + ";\n")
    return str(path)


def _java_with_tokens(bootstrap: str, tmp) -> tuple:
    tmp.mkdir()
    created = apache.run_tool(apache.DEFAULT_VERSION, "org.apache.kafka.tools.DelegationTokenCommand",
                              "--bootstrap-server", bootstrap, "--command-config",
                              _properties(tmp / "alice.properties", "alice", SCRAM_USERS["alice"]),
                              "--create", "--max-life-time-period", "-1")
    m = re.search(r"^(\S{22}) (\S+) User:alice\s+User:alice ", created.stdout, re.M)
    assert m, created.stdout
    token_id, hmac = m.groups()
    listed = apache.run_tool(apache.DEFAULT_VERSION, "org.apache.kafka.tools.TopicCommand",
                             "--bootstrap-server", bootstrap, "--list", "--command-config",
                             _properties(tmp / "token.properties", token_id, hmac, token=True), check=False)
    refused = apache.run_tool(apache.DEFAULT_VERSION, "org.apache.kafka.tools.TopicCommand",
                              "--bootstrap-server", bootstrap, "--list", "--command-config",
                              _properties(tmp / "bad.properties", token_id, "AAAA" + hmac[4:], token=True),
                              check=False, timeout=60)
    return listed.returncode, refused.returncode != 0 and "SaslAuthenticationException" in refused.stderr + refused.stdout


def test_java_clients_create_and_use_a_token(apache_kafka, tmp_path):
    on_apache = _java_with_tokens(apache_kafka.sasl_bootstrap, tmp_path / "apache")
    with BrokerThread(tmp_path / "k", sasl_enabled_mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                      sasl_users=SCRAM_USERS, delegation_token_secret_key=TOKEN_SECRET) as b:
        on_kproto = _java_with_tokens(b.bootstrap, tmp_path / "kproto")
    assert on_apache == (0, True)
    assert on_kproto == on_apache
