"""``kproto logdir PATH``: summarise a broker log directory (or one partition folder)."""
from __future__ import annotations

import argparse
import json
import sys

from kproto.cli.errors import require_log_dir
from kproto.cli.progress import Progress, progress_bar

# segment bytes below which a summary is quick enough to draw no bar
PROGRESS_MIN_BYTES = 64 << 20


def register(subparsers) -> None:
    """Add the ``logdir`` subcommand."""
    p = subparsers.add_parser(
        "logdir", help="summarise a Kafka log directory",
        description="Topics, partitions, segments, offset and time ranges, sizes, transactions "
                    "and damage found in a broker log directory or a partition folder; for a "
                    "KRaft __cluster_metadata partition, the story of the cluster its records "
                    "tell.")
    p.add_argument("path", help="a log dir (entry of log.dirs) or a <topic>-<partition> folder")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--no-segments", action="store_true", help="one line per partition only")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar on stderr (drawn only on a terminal, for at least "
                        f"{PROGRESS_MIN_BYTES >> 20} MiB of segments)")
    p.add_argument("--metadata-timeline", action="store_true",
                   help="for __cluster_metadata, every event (quorum leaders, broker "
                        "registrations and fencing, partition leaders and ISR) after its summary")
    p.add_argument("--report", default=None, metavar="HTML",
                   help="also write a self-contained HTML page with charts: records and bytes "
                        "per partition over time, segment sizes, leader epochs (needs the extra "
                        "kproto[report])")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit code 0, 1 when damage was found (and reported), 2 when the path cannot be read."""
    from kproto.storage.summary import has_damage, render_text, summarize

    if args.report is not None:
        from kproto.report import ReportUnavailable, require

        try:
            require()
        except ReportUnavailable as exc:
            print(f"kproto logdir: {exc}", file=sys.stderr)
            return 2
    require_log_dir(args.path)
    bar: Progress | None = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if done == 0:  # the first call, with the total
            bar = progress_bar(total, "logdir", enabled=not args.no_progress,
                               minimum=PROGRESS_MIN_BYTES)
        elif bar is not None:
            bar.update_to(done)

    try:
        doc = summarize(args.path, progress=progress)
    except (OSError, ValueError) as exc:
        print(f"kproto logdir: {exc}", file=sys.stderr)
        return 2
    finally:
        if bar is not None:
            bar.close()
    if args.format == "json":
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(render_text(doc, segments=not args.no_segments,
                          metadata_timeline=args.metadata_timeline))
    if args.report is not None:
        from kproto.report import read_logdir, render_logdir, write_page

        write_page(render_logdir(read_logdir(doc).data(), doc["path"]), args.report)
    return 1 if has_damage(doc) else 0
