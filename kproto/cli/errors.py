"""The command line's one way of failing: one line on stderr, exit status 2."""
from __future__ import annotations

__all__ = ["CliError", "EXIT_DAMAGE", "EXIT_ERROR", "describe_os_error", "require_log_dir"]

#: Exit status when the command ran but reported damage (``logdir``, ``dump-log``,
#: ``decode-pcap``, ``spark-read --damage``).
EXIT_DAMAGE = 1
#: Exit status when the command could not do its job: bad arguments, a missing or unreadable
#: file, input that is not what the command reads, a missing dependency.
EXIT_ERROR = 2


class CliError(Exception):
    """A failure to tell the user in one line: ``kproto COMMAND: message``, exit status 2."""


def describe_os_error(exc: OSError) -> str:
    """``PATH: reason`` for a file error (the reason alone when no file is involved)."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    return reason


def require_log_dir(path: str) -> None:
    """Raise :class:`CliError` unless ``path`` is a Kafka log directory (an entry of
    ``log.dirs``) or one ``<topic>-<partition>`` folder of one: a folder of anything else would
    otherwise read as a log dir with no data, and a command would succeed on it."""
    import os

    from kproto.storage.layout import is_partition_dir, scan_log_dir

    if not os.path.exists(path):
        raise CliError(f"{path}: no such file or directory")
    if not os.path.isdir(path):
        raise CliError(f"{path}: not a directory (give a Kafka log directory or a "
                       "<topic>-<partition> folder)")
    if is_partition_dir(path):
        return
    layout = scan_log_dir(path)
    kafka_partitions = [p for p in layout.partitions + layout.moved
                        if p.segments or p.snapshots or p.leader_epoch_checkpoint
                        or p.partition_metadata or p.quorum_state or p.metadata_snapshots]
    if not (kafka_partitions or layout.meta_properties or layout.checkpoints
            or layout.bootstrap_checkpoint or layout.clean_shutdown):
        raise CliError(f"{path}: no partition folders and no meta.properties: "
                       "not a Kafka log directory")
