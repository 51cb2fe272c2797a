"""What is in a log directory, at batch level (nothing is decompressed): partitions, segments,
offset and time ranges, sizes, transactions and damage; for ``__cluster_metadata``, the story
its records tell (:mod:`kproto.storage.metadata_story`). Backs ``kproto logdir``."""
from __future__ import annotations

import os
from typing import Any, Callable

from kproto.errors import DecodeError
from kproto.problems import Problems
from kproto.records.batch import RecordBatch
from kproto.storage.checkpoints import CleanShutdown, MetaProperties, OffsetCheckpoint, QuorumState
from kproto.storage.layout import is_partition_dir, scan_log_dir, scan_partition_dir
from kproto.storage.partition import (Partition, batch_max_timestamp, read_batch_file,
                                      read_file, read_log_start_offsets, scan_batches)
from kproto.storage.reader import first_unstable_offset

Doc = dict[str, Any]


def _range(lo: int | None, hi: int | None) -> list[int] | None:
    if lo is None:
        return None
    assert hi is not None  # the callers set both bounds together
    return [lo, hi]


Progress = Callable[[int, int], None]
"""Called with (bytes of segments read, bytes of segments in all) as a summary goes on."""


def summarize_partition(part: Partition, on_segment: Callable[[int], None] | None = None) -> Doc:
    """Per-partition facts; segment entries carry their own damage. ``offsets`` is what the
    segments hold, ``log_start_offset`` where a consumer can start (the log dir's
    ``log-start-offset-checkpoint`` when it is above the first offset on disk).
    ``on_segment`` is called with each segment's size once it is read."""
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
        if on_segment is not None:
            on_segment(seg.log_size)
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
    if part.topic == "__cluster_metadata":
        extra["metadata_story"] = _metadata_story(part)
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


def _metadata_story(part: Partition) -> Doc:
    """The story of a ``__cluster_metadata`` partition; records that do not decode join the
    partition's problems (damaged batches are reported by the segment scan already)."""
    from kproto.storage.metadata_story import read_metadata_story

    found = Problems(topic=part.topic, partition=part.partition)
    story = read_metadata_story(part.path, found, partition=part)
    part.problems.extend(p for p in found if p.kind == "record")
    return story.to_json()


def summarize_metadata_records(path: str, problems: Problems) -> Doc:
    """Batches and records of a file of KRaft metadata batches (``bootstrap.checkpoint``, a
    ``__cluster_metadata`` snapshot), and the ``metadata.version`` feature level it sets."""
    doc = read_batch_file(path, lambda data: _metadata_records(path, data, problems), problems)
    return doc or {"path": path, "batches": 0, "records": 0, "metadata_version": None}


def _metadata_records(path: str, data: bytes | memoryview, problems: Problems) -> Doc:
    from kproto.storage.internal import decode_metadata_frame

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


def _summarize_all(parts: list[Partition], progress: Progress | None) -> list[Doc]:
    if progress is None:
        return [summarize_partition(p) for p in parts]
    total = sum(s.log_size for p in parts for s in p.segments)
    done = 0

    def read(size: int) -> None:
        nonlocal done
        done += size
        progress(done, total)

    progress(0, total)
    return [summarize_partition(p, read) for p in parts]


def summarize(path: str, progress: Progress | None = None) -> Doc:
    """Summary of a log dir, or of one partition folder. Problems with the log dir's own files
    are in ``problems`` (each partition carries its ``damage``); nothing here raises on bad
    file contents. ``progress`` (optional) is told of the segment bytes read so far."""
    path = os.path.normpath(path)
    if is_partition_dir(path):
        pd = scan_partition_dir(path)
        starts = read_log_start_offsets(os.path.dirname(path))
        return {"path": path, "partitions": _summarize_all([Partition.open(
            pd, log_start_offset=starts.get((pd.topic, pd.partition)))], progress), "problems": []}
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
        "partitions": _summarize_all([Partition.open(
            p, log_start_offset=starts.get((p.topic, p.partition))) for p in layout.partitions],
            progress),
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


