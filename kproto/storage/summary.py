"""What is in a log directory, at batch level (nothing is decompressed): partitions, segments,
offset and time ranges, sizes, transactions and damage. Backs ``kproto logdir``."""
from __future__ import annotations

import os
from typing import Any

from kproto.errors import DecodeError
from kproto.problems import Problems
from kproto.records.batch import RecordBatch
from kproto.storage.checkpoints import CleanShutdown, MetaProperties, OffsetCheckpoint, QuorumState
from kproto.storage.layout import is_partition_dir, scan_log_dir, scan_partition_dir
from kproto.storage.partition import (Partition, batch_max_timestamp, read_file,
                                      read_log_start_offsets, scan_batches)
from kproto.storage.reader import first_unstable_offset

Doc = dict[str, Any]


def _range(lo: int | None, hi: int | None) -> list[int] | None:
    if lo is None:
        return None
    assert hi is not None  # the callers set both bounds together
    return [lo, hi]


def summarize_partition(part: Partition) -> Doc:
    """Per-partition facts; segment entries carry their own damage. ``offsets`` is what the
    segments hold, ``log_start_offset`` where a consumer can start (the log dir's
    ``log-start-offset-checkpoint`` when it is above the first offset on disk)."""
    segments = []
    damage_all = Problems()
    first_offset = log_end = None
    batches_total = 0
    for seg in part.segments:
        damage = Problems(topic=part.topic, partition=part.partition)
        n = 0
        lo = hi = t_lo = t_hi = None
        for b in seg.scan(problems=damage):
            n += 1
            if lo is None:
                try:
                    lo = b.base_offset
                except DecodeError as exc:  # a legacy wrapper that does not decompress
                    damage.report("corrupt", f"records do not decode: {exc}",
                                  source=seg.files.log or seg.name, position=b.position)
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
        aborted = seg.aborted  # read before the segment's problems are collected
        damage.extend(seg.problems)
        segments.append({
            "segment": seg.name, "base_offset": seg.base_offset, "size": seg.log_size,
            "batches": n, "offsets": _range(lo, hi), "timestamps": _range(t_lo, t_hi),
            "index_entries": len(oi), "timeindex_entries": len(ti),
            "preallocated_indexes": oi.preallocated, "indexes_rebuilt": seg.indexes_rebuilt,
            "aborted_transactions": len(aborted),
            "damage": damage.to_json(),
        })
        damage_all.extend(damage)
        batches_total += n
        if lo is not None and first_offset is None:
            first_offset = lo
        if hi is not None:
            log_end = hi
    log_start = first_offset if first_offset is not None else (
        part.segments[0].base_offset if part.segments else None)
    if part.checkpoint_start_offset is not None:
        log_start = part.checkpoint_start_offset if log_start is None \
            else max(log_start, part.checkpoint_start_offset)
    snaps = part.snapshot_offsets
    # every snapshot is read (they are small) so that a damaged one is reported
    read = [part.snapshot(o) for o in snaps]
    latest = read[-1] if read else None
    fuo = first_unstable_offset(part)
    epochs = part.leader_epochs
    extra: Doc = {}
    if part.layout.quorum_state:
        quorum = read_file(part.layout.quorum_state, QuorumState.parse, part.problems)
        extra["quorum_state"] = quorum.to_json() if quorum else None
    if part.layout.metadata_snapshots:
        extra["metadata_snapshots"] = [
            {"end_offset": o, "epoch": e, **summarize_metadata_records(p, part.problems)}
            for o, e, p in part.layout.metadata_snapshots]
    return {
        "topic": part.topic, "partition": part.partition, "path": part.path,
        "topic_id": part.topic_id, "segments": segments, "size": sum(s.log_size for s in part.segments),
        "batches": batches_total, "offsets": _range(first_offset, log_end),
        "log_start_offset": log_start,
        "leader_epochs": epochs.to_json()["entries"] if epochs else None,
        "producer_snapshots": snaps,
        "producers": len(latest.entries) if latest else None,
        "aborted_transactions": len(part.aborted),
        "first_unstable_offset": fuo,
        **extra,
        "damage": damage_all.to_json() + part.problems.to_json(),
        # not read: .deleted/.cleaned/.swap leftovers and files that are not Kafka's
        "other_files": [os.path.basename(f) for f in part.layout.leftovers],
    }


def summarize_metadata_records(path: str, problems: Problems) -> Doc:
    """Batches and records of a file of KRaft metadata batches (``bootstrap.checkpoint``, a
    ``__cluster_metadata`` snapshot), and the ``metadata.version`` feature level it sets."""
    from kproto.storage.internal import decode_metadata_frame

    data = read_file(path, bytes, problems) or b""
    batches = records = 0
    level = None
    for batch in scan_batches(data, problems=problems.scope(source=path)):
        batches += 1
        if isinstance(batch, RecordBatch) and batch.is_control:
            records += batch.count
            continue
        try:
            for r in batch.records():
                records += 1
                rec = decode_metadata_frame(r.value) if r.value is not None else None
                if rec and rec["type"] == "FEATURE_LEVEL_RECORD" \
                        and rec["data"].get("name") == "metadata.version":
                    level = rec["data"].get("featureLevel")
        except DecodeError as exc:
            problems.report("record", exc.reason, source=path, position=batch.position)
    return {"path": path, "batches": batches, "records": records, "metadata_version": level}


