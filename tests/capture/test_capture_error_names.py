"""The error-name table against an independent one (kafka-python's ``kafka.errors``)."""
from __future__ import annotations

import inspect

import kafka.errors as ke

from kproto.error_codes import ERROR_NAMES, error_name

# kafka-python keeps older spellings for these; ours are Java's Errors enum names (Kafka 3.9)
OLD_SPELLINGS = {-1: "UNKNOWN", 0: "NO_ERROR", 6: "NOT_LEADER_FOR_PARTITION",
                 10: "MESSAGE_SIZE_TOO_LARGE", 17: "INVALID_TOPIC", 39: "INVALID_REPLICATION_ASSIGNMENT"}


def test_names_agree_with_kafka_python():
    theirs = {c.errno: c.message for _, c in inspect.getmembers(ke, inspect.isclass)
              if issubclass(c, ke.BrokerResponseError) and isinstance(getattr(c, "errno", None), int)}
    assert len(theirs) > 120
    for code, name in theirs.items():
        assert name == OLD_SPELLINGS.get(code, ERROR_NAMES[code]), code
    assert error_name(35) == "UNSUPPORTED_VERSION" and error_name(9999) == "UNKNOWN_ERROR_9999"
