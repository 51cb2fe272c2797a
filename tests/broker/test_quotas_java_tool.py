"""Kafka's own tool sets and reads quotas on kproto's broker: ``kafka-configs.sh`` (Kafka
4.4.0's ConfigCommand, through its AdminClient's AlterClientQuotas and DescribeClientQuotas)."""
from __future__ import annotations

from typing import Any

from kproto.testing import require_apache_kafka


def test_kafka_configs_sets_and_describes_client_quotas(kafka_broker: Any) -> None:
    require_apache_kafka()
    from kproto.testing.apache import DEFAULT_VERSION, run_tool

    def config_command(*args: str) -> str:
        r = run_tool(DEFAULT_VERSION, "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server",
                     kafka_broker.bootstrap, *args, timeout=120)
        return r.stdout.strip()
    assert config_command("--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048",
                          "--entity-type", "clients", "--entity-name", "app") == "Completed updating config for client app."
    assert config_command("--describe", "--entity-type", "clients", "--entity-name", "app") == \
        "Quota configs for client-id 'app' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0"
