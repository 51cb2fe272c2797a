"""The broker's security: who a connection is and what it may do.

- :mod:`~kproto.broker.security.auth`: SASL (PLAIN, SCRAM-SHA-256/512) on the broker's side.
- :mod:`~kproto.broker.security.acl`: ACLs and the authorizer (Kafka's ``StandardAuthorizer``).
- :mod:`~kproto.broker.security.authz`: which rights each request needs (Kafka's ``KafkaApis``
  checks).
"""
