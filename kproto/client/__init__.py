"""Building blocks of a Kafka client, sans-I/O where possible.

- :mod:`kproto.client.partitioner`: murmur2 and the Java producer's built-in (sticky) partitioner.
- :mod:`kproto.client.assignors`: the range, round-robin, sticky and cooperative-sticky assignors.
- :mod:`kproto.client.consumer_protocol`: consumer-group subscription/assignment bytes.
- :mod:`kproto.client.sasl`: SASL PLAIN and SCRAM-SHA-256/512 client state machines.
"""
