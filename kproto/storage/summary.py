"""What is in a log directory, at batch level (nothing is decompressed): partitions, segments,
offset and time ranges, sizes, transactions and damage. Backs ``kproto logdir``."""
from __future__ import annotations

import os
from typing import Any

from kproto.errors import DecodeError
from kproto.records.batch import RecordBatch
from kproto.storage.checkpoints import CleanShutdown, MetaProperties, OffsetCheckpoint
from kproto.storage.layout import is_partition_dir, scan_log_dir, scan_partition_dir
from kproto.storage.partition import Damage, Partition, batch_max_timestamp
from kproto.storage.reader import first_unstable_offset

Doc = dict[str, Any]


def _range(lo: int | None, hi: int | None) -> list[int] | None:
    if lo is None:
        return None
    assert hi is not None  # the callers set both bounds together
    return [lo, hi]


def summarize_partition(part: Partition) -> Doc:
    """Per-partition facts; segment entries carry their own damage."""
    segments, damage_all = [], []
    first_offset = log_end = None
    batches_total = 0
    for seg in part.segments:
        damage: list[Damage] = []
        n = 0
        lo = hi = t_lo = t_hi = None
        for b in seg.scan(damage=damage):
            n += 1
            if lo is None:
                try:
                    lo = b.base_offset
                except DecodeError as exc:  # a legacy wrapper that does not decompress
                    damage.append(Damage(seg.files.log or seg.name, b.position, "corrupt",
                                         f"records do not decode: {exc}"))
                    lo = b.last_offset
            hi = b.last_offset + 1
            ts = batch_max_timestamp(b)
            # a delete horizon replaces the first timestamp (it is not a record time)
            first_ts = b.first_timestamp if isinstance(b, RecordBatch) \
                and not b.has_delete_horizon else ts
            for t in (first_ts, ts):
                if t >= 0:
                    t_lo = t if t_lo is None else min(t_lo, t)
                    t_hi = t if t_hi is None else max(t_hi, t)
        oi, ti = seg.offset_index, seg.time_index
        damage += seg.problems
        segments.append({
            "segment": seg.name, "base_offset": seg.base_offset, "size": seg.log_size,
            "batches": n, "offsets": _range(lo, hi), "timestamps": _range(t_lo, t_hi),
            "index_entries": len(oi), "timeindex_entries": len(ti),
            "preallocated_indexes": oi.preallocated, "indexes_rebuilt": seg.indexes_rebuilt,
            "aborted_transactions": len(seg.aborted),
            "damage": [d.to_json() for d in damage],
        })
        damage_all += damage
        batches_total += n
        if lo is not None and first_offset is None:
            first_offset = lo
        if hi is not None:
            log_end = hi
    snaps = part.snapshot_offsets
    latest = part.snapshot(snaps[-1]) if snaps else None
    fuo = first_unstable_offset(part)
    epochs = part.leader_epochs
    return {
        "topic": part.topic, "partition": part.partition, "path": part.path,
        "topic_id": part.topic_id, "segments": segments, "size": sum(s.log_size for s in part.segments),
        "batches": batches_total, "offsets": _range(first_offset, log_end),
        "leader_epochs": epochs.to_json()["entries"] if epochs else None,
        "producer_snapshots": snaps,
        "producers": len(latest.entries) if latest else None,
        "aborted_transactions": len(part.aborted),
        "first_unstable_offset": fuo,
        "damage": [d.to_json() for d in damage_all + part.problems],
        # not read: .deleted/.cleaned/.swap leftovers, KRaft quorum-state and .checkpoint files
        "other_files": [os.path.basename(f) for f in part.layout.leftovers],
    }


def _parse_file(path: str | None, parse) -> Any:
    if not path:
        return None
    with open(path, "rb") as f:
        return parse(f.read())


def summarize(path: str) -> Doc:
    """Summary of a log dir, or of one partition folder."""
    path = os.path.normpath(path)
    if is_partition_dir(path):
        return {"path": path, "partitions": [summarize_partition(Partition.open(
            scan_partition_dir(path)))]}
    layout = scan_log_dir(path)
    meta = _parse_file(layout.meta_properties, MetaProperties.parse)
    clean = _parse_file(layout.clean_shutdown, CleanShutdown.parse)
    return {
        "path": path,
        "meta_properties": meta.to_json() if meta else None,
        "clean_shutdown": clean.to_json() if clean else None,
        "checkpoints": {os.path.basename(k): _parse_file(v, OffsetCheckpoint.parse).to_json()
                        for k, v in sorted(layout.checkpoints.items())},
        "partitions": [summarize_partition(Partition.open(p)) for p in layout.partitions],
        "moved": [{"path": p.path, "topic": p.topic, "partition": p.partition, "state": p.state}
                  for p in layout.moved],
        "other": layout.others,
    }


def _fmt_range(r: list[int] | None) -> str:
    return "-" if r is None else f"[{r[0]}, {r[1]})"


def _fmt_time(r: list[int] | None) -> str:
    if r is None:
        return "-"
    import datetime as dt

    f = [dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
         for t in r]
    return f"{f[0][:-4]}Z .. {f[1][:-4]}Z"


def render_text(doc: Doc, segments: bool = True) -> str:
    """Human-readable form of :func:`summarize`."""
    out = [f"log dir {doc['path']}"]
    meta = doc.get("meta_properties")
    if meta:
        out.append("  " + ", ".join(f"{k}={v}" for k, v in meta.items()))
    if "clean_shutdown" in doc:
        cs = doc["clean_shutdown"]
        out.append(f"  clean shutdown: {'yes, broker epoch ' + str(cs['brokerEpoch']) if cs else 'no'}")
    for name, cp in doc.get("checkpoints", {}).items():
        out.append(f"  {name}: {cp['count']} entries")
    for p in doc["partitions"]:
        out.append(f"{p['topic']}-{p['partition']}  topic_id={p['topic_id']}  "
                   f"offsets {_fmt_range(p['offsets'])}  {len(p['segments'])} segments  "
                   f"{p['size']} bytes  {p['batches']} batches")
        extra = [f"producers={p['producers']}", f"aborted txns={p['aborted_transactions']}"]
        if p["first_unstable_offset"] is not None:
            extra.append(f"open txn from offset {p['first_unstable_offset']}")
        if p["leader_epochs"]:
            extra.append("epochs " + " ".join(f"{e['epoch']}@{e['start_offset']}"
                                              for e in p["leader_epochs"]))
        out.append("  " + ", ".join(extra))
        if segments:
            for s in p["segments"]:
                idx = str(s["index_entries"])
                pre = " (preallocated)" if s["preallocated_indexes"] else ""
                pre += " (rebuilt: missing or unusable)" if s["indexes_rebuilt"] else ""
                out.append(f"  {s['segment']}  {s['size']:>10} B  {s['batches']:>6} batches  "
                           f"offsets {_fmt_range(s['offsets'])}  {_fmt_time(s['timestamps'])}  "
                           f"index {idx}{pre}")
        if p["other_files"]:
            out.append("  other files (not read): " + " ".join(p["other_files"]))
        for d in p["damage"]:
            out.append(f"  DAMAGE {d['kind']}: {os.path.basename(d['file'])} at {d['position']}: "
                       f"{d['reason']} ({d['bytes_skipped']} bytes skipped)")
    for m in doc.get("moved", []):
        out.append(f"{m['topic']}-{m['partition']}: {m['state']} folder {m['path']} (not read)")
    for o in doc.get("other", []):
        out.append(f"other: {o}")
    return "\n".join(out)