def _fmt_timestamp(t: int) -> str:
    import datetime as dt

    try:
        return dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, ValueError, OSError):  # beyond what a calendar date can show
        return f"{t}ms"


def _fmt_time(r: list[int] | None) -> str:
    return "-" if r is None else f"{_fmt_timestamp(r[0])} .. {_fmt_timestamp(r[1])}"


def _ids(xs: list[int]) -> str:
    return "[" + ",".join(map(str, xs)) + "]"


def describe_metadata_event(e: Doc) -> str:
    """One event of a metadata story (:data:`kproto.storage.metadata_story.EVENT_KINDS`) in
    words."""
    k = e["kind"]
    if k == "quorum_leader":
        return (f"quorum leader {e['leader']} elected in epoch {e['epoch']} "
                f"(voters {_ids(e['voters'])}, granted by {_ids(e['granted_voters'])})")
    if k == "feature":
        return f"feature {e['name']} level {e['level']}"
    if k == "broker_registered":
        return (f"broker {e['broker']} registered, epoch {e['broker_epoch']}, "
                f"{' '.join(e['listeners']) or 'no listeners'}, rack {e['rack']}"
                + (", fenced" if e["fenced"] else ""))
    if k == "controller_registered":
        return (f"controller {e['controller']} registered, incarnation {e['incarnation_id']}, "
                f"{' '.join(e['listeners']) or 'no listeners'}")
    if k == "controller_unregistered":
        return f"controller {e['controller']} unregistered"
    if k.startswith("broker_"):
        what = k[len("broker_"):].replace("_", " ")
        return f"broker {e['broker']} {what} (epoch {e['broker_epoch']})"
    if k == "topic_created":
        return (f"topic {e['topic']} created, id {e['topic_id']}, {e['partitions']} partitions, "
                f"replication factor {e['replication_factor']}")
    if k == "topic_deleted":
        return f"topic {e['topic']} deleted, id {e['topic_id']}, {e['partitions']} partitions"
    if k == "partition_created":
        return (f"{e['topic']}-{e['partition']} created: leader {e['leader']}, "
                f"isr {_ids(e['isr'])}, replicas {_ids(e['replicas'])}")
    if k == "partition_changed":
        prev = e["previous"]
        parts = []
        if e["election"]:
            parts.append(f"leader {prev['leader']} -> {e['leader']} "
                         f"(leader epoch {e['leader_epoch']})")
        if e["isr"] != prev["isr"]:
            how = " ".join([f"-{r}" for r in e["isr_removed"]] + [f"+{r}" for r in e["isr_added"]])
            parts.append(f"isr {_ids(prev['isr'])} -> {_ids(e['isr'])} ({how or 'reordered'})")
        if e["replicas"] != prev["replicas"]:
            parts.append(f"replicas {_ids(prev['replicas'])} -> {_ids(e['replicas'])}")
        return f"{e['topic']}-{e['partition']}: " + ("; ".join(parts) or "partition epoch only")
    if k == "partition_change_ignored":
        return f"change of unknown partition {e['topic_id']}-{e['partition']} (ignored)"
    if k == "config":
        value = "deleted" if e["value"] is None else f"= {e['value']}"
        return f"config {e['resource_type']} {e['resource']!r}: {e['name']} {value}"
    if k == "producer_ids":
        return (f"producer ids below {e['next_producer_id']} allocated to broker {e['broker']} "
                f"(epoch {e['broker_epoch']})")
    if k in ("acl_added", "acl_removed"):
        what = "added" if k == "acl_added" else "removed"
        if "principal" not in e:
            return f"acl {e['acl_id']} {what}"
        allow = {2: "DENY", 3: "ALLOW"}.get(e["permission_type"], e["permission_type"])
        return (f"acl {e['acl_id']} {what}: {allow} {e['principal']} from {e['host']} "
                f"operation {e['operation']} on resource type {e['resource_type']} "
                f"{e['resource']!r} (pattern type {e['pattern_type']})")
    if k == "scram_credential":
        if e["iterations"] is None:
            return f"{e['mechanism']} credential of {e['user']!r} removed"
        return f"{e['mechanism']} credential of {e['user']!r} set ({e['iterations']} iterations)"
    return k


