"""Schemas from Kafka's transaction-coordinator/ specs (generated)."""
