"""``pylog verify`` and ``pylog recover``: checking log dirs offline, with a report.

``verify`` reads every segment read-only (the C validator, ``scan_batches``: lengths,
magic, CRC-32C, record counts) plus offset continuity and each offset index against its
``.log``, and changes nothing: it says what recovery would truncate and why. ``recover``
opens the store, which runs pylog's recovery where a dir was not shut down cleanly
(``--force``: in every dir), and prints what was scanned, truncated and deleted.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys

import click

from .common import fail_on, log_dirs_option, print_json

__all__ = ["verify", "recover"]

_CHUNK = 8 << 20
_LENGTH = struct.Struct(">qi")          # base offset, batch length


def _verify_segment(path: str) -> dict:
    from pylog.record import scan_batches
    size = os.path.getsize(path)
    out = {"file": path, "bytes": size, "batches": 0, "records": 0, "problems": []}
    last_offset = None
    pos = 0
    with open(path, "rb") as f:
        while pos < size:
            chunk = os.pread(f.fileno(), _CHUNK, pos)
            result = scan_batches(chunk)
            if result.batches == 0 and result.error is None and result.incomplete_bytes:
                # One batch larger than the chunk: read it whole (its header says how big).
                if len(chunk) >= _LENGTH.size:
                    need = _LENGTH.unpack_from(chunk)[1] + 12
                    if pos + need <= size:
                        chunk = os.pread(f.fileno(), need, pos)
                        result = scan_batches(chunk)
            if result.batches:
                if last_offset is not None and result.first_offset <= last_offset:
                    out["problems"].append(f"batch at byte {pos}: offset {result.first_offset} "
                                           f"does not follow {last_offset}")
                last_offset = result.last_offset
                out["batches"] += result.batches
                out["records"] += result.records
            pos += result.valid_bytes
            if result.error is not None:
                out["problems"].append(f"{result.error} (in {os.path.basename(path)}; recovery "
                                       f"would truncate the segment at byte {pos})")
                break
            if result.valid_bytes == 0:
                out["problems"].append(f"{size - pos} bytes after byte {pos} are not a whole batch "
                                       "(a torn tail: recovery would truncate them)")
                break
    out["last_offset"] = last_offset
    return out


@click.command(help="Check log dirs offline, read-only: every batch (CRC, lengths, offsets) "
                    "and every offset index; report what recovery would truncate. Exit status 1 "
                    "when anything is wrong.")
@log_dirs_option()
@click.option("--topic", help="only this topic")
@click.option("--json", "as_json", is_flag=True)
@fail_on(Exception)
def verify(log_dirs, topic, as_json) -> int:
    from pylog.storage import LogDirsReader
    from pylog.storage.reader import index_entries

    from .dump import check_index
    reader = LogDirsReader(log_dirs)
    report = []
    names = [topic] if topic else sorted(reader.topics())
    segments = [(t, p, reader.partition(t, p)) for t in names for p in range(reader.topics()[t])]
    progress = click.progressbar(segments, label="verifying", show_pos=True) \
        if sys.stderr.isatty() else contextlib.nullcontext(segments)   # no bar when piped
    with progress as bar:
        for t, p, pr in bar:
            for base in pr.segment_bases():
                log_path = os.path.join(pr.directory, f"{base:020d}.log")
                seg = _verify_segment(log_path)
                index = log_path[:-4] + ".index"
                if os.path.exists(index):
                    entries = [(base + rel, pos) for rel, pos in index_entries(index)]
                    if entries and not (len(entries) == 1 and entries[0] == (base, 0)
                                        and seg["batches"] == 0):
                        seg["problems"] += check_index(index, entries)
                seg.update(topic=t, partition=p)
                report.append(seg)
    bad = [s for s in report if s["problems"]]
    if as_json:
        print_json(report)
    else:
        total = sum(s["bytes"] for s in report)
        click.echo(f"verified {len(report)} segments of {len(segments)} partitions ({total:,} "
                   f"bytes, {sum(s['records'] for s in report):,} records): "
                   f"{'OK' if not bad else f'{len(bad)} with problems'}")
        for s in bad:
            for problem in s["problems"]:
                click.echo(f"{s['topic']}-{s['partition']} {os.path.basename(s['file'])}: {problem}")
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
