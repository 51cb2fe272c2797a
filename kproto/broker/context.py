"""What the broker's coordinators and managers use of it.

:class:`BrokerCore` builds the group and transaction coordinators, the admin handlers and the
retention manager and hands itself to them; they see it through :class:`BrokerContext`, so they
depend on this narrow face and not on the core that depends on them.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Protocol

from kproto.broker.configs import BrokerConfig, ConfigManager
from kproto.broker.group_configs import GroupConfigs
from kproto.broker.log import LogManager
from kproto.broker.purgatory import DelayedOperationPurgatory
from kproto.broker.timer import Clock, SystemTimer
from kproto.codecs.primitives import Uuid
from kproto.storage.metadata_image import PartitionInfo

__all__ = ["BrokerContext"]


class BrokerContext(Protocol):
    """The broker's settings, logs, configs, clocks, timer and fetch purgatory, its producer id
    allocation and partition leadership."""

    config: BrokerConfig
    logs: LogManager
    configs: ConfigManager
    #: groups' own configs (IncrementalAlterConfigs of resource type GROUP)
    group_configs: GroupConfigs
    clock: Clock
    timer: SystemTimer
    #: wall-clock milliseconds (record timestamps; the timer runs on ``clock``)
    wall_ms: Callable[[], int]
    #: fetches waiting for data: a write that can complete them checks its partition's key
    fetch_purgatory: DelayedOperationPurgatory[Any]

    def allocate_producer_id(self) -> int: ...

    def transaction_version(self) -> int:
        """The finalized transaction.version (2: KIP-890 part 2's protocol)."""
        ...

    def leads(self, topic: str, partition: int) -> bool:
        """Whether this broker is the partition's leader (a single broker leads them all)."""
        ...

    def appended_internal(self, log: Any) -> None:
        """A coordinator appended to ``log`` (an internal topic's partition)."""
        ...

    def when_replicated(self, log: Any, offset: int, then: Callable[[int], None],
                        timeout_ms: int) -> None:
        """Call ``then(error code)`` once ``offset`` of ``log`` is committed (replicated to the
        ISR: at once on a single broker), with NOT_COORDINATOR if leadership was lost first
        and REQUEST_TIMED_OUT after ``timeout_ms``."""
        ...

    def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                          commit: bool, partitions: set[tuple[str, int]], done: Callable[[], None]) -> None:
        """Have a transaction's markers written to its partitions, then call ``done()``."""
        ...

    def has_partition(self, topic: str, partition: int) -> bool:
        """Whether the partition exists in the cluster (hosted here or not)."""
        ...

    def verify_txn_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                              partitions: list[tuple[str, int]], add: bool,
                              then: Callable[[dict[tuple[str, int], int]], None]) -> None:
        """KIP-890: ask the transaction coordinator whether the partitions are in the
        producer's transaction (``add``: put them in), then ``then(codes)`` with its answer."""
        ...

    def known_topics(self) -> Mapping[str, tuple[Uuid, int, bool]]:
        """Every topic of the cluster: name -> (topic id, partition count, internal)."""
        ...

    def reserve_producer_id(self, pid: int) -> None: ...

    def partition_states(self, topic: str) -> Optional[list[PartitionInfo]]:
        """A topic's partitions as the cluster's metadata has them, by index (None: no such topic)."""
        ...

    def broker_ids(self, alive: bool) -> list[int]:
        """The registered brokers' ids in order (``alive``: only those not fenced)."""
        ...
