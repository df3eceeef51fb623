"""``pylog verify`` and ``pylog recover``: checking log dirs offline, with a report.

``verify`` reads every segment read-only and changes nothing
(pylog.storage.integrity): every batch, both indexes entry by entry against the
.log, and the continuity of the segments; it names every damage it finds and
what recovery would do about it. Exit status: 0 when nothing is damaged (notes,
such as an open O_DIRECT segment's padding, may be printed), 1 when something is,
2 when it cannot run. ``recover`` opens the store, which runs pylog's recovery
where a dir was not shut down cleanly (``--force``: in every dir, and every
index rebuilt from its .log), and prints what was scanned, truncated and rebuilt.
"""

from __future__ import annotations

import contextlib
import os
import sys

import click

from .common import fail_on, log_dirs_option, print_json

__all__ = ["verify", "recover"]


@click.command(help="Check log dirs offline, read-only: every batch (CRC, lengths, offsets), "
                    "both indexes of every segment against its .log, and that the segments' "
                    "offsets follow one another. Names every damage found and what recovery "
                    "would do about it. Exit status 0: no damage (notes may be printed: an "
                    "open O_DIRECT segment's padding, a batch being written); 1: damage; 2: "
                    "verify could not run.")
@log_dirs_option()
@click.option("--topic", help="only this topic")
@click.option("--json", "as_json", is_flag=True)
@fail_on(Exception)
def verify(log_dirs, topic, as_json) -> int:
    from pylog.storage import LogDirsReader
    from pylog.storage.integrity import check_store
    reader = LogDirsReader(log_dirs)
    partitions = sum(reader.topics().values()) if not topic else reader.topics().get(topic, 0)
    if topic and topic not in reader.topics():
        raise click.UsageError(f"topic {topic!r} does not exist in {log_dirs}")
    report = []
    checked = check_store(log_dirs, topic)
    progress = click.progressbar(checked, length=partitions, label="verifying", show_pos=True) \
        if sys.stderr.isatty() else contextlib.nullcontext(checked)   # no bar when piped
    with progress as bar:
        for _t, _p, files in bar:
            report += files
    bad = [s for s in report if s.problems]
    if as_json:
        print_json([s.to_json() for s in report])
    else:
        total = sum(s.bytes for s in report)
        click.echo(f"verified {len(report)} segments of {partitions} partitions ({total:,} "
                   f"bytes, {sum(s.records for s in report):,} records): "
                   f"{'OK' if not bad else f'{len(bad)} with problems'}")
        for s in report:
            name = f"{s.topic}-{s.partition} {os.path.basename(s.file)}"
            for problem in s.problems:
                click.echo(f"{name}: {problem}")
            for note in s.notes:
                click.echo(f"{name}: note: {note}")
    return 1 if bad else 0


@click.command(help="Open the store and recover what was not shut down cleanly (--force: every "
                    "dir, as after a crash, and every segment's indexes rebuilt from its .log); "
                    "print what was scanned, truncated, rebuilt and why.")
@log_dirs_option()
@click.option("--force", is_flag=True, help="recover every dir, even one shut down cleanly, and "
                                            "rebuild every index")
@fail_on(Exception)
def recover(log_dirs, force) -> int:
    import pylog
    from pylog.storage import LogDirsReader
    from pylog.storage.files import CLEAN_SHUTDOWN_FILE
    reader = LogDirsReader(log_dirs)
    if force:
        for d in reader.paths:
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            if os.path.exists(marker):
                os.unlink(marker)
    with pylog.open(log_dirs) as store:
        click.echo(store.startup.summary())
        for t in sorted(store.list_topics(include_internal=True)):
            for p in range(store.partition_count(t) or 0):
                lg = store.log(t, p)
                r = lg.recovery
                for seg in r.segments_recovered:
                    if seg.truncated_bytes or seg.error:
                        click.echo(f"{t}-{p} segment {seg.base_offset}: scanned {seg.scanned_bytes}"
                                   f" bytes, truncated {seg.truncated_bytes}: {seg.reason}"
                                   f"{'; ' + seg.error if seg.error else ''}")
                if r.segments_deleted:
                    click.echo(f"{t}-{p}: deleted {r.segments_deleted} later segments "
                               f"({r.bytes_deleted} bytes) after the truncation")
                for first, end in r.missing_offsets:
                    click.echo(f"{t}-{p}: offsets {first}..{end - 1} are missing (no segment "
                               "holds them): reads of them raise MissingOffsetsError")
                if force:
                    for base, offsets, times in lg.rebuild_indexes():
                        changed = [name for name, c in (("offset index", offsets),
                                                        ("time index", times)) if c]
                        if changed:
                            click.echo(f"{t}-{p} segment {base}: rebuilt from its .log: "
                                       f"{' and '.join(changed)} changed")
    return 0
