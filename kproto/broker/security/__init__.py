"""The broker's security: who a connection is and what it may do.

- :mod:`~kproto.broker.security.auth`: SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) on the
  broker's side, sessions and re-authentication.
- :mod:`~kproto.broker.security.oauth`: OAUTHBEARER's messages and token validators (unsecured,
  JWKS).
- :mod:`~kproto.broker.security.tokens`: delegation tokens (KIP-48): the four token APIs,
  their metadata records, the HMAC a token authenticates with over SCRAM.
- :mod:`~kproto.broker.security.tls`: TLS client-certificate principals
  (``ssl.principal.mapping.rules``).
- :mod:`~kproto.broker.security.acl`: ACLs and the authorizer (Kafka's ``StandardAuthorizer``).
- :mod:`~kproto.broker.security.authz`: which rights each request needs (Kafka's ``KafkaApis``
  checks).
"""
