"""Schemas from Kafka's metadata/ specs (generated)."""
