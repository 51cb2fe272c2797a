"""Schemas from Kafka's streams/ specs (generated)."""
