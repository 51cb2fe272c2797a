"""Schemas from Kafka's group-coordinator/ specs (generated)."""