#: partitions listed in the text form of a metadata story (the JSON form has all)
STORY_PARTITIONS_SHOWN = 20


def _render_story(m: Doc, timeline: bool) -> list[str]:
    ev = m["events"]
    n = ev.get
    out = [f"  metadata story: offsets {_fmt_range(m['offsets'])}"
           + (f" after the snapshot at {m['snapshot']}" if m["snapshot"] is not None else "")
           + f", {sum(m['records'].values())} records, {n('quorum_leader', 0)} quorum "
           f"elections (leader {m['quorum_leader']}, epoch {m['quorum_epoch']}), "
           + ", ".join(f"{k} {v}" for k, v in sorted(m["features"].items()))]
    out.append(f"  brokers: {n('broker_registered', 0)} registrations, "
               f"{n('broker_fenced', 0)} fencings, {n('broker_unfenced', 0)} unfencings, "
               f"{n('broker_controlled_shutdown', 0)} controlled shutdowns, "
               f"{n('broker_unregistered', 0)} unregistrations")
    for i, b in m["brokers"].items():
        state = "FENCED" if b["fenced"] else "unfenced"
        if b["in_controlled_shutdown"]:
            state += ", in controlled shutdown"
        out.append(f"    broker {i} epoch {b['broker_epoch']} {' '.join(b['listeners'])} "
                   f"rack {b['rack']}: {state}")
    parts = m["partitions"]
    total = lambda key: sum(p[key] for p in parts.values())  # noqa: E731
    out.append(f"  topics: {n('topic_created', 0)} created, {n('topic_deleted', 0)} deleted; "
               f"{len(parts)} partitions; {n('partition_changed', 0)} partition changes: "
               f"{total('elections')} leader elections, {total('isr_shrinks')} ISR shrinks, "
               f"{total('isr_expansions')} ISR expansions; {n('config', 0)} config changes; "
               f"next producer id {m['next_producer_id']}")
    shown = list(parts.items())
    if not timeline:
        shown = shown[:STORY_PARTITIONS_SHOWN]
    for name, p in shown:
        out.append(f"    {name} leader {p['leader']} (epoch {p['leader_epoch']}) "
                   f"isr {_ids(p['isr'])} replicas {_ids(p['replicas'])}: "
                   f"{p['elections']} elections, {p['isr_shrinks']} shrinks, "
                   f"{p['isr_expansions']} expansions")
    if len(shown) < len(parts):
        out.append(f"    ... {len(parts) - len(shown)} more partitions "
                   "(--metadata-timeline or --format json for all)")
    if n("partition_change_ignored"):
        out.append(f"  {ev['partition_change_ignored']} changes of partitions that do not exist "
                   "(ignored, as Kafka's replay does)")
    if timeline:
        out.append("  timeline:")
        out += [f"    {e['offset']:>8} {_fmt_timestamp(e['timestamp'])} "
                f"{describe_metadata_event(e)}" for e in m["timeline"]]
    return out


def render_text(doc: Doc, segments: bool = True, metadata_timeline: bool = False) -> str:
    """Human-readable form of :func:`summarize`; ``metadata_timeline``: every event of a
    ``__cluster_metadata`` story (and every partition), not only the summary."""
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
        # producers are counted from the latest producer snapshot; a partition without one
        # (nothing idempotent written yet, or before its first roll) has no count to show
        producers = ("no producer snapshot" if p["producers"] is None
                     else f"producers={p['producers']}")
        extra = [producers, f"aborted txns={p['aborted_transactions']}"]
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
        if p.get("metadata_story"):
            out += _render_story(p["metadata_story"], metadata_timeline)
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