def summarize(path: str) -> Doc:
    """Summary of a log dir, or of one partition folder. Problems with the log dir's own files
    are in ``problems`` (each partition carries its ``damage``); nothing here raises on bad
    file contents."""
    path = os.path.normpath(path)
    if is_partition_dir(path):
        pd = scan_partition_dir(path)
        starts = read_log_start_offsets(os.path.dirname(path))
        return {"path": path, "partitions": [summarize_partition(Partition.open(
            pd, log_start_offset=starts.get((pd.topic, pd.partition))))], "problems": []}
    layout = scan_log_dir(path)
    problems = Problems()
    meta = clean = None
    if layout.meta_properties:
        meta = read_file(layout.meta_properties, MetaProperties.parse, problems)
    if layout.clean_shutdown:
        clean = read_file(layout.clean_shutdown, CleanShutdown.parse, problems)
    # a malformed checkpoint is reported once, by the loop below
    starts = read_log_start_offsets(path)
    checkpoints, unmatched = {}, []
    present = {(p.topic, p.partition) for p in layout.partitions}
    for full in sorted(layout.checkpoints.values()):
        name = os.path.basename(full)
        cp = read_file(full, lambda b, n=name: OffsetCheckpoint.parse(b, n), problems)
        if cp is None:
            continue
        checkpoints[name] = cp.to_json()
        # Kafka keeps entries of partitions it no longer has until the next write of the file
        unmatched += [{"checkpoint": name, "topic": t, "partition": p, "offset": o}
                      for t, p, o in cp.entries if (t, p) not in present]
    return {
        "path": path,
        "meta_properties": meta.to_json() if meta else None,
        "clean_shutdown": clean.to_json() if clean else None,
        "checkpoints": checkpoints,
        "checkpoint_entries_without_folder": unmatched,
        "bootstrap": (summarize_metadata_records(layout.bootstrap_checkpoint, problems)
                      if layout.bootstrap_checkpoint else None),
        "partitions": [summarize_partition(Partition.open(
            p, log_start_offset=starts.get((p.topic, p.partition)))) for p in layout.partitions],
        "moved": [{"path": p.path, "topic": p.topic, "partition": p.partition, "state": p.state}
                  for p in layout.moved],
        "ignored": [{"path": p, "why": why} for p, why in layout.ignored()],
        "problems": problems.to_json(),
    }


def has_damage(doc: Doc) -> bool:
    """True when :func:`summarize` found anything wrong (in a partition or a log dir file)."""
    return bool(doc.get("problems")) or any(p["damage"] for p in doc["partitions"])


def _fmt_range(r: list[int] | None) -> str:
    return "-" if r is None else f"[{r[0]}, {r[1]})"


def _fmt_offset(o: int | None) -> str:
    return "-" if o is None else str(o)


def _fmt_time(r: list[int] | None) -> str:
    if r is None:
        return "-"
    import datetime as dt

    def one(t: int) -> str:
        try:
            return dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        except (OverflowError, ValueError, OSError):  # beyond what a calendar date can show
            return f"{t}ms"

    return f"{one(r[0])} .. {one(r[1])}"


def render_text(doc: Doc, segments: bool = True) -> str:
    """Human-readable form of :func:`summarize`."""
    out = [f"log dir {doc['path']}"]
    meta = doc.get("meta_properties")
    if meta:
        out.append("  " + ", ".join(f"{k}={v}" for k, v in meta.items()))
    if "clean_shutdown" in doc:
        cs = doc["clean_shutdown"]
        if cs is None:
            out.append("  clean shutdown: no")
        elif cs["brokerEpoch"] is None:
            out.append("  clean shutdown: yes (empty file, as brokers before KIP-966 write it)")
        else:
            out.append(f"  clean shutdown: yes, broker epoch {cs['brokerEpoch']}")
    unmatched: dict[str, list[str]] = {}
    for u in doc.get("checkpoint_entries_without_folder", []):
        unmatched.setdefault(u["checkpoint"], []).append(f"{u['topic']}-{u['partition']}")
    for name, cp in doc.get("checkpoints", {}).items():
        line = f"  {name}: {cp['count']} entries"
        if name in unmatched:
            line += (f" ({len(unmatched[name])} without a partition folder: "
                     f"{' '.join(unmatched[name])})")
        out.append(line)
    boot = doc.get("bootstrap")
    if boot:
        out.append(f"  bootstrap.checkpoint: {boot['batches']} batches, {boot['records']} "
                   f"records, metadata.version {boot['metadata_version']}")
    for p in doc["partitions"]:
        out.append(f"{p['topic']}-{p['partition']}  topic_id={p['topic_id']}  "
                   f"offsets {_fmt_range(p['offsets'])}  log start {_fmt_offset(p['log_start_offset'])}  "
                   f"{len(p['segments'])} segments  "
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
        if p.get("quorum_state"):
            q = p["quorum_state"]
            out.append(f"  quorum-state: leader {q.get('leaderId')}, epoch {q.get('leaderEpoch')}, "
                       f"voters {[v.get('voterId') for v in q.get('currentVoters') or []]}")
        for m in p.get("metadata_snapshots", []):
            out.append(f"  snapshot at offset {m['end_offset']} (epoch {m['epoch']}): "
                       f"{m['batches']} batches, {m['records']} records")
        if p["other_files"]:
            out.append("  other files (not read): " + " ".join(p["other_files"]))
        for d in p["damage"]:
            out.append(f"  DAMAGE {d['kind']}: {os.path.basename(d['file'])} at {d['position']}: "
                       f"{d['reason']} ({d['bytes_skipped']} bytes skipped)")
    for m in doc.get("moved", []):
        out.append(f"{m['topic']}-{m['partition']}: {m['state']} folder {m['path']} (not read)")
    for i in doc.get("ignored", []):
        out.append(f"ignored: {os.path.basename(i['path'])} ({i['why']})")
    for d in doc.get("problems", []):
        out.append(f"PROBLEM {d['kind']}: {os.path.basename(d['file'])}: {d['reason']}")
    return "\n".join(out)
