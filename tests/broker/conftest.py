"""The broker tests use kproto.testing's fixture as users do."""
from kproto.testing import kafka_broker, pytest_configure  # noqa: F401  (fixture, marker registration)
