"""Schemas from Kafka's raft/ specs (generated)."""
