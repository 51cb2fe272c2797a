"""Broker log directories read and written offline: segments, their indexes, producer
snapshots, checkpoints, and every record as Arrow.

    import kproto.storage as ks
    table = ks.read_arrow("/var/lib/kafka/data", isolation="read_committed")   # pyarrow.Table
    for rb in ks.iter_arrow(path, topics=["orders"]): ...                       # large data
    splits = ks.plan_splits(path, split_bytes=64 << 20); ks.read_split(splits[0])  # distributed
    found = kproto.Problems(); ks.read_arrow(path, problems=found)  # torn tails, bad CRCs...
    ks.read_internal(path)["PartitionChangeRecord"]     # internal topics as typed tables
    ks.Partition.open("/var/lib/kafka/data/orders-0").offset_for_timestamp(ts)
    w = ks.PartitionWriter(out_dir, "orders", 0); w.append(batch_bytes); w.close()
    w = ks.PartitionWriter.open(out_dir, "orders", 0)   # continue it, as a restarted broker

Sans-I/O parsers/encoders live in ``indexes``, ``snapshot`` and ``checkpoints``; ``layout``
finds the files; ``partition`` scans segments (damage, index-aware seeks); ``reader`` turns
them into Arrow; ``writer`` lays out partitions as a broker does; ``internal`` decodes the
internal topics; ``dump`` renders files as JSON.
"""
from __future__ import annotations

from kproto.storage.checkpoints import (CleanShutdown, EpochEntry, LeaderEpochCheckpoint,
                                        MetaProperties, OffsetCheckpoint, PartitionMetadata,
                                        QuorumState)
from kproto.storage.dump import dump_bytes, dump_file
from kproto.storage.indexes import (AbortedTxn, IndexBuilder, OffsetIndex, TimeIndex,
                                    collect_aborted, encode_txn_index, parse_txn_index)
from kproto.storage.layout import (LogDirLayout, PartitionDir, SegmentFiles, file_kind,
                                   parse_partition_dir_name, scan_log_dir, scan_partition_dir)
from kproto.storage.snapshot import (ProducerEntry, ProducerSnapshot, encode_snapshot,
                                     parse_snapshot)

# the record-level parts need kproto.records and pyarrow: imported on first use
_LAZY = {
    "Partition": "kproto.storage.partition",
    "Segment": "kproto.storage.partition", "rebuild_indexes": "kproto.storage.partition",
    "ReadOptions": "kproto.storage.reader", "Split": "kproto.storage.reader",
    "arrow_schema": "kproto.storage.reader", "iter_arrow": "kproto.storage.reader",
    "plan_splits": "kproto.storage.reader", "read_arrow": "kproto.storage.reader",
    "read_split": "kproto.storage.reader",
    "first_unstable_offset": "kproto.storage.reader",
    "LogDirWriter": "kproto.storage.writer", "PartitionWriter": "kproto.storage.writer",
    "PartitionLog": "kproto.storage.writer", "ProducerStateTracker": "kproto.storage.writer",
    "rebuild_txn_index": "kproto.storage.writer",
    "decode_internal_record": "kproto.storage.internal",
    "read_internal": "kproto.storage.internal",
    "write_sample_log_dir": "kproto.storage.sample",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kproto.storage' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value

__all__ = [
    "AbortedTxn", "CleanShutdown", "EpochEntry", "IndexBuilder", "LeaderEpochCheckpoint",
    "LogDirLayout", "MetaProperties", "OffsetCheckpoint", "OffsetIndex", "PartitionDir",
    "PartitionMetadata", "ProducerEntry", "ProducerSnapshot", "QuorumState", "SegmentFiles",
    "TimeIndex",
    "collect_aborted", "dump_bytes", "dump_file", "encode_snapshot", "encode_txn_index",
    "file_kind", "parse_partition_dir_name", "parse_snapshot", "parse_txn_index",
    "scan_log_dir", "scan_partition_dir", *_LAZY,
]
