"""``pylog tables``: a topic's Iceberg table beside its log (docs/TABLES.md "Operations").

``--describe`` reads the log dirs read-only and the catalog, so it runs beside the broker;
``--compact`` and ``--expire-snapshots`` commit through the catalog's optimistic
concurrency (a converter commit in between makes them plan again); ``--remove-orphans``
deletes unreferenced files older than the topic's pylog.table.orphan.min.age.ms (or
``--older-than``), so it runs beside the broker too; ``--rebuild`` drops the
table and converts the log again, so the topic's converter must not run meanwhile (stop the
broker, or set pylog.table.enable=false first).
"""

from __future__ import annotations

import re
import time

import click

from .common import fail_on, log_dirs_option, print_json, print_table

__all__ = ["tables"]

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")


def duration_ms(text: str) -> int:
    """'7d', '24h', '30m', '15s', '500ms' or plain milliseconds."""
    match = _DURATION.match(text)
    if not match:
        raise click.BadParameter(f"expected a duration like 7d, 24h or 30m, got {text!r}",
                                 param_hint="--older-than")
    value, unit = int(match.group(1)), match.group(2) or "ms"
    return value * {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}[unit]


def _when(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


@click.command(help="A topic's Iceberg table (pylog.table.enable=true): describe it beside its "
                    "log, rebuild it from the log, compact its small files, expire snapshots, "
                    "remove orphan files.")
@log_dirs_option()
@click.option("--describe", "action", flag_value="describe",
              help="watermark and lag per partition, files, bytes, last commit")
@click.option("--rebuild", "action", flag_value="rebuild",
              help="drop the table and convert the log again (stop the converter first)")
@click.option("--compact", "action", flag_value="compact",
              help="rewrite small data files into few, in one commit keeping the watermark")
@click.option("--expire-snapshots", "action", flag_value="expire",
              help="remove snapshots older than --older-than and the files only they used")
@click.option("--remove-orphans", "action", flag_value="orphans",
              help="delete files no snapshot references, older than --older-than (default: "
                   "the topic's pylog.table.orphan.min.age.ms)")
@click.option("--topic", help="the topic (--describe: every tabled topic when omitted)")
@click.option("--older-than", default=None,
              help="--expire-snapshots (default 7d), --remove-orphans: age of the snapshots or "
                   "files to remove (7d, 24h, 30m, 15s, ms)")
@click.option("--retain-last", type=click.IntRange(min=1), default=1, show_default=True,
              help="--expire-snapshots: newest snapshots always kept")
@click.option("--target-file-bytes", type=click.IntRange(min=1), default=None,
              help="--compact: target size; files below 3/4 of it are rewritten (default: "
                   "the topic's pylog.table.compact.target.file.bytes)")
@click.option("--min-files", type=click.IntRange(min=2), default=None,
              help="--compact: fewest small files of a partition to rewrite (default: the "
                   "topic's pylog.table.compact.min.files)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@fail_on(Exception)
def tables(log_dirs: str, action: str | None, topic: str | None, older_than: str | None,
           retain_last: int, target_file_bytes: int | None, min_files: int | None,
           as_json: bool) -> None:
    from pylog.table import maintenance
    if action is None:
        raise click.UsageError("give one of --describe, --rebuild, --compact, --expire-snapshots, "
                               "--remove-orphans")
    flag = {"expire": "expire-snapshots", "orphans": "remove-orphans"}.get(action, action)
    if action != "describe" and not topic:
        raise click.UsageError(f"--{flag} needs --topic")
    if action == "describe":
        names = [topic] if topic else maintenance.tabled_topics(log_dirs)
        found = [maintenance.describe(log_dirs, name) for name in names]
        if as_json:
            print_json([s.to_json() for s in found])
            return
        for s in found:
            click.echo(f"{s.topic}: table {s.table} ({'enabled' if s.enabled else 'disabled'}), "
                       f"snapshot {s.snapshot_id if s.snapshot_id is not None else '-'} at "
                       f"{_when(s.last_commit_ms)}, {s.data_files} data files, {s.bytes} bytes, "
                       f"{s.records} records, {s.snapshots} snapshots"
                       + (f", {s.dead_letters} dead letters" if s.dead_letters is not None
                          else ""))
            print_table(["PARTITION", "WATERMARK", "LOG-END", "LAG-RECORDS", "LAG-SECONDS"],
                        [[p.partition, p.watermark, p.log_end_offset, p.lag_records,
                          f"{p.lag_seconds:.1f}"] for p in s.partitions])
        return
    if action == "rebuild":
        from pylog.table import rebuild
        r = rebuild(log_dirs, topic)
        out = {"topic": topic, "records": r.records, "watermark": r.watermark,
               "skipped": {p: list(v) for p, v in r.skipped.items()}, "snapshot_id": r.snapshot_id}
    elif action == "compact":
        out = maintenance.compact(log_dirs, topic, target_file_bytes, min_files)
    elif action == "orphans":
        cutoff = None if older_than is None else time.time_ns() // 1_000_000 - duration_ms(older_than)
        out = maintenance.remove_orphans(log_dirs, topic, cutoff)
    else:
        cutoff = time.time_ns() // 1_000_000 - duration_ms(older_than or "7d")
        out = maintenance.expire_snapshots(log_dirs, topic, cutoff, retain_last)
    if as_json:
        print_json(out)
    else:
        click.echo(", ".join(f"{k}: {v}" for k, v in out.items()))
