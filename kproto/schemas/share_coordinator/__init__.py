"""Schemas from Kafka's share-coordinator/ specs (generated)."""
