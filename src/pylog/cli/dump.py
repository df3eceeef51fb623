"""``pylog dump-log``: Kafka's kafka-dump-log.sh (DumpLogSegments) on pylog's (and Kafka's)
files, line for line in Kafka's format: ``.log`` batches (and records with
``--deep-iteration``/``--print-data-log``), ``.index`` and ``.timeindex`` entries (with
``--index-sanity-check``/``--verify-index-only`` checks against the ``.log``), producer
``.snapshot`` state, and the checkpoint files. A debugging tool, not a hot path: it walks
records in Python.
"""

from __future__ import annotations

import os

import click

from .common import fail_on

__all__ = ["dump_log"]


def _text(raw) -> str:
    return bytes(raw).decode("utf-8", errors="replace")


def _dump_log_file(path: str, deep: bool, data: bool) -> None:
    from pylog.record import iter_batches
    with open(path, "rb") as f:
        buf = f.read()
    base = int(os.path.basename(path).split(".")[0])
    click.echo(f"Log starting offset: {base}")
    position = 0
    for batch in iter_batches(buf, validate=False):
        ts_label = _timestamp_label(batch)
        tail = (f"position: {position} {ts_label}: {batch.max_timestamp} size: "
                f"{batch.size_in_bytes} magic: {batch.magic} compresscodec: "
                f"{batch.compression} crc: {batch.crc} "
                f"isvalid: {str(batch.is_valid()).lower()}")
        if batch.magic >= 2:
            horizon = f"OptionalLong[{batch.base_timestamp}]" if batch.has_delete_horizon \
                else "OptionalLong.empty"
            click.echo(
                f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: "
                f"{batch.records_count} baseSequence: {batch.base_sequence} lastSequence: "
                f"{batch.last_sequence} producerId: {batch.producer_id} producerEpoch: "
                f"{batch.producer_epoch} partitionLeaderEpoch: {batch.partition_leader_epoch} "
                f"isTransactional: {str(batch.is_transactional).lower()} isControl: "
                f"{str(batch.is_control).lower()} deleteHorizonMs: {horizon} {tail}")
        else:
            click.echo(f"offset: {batch.last_offset} {tail}")     # Kafka's legacy batch line
        if deep or data:
            crcs = _legacy_crcs(batch) if batch.magic < 2 else None
            for i, r in enumerate(batch.records()):
                line = (f"| offset: {r.offset} {ts_label}: {r.timestamp} keySize: "
                        f"{-1 if r.key is None else len(r.key)} valueSize: "
                        f"{-1 if r.value is None else len(r.value)}")
                if crcs is None:
                    seq = batch.base_sequence + (r.offset - batch.base_offset) \
                        if batch.base_sequence >= 0 else -1
                    line += f" sequence: {seq} headerKeys: [{','.join(k for k, _ in r.headers)}]"
                else:
                    # Kafka prints this brace after a legacy record's crc (DumpLogSegments).
                    line += f" isValid: true crc: {crcs[i]}}}"
                if batch.is_control:
                    line += _control_record(r)
                elif data:
                    # As DumpLogSegments: a null key or value prints nothing at all.
                    if r.key is not None:
                        line += f" key: {_text(r.key)}"
                    if r.value is not None:
                        line += f" payload: {_text(r.value)}"
                click.echo(line)
        position += batch.size_in_bytes
    if position < len(buf):
        click.echo(f"Found {len(buf) - position} invalid bytes at the end of {os.path.basename(path)}")


def _timestamp_label(batch) -> str:
    """Kafka's TimestampType names; magic 0 has no timestamps (NoTimestampType)."""
    if batch.magic == 0:
        return "NoTimestampType"
    return "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"


def _control_record(r) -> str:
    """A control record as DumpLogSegments prints it: a transaction marker's type and
    coordinator epoch, or the control type's name and id."""
    kind = int.from_bytes(r.key[2:4], "big", signed=True) if r.key and len(r.key) >= 4 else -1
    if kind in (0, 1) and r.value is not None and len(r.value) >= 6:
        epoch = int.from_bytes(r.value[2:6], "big", signed=True)
        return f" endTxnMarker: {'ABORT' if kind == 0 else 'COMMIT'} coordinatorEpoch: {epoch}"
    return f" controlType: UNKNOWN({kind})"


def _legacy_crcs(batch) -> list[int]:
    """The CRC of each message of a magic 0/1 batch: its own, or its inner messages' (a
    compressed wrapper holds a message set in its value). Read in Python: a cold path."""
    import struct

    from pylog.compression import decompress
    raw = bytes(batch.raw)
    if not batch.compression_type:
        return [batch.crc]
    at = 8 + 4 + 4 + 1 + 1 + (8 if batch.magic == 1 else 0)       # offset size crc magic attrs [ts]
    key_len = struct.unpack_from(">i", raw, at)[0]
    at += 4 + max(key_len, 0)
    value_len = struct.unpack_from(">i", raw, at)[0]
    inner = decompress(batch.compression_type, raw[at + 4:at + 4 + value_len])
    crcs, pos = [], 0
    while pos + 16 <= len(inner):
        size, crc = struct.unpack_from(">iI", inner, pos + 8)
        crcs.append(crc)
        pos += 12 + size
    return crcs


