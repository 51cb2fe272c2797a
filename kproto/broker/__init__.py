"""A Kafka broker in Python built from Kafka's own designs (issue 16).

- :mod:`~kproto.broker.timer`: hierarchical timing wheel (``TimingWheel``/``SystemTimer``).
- :mod:`~kproto.broker.purgatory`: delayed operations (``DelayedOperationPurgatory``).
- :mod:`~kproto.broker.log`: partition logs in Kafka's layout through :mod:`kproto.storage`.
- :mod:`~kproto.broker.group`: the classic group coordinator over ``__consumer_offsets``.
- :mod:`~kproto.broker.txn`: the transaction coordinator over ``__transaction_state``.
- :mod:`~kproto.broker.core`: the sans-I/O request handling (:class:`BrokerCore`).
- :mod:`~kproto.broker.server`: the asyncio TCP layer, :class:`Broker`.

    async with Broker(data_dir) as broker:       # port 0: a free port on 127.0.0.1
        ... broker.bootstrap ...
"""
from __future__ import annotations

from kproto.broker.configs import BrokerConfig
from kproto.broker.core import BrokerCore, ControlHandle, Intercept
from kproto.broker.log import LogConfig
from kproto.broker.server import Broker

__all__ = ["Broker", "BrokerConfig", "BrokerCore", "ControlHandle", "Intercept", "LogConfig"]
