"""Schemas from Kafka's message/ specs (generated)."""
