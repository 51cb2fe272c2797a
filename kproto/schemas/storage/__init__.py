"""Schemas from Kafka's storage/ specs (generated)."""
