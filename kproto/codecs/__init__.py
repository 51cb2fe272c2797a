"""How Kafka messages are made and read: one codec per message, byte-exact with Apache Kafka.

>>> from kproto.codecs import message, request
>>> codec = message("ProduceRequest")                 # or request(0) / response(0)
>>> obj = codec.decode(data, 9)                        # message object, snake_case attributes
>>> codec.encode(obj, 9) == data                       # byte-exact with Apache Kafka

The engine is :mod:`kproto.codecs.engine`; :mod:`~kproto.codecs.primitives` holds the wire
types, :mod:`~kproto.codecs.generator` and :mod:`~kproto.codecs.program` turn a schema into
code, :mod:`~kproto.codecs.json_convention` into Kafka's JSON.
"""
from __future__ import annotations

from kproto.codecs.engine import (KAFKA_VERSION, RELEASES, MessageCodec, api_keys,
                                  coordinator_record, message, messages, metadata_record, request,
                                  response, schema)
from kproto.codecs.objects import MessageObject
from kproto.codecs.primitives import Uuid
from kproto.codecs.program import clear_pools

__all__ = ["MessageCodec", "message", "request", "response", "messages", "schema", "Uuid",
           "MessageObject", "KAFKA_VERSION", "RELEASES", "metadata_record", "coordinator_record",
           "api_keys", "clear_pools"]
