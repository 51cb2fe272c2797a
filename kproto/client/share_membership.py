"""The member side of Kafka's share group protocol (KIP-932), sans-I/O.

:class:`ShareConsumerMembership` is :class:`~kproto.client.membership.ConsumerMembership` with
the requests of a share group: ShareGroupHeartbeat carries the member id, its epoch, the rack and
the subscribed topic names only (no rebalance timeout, no owned partitions, no static members, no
server assignor). The state machine is the same as Kafka's ``ShareMembershipManager``: join with
epoch 0, take each target assignment the broker sends (RECONCILING, then ACKNOWLEDGING: the next
heartbeat goes at once), rejoin with epoch 0 when fenced, leave with epoch -1::

    m = ShareConsumerMembership("g", topics=["events"])
    m.join()
    req = m.heartbeat_request(now)                 # epoch 0, subscription
    m.on_heartbeat_response(resp, now)             # epoch, interval, target assignment
    plan = m.reconcile(topic_names)                # what to stop and start fetching
    m.reconciled(plan)

A share group's partitions are not owned exclusively: the broker may give one partition to
several members, and records, not partitions, are what a member holds (acquired with a lock).
So a revocation needs no commit: the consumer stops fetching the partition and acknowledges what
it holds of it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kproto.client.membership import (JOIN_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, ConsumerMembership,
                                      MemberState, _Sent)
from kproto.codecs import request as _request_codec
from kproto.schemas.api_keys import ApiKey

__all__ = ["ShareConsumerMembership"]


@dataclass
class ShareConsumerMembership(ConsumerMembership):
    """A share group member (KIP-932), sans-I/O: see the module's documentation. ``topics`` is
    the subscription (share groups have no pattern subscription and no static members)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pattern is not None or self.instance_id is not None or self.server_assignor is not None:
            raise ValueError("a share group member has no pattern, instance id or server assignor")

    def subscribe(self, topics: Any = (), pattern: Any = None) -> None:
        """Change the subscription; the next heartbeat sends it (and joins when unsubscribed)."""
        if pattern is not None:
            raise ValueError("a share group member subscribes to topic names only")
        super().subscribe(topics)

    def heartbeat_request(self, now: float, cls: Any = None) -> Any:
        """The next ShareGroupHeartbeatRequest, marked in flight: joining sends the rack and the
        subscription, later heartbeats the subscription only when it changed (null otherwise,
        as Kafka's ``ShareHeartbeatRequestManager`` writes it); leaving sends epoch -1."""
        if cls is None:
            cls = _request_codec(ApiKey.SHARE_GROUP_HEARTBEAT).cls
        self.in_flight = True
        self._leave_in_flight = self.state is MemberState.LEAVING
        if self._leave_in_flight:
            return cls(group_id=self.group_id, member_id=self.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH)
        joining = self.state is MemberState.JOINING
        req = cls(group_id=self.group_id, member_id=self.member_id,
                  member_epoch=JOIN_GROUP_MEMBER_EPOCH if joining else self.member_epoch)
        if joining:
            req.rack_id = self.rack_id
        subscription = (tuple(self.topics), None)
        if joining or self._sent.subscription != subscription:
            req.subscribed_topic_names = list(self.topics)
        self._sending = _Sent(self.rebalance_timeout_ms, subscription, None, self.owned_ids)
        return req
