"""The broker's coordinators: state kept in internal topics and rebuilt from them on load.

- :mod:`~kproto.broker.coordinators.offsets_topic`: the ``__consumer_offsets`` keys and
  partitioning shared by both group coordinators.
- :mod:`~kproto.broker.coordinators.group`: the classic group coordinator.
- :mod:`~kproto.broker.coordinators.consumer_group`: the KIP-848 consumer group coordinator.
- :mod:`~kproto.broker.coordinators.txn`: the transaction coordinator over
  ``__transaction_state``.
- :mod:`~kproto.broker.coordinators.share_group`: the KIP-932 share group coordinator
  (membership, assignment, the share offset admin APIs).
- :mod:`~kproto.broker.coordinators.share_assignor`: Kafka's share-group assignor.
- :mod:`~kproto.broker.coordinators.share_state`: the share-group state persister over
  ``__share_group_state``.
"""