def _dump_index(path: str, sanity: bool, verify_only: bool) -> None:
    from pylog.storage.reader import index_entries
    base = int(os.path.basename(path).split(".")[0])
    entries = index_entries(path)
    if entries == [(0, 0)] and _log_size(path) == 0:
        entries = []                    # a preallocated index of an empty segment
    if not entries:
        click.echo(f"{path} is empty.")
        return
    problems = check_index(path, [(base + rel, pos) for rel, pos in entries])
    if sanity or verify_only:
        for p in problems:
            click.echo(p)
        if sanity and not problems:
            click.echo(f"{path} passed sanity check.")
        if verify_only:
            return
    for rel, pos in entries:
        click.echo(f"offset: {base + rel} position: {pos}")


def _log_size(index_path: str) -> int:
    from pylog.storage.files import LOG_SUFFIX
    log = index_path.rsplit(".", 1)[0] + LOG_SUFFIX
    return os.path.getsize(log) if os.path.exists(log) else 0


def check_index(path: str, entries: list[tuple[int, int]]) -> list[str]:
    """Each entry must name a batch of the .log that starts at its position and ends at
    its offset; offsets and positions must increase."""
    from pylog.record import iter_batches
    from pylog.storage.files import LOG_SUFFIX
    log = path.rsplit(".", 1)[0] + LOG_SUFFIX
    if not os.path.exists(log):
        return [f"{log} is missing: the index cannot be checked"]
    with open(log, "rb") as f:
        buf = f.read()
    batches, position = {}, 0
    for b in iter_batches(buf, validate=False):
        batches[position] = b.last_offset
        position += b.size_in_bytes
    problems = []
    last_offset, last_pos = -1, -1
    for offset, pos in entries:
        if batches.get(pos) != offset:
            problems.append(f"Index mismatch: offset {offset} at position {pos} is not the last "
                            f"offset of a batch starting there ({batches.get(pos)})")
        if offset <= last_offset or pos <= last_pos:
            problems.append(f"Index out of order at offset {offset} position {pos}")
        last_offset, last_pos = offset, pos
    return problems


def _dump_time_index(path: str) -> None:
    from pylog.storage.reader import index_entries
    base = int(os.path.basename(path).split(".")[0])
    entries = index_entries(path, time_index=True)
    if not entries or entries == [(0, 0)]:
        click.echo(f"{path} is empty.")
        return
    for ts, rel in entries:
        click.echo(f"timestamp: {ts} offset: {base + rel}")


def _dump_snapshot(path: str) -> None:
    from pylog.storage.producer_state import ProducerStateManager
    manager = ProducerStateManager(os.path.dirname(os.path.abspath(path)))
    manager.read_snapshot(int(os.path.basename(path).split(".")[0]))
    for pid, entry in sorted(manager.producers.items()):
        b = entry.batches[-1]
        click.echo(f"producerId: {pid} producerEpoch: {entry.epoch} coordinatorEpoch: -1 "
                   f"currentTxnFirstOffset: OptionalLong.empty lastTimestamp: {b.timestamp} "
                   f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: "
                   f"{b.last_offset} offsetDelta: {b.last_offset - b.first_offset} timestamp: "
                   f"{b.timestamp}")


@click.command("dump-log", help="Print the contents of log files (kafka-dump-log.sh): .log, "
                                ".index, .timeindex, .snapshot and checkpoint files.")
@click.option("--files", required=True, metavar="FILE[,FILE...]", help="comma-separated files")
@click.option("--deep-iteration", is_flag=True, help="print every record of every batch")
@click.option("--print-data-log", is_flag=True, help="print keys and values (implies --deep-iteration)")
@click.option("--index-sanity-check", is_flag=True,
              help="check each index against its .log and say whether it passed")
@click.option("--verify-index-only", is_flag=True, help="check indexes; print only problems")
@fail_on(OSError, ValueError)
def dump_log(files, deep_iteration, print_data_log, index_sanity_check, verify_index_only) -> int:
    from pylog.storage.files import INDEX_SUFFIX, LOG_SUFFIX, SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX
    for path in [f for f in files.split(",") if f]:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist")
        click.echo(f"Dumping {path}")
        if path.endswith(LOG_SUFFIX):
            _dump_log_file(path, deep_iteration, print_data_log)
        elif path.endswith(INDEX_SUFFIX):
            _dump_index(path, index_sanity_check, verify_index_only)
        elif path.endswith(TIME_INDEX_SUFFIX):
            _dump_time_index(path)
        elif path.endswith(SNAPSHOT_SUFFIX):
            _dump_snapshot(path)
        elif "checkpoint" in os.path.basename(path) or os.path.basename(path).startswith("pylog-"):
            with open(path, encoding="utf-8", errors="replace") as f:
                click.echo(f.read().rstrip("\n"))
        else:
            raise ValueError(f"{path}: not a .log, .index, .timeindex, .snapshot or checkpoint file")
    return 0
