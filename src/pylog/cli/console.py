"""``pylog console-producer`` and ``pylog console-consumer``: Kafka's console tools on log
dirs, with their option and property names.

The producer opens the store (it appends). The consumer reads the dirs read-only
(pylog.storage.LogDirsReader), so it tails a topic beside the process that owns it;
with ``--group`` it opens the store instead, to join the group and commit.
"""

from __future__ import annotations

import json
import sys
import time

import click

from .common import fail_on, log_dirs_option

__all__ = ["console_producer", "console_consumer"]

_UNESCAPE = {"\\t": "\t", "\\n": "\n"}


def _properties(items: tuple[str, ...], known: set[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--property")
        if key not in known:
            raise click.BadParameter(f"unknown property {key!r} (known: {', '.join(sorted(known))})",
                                     param_hint="--property")
        out[key] = _UNESCAPE.get(value, value)
    return out


_PRODUCER_PROPS = {"parse.key", "key.separator", "parse.headers", "headers.delimiter",
                   "headers.separator", "headers.key.separator", "ignore.error", "null.marker"}


@click.command("console-producer",
               help="Append lines from stdin (or --file) to a topic, one record per line "
                    "(kafka-console-producer.sh).")
@log_dirs_option()
@click.option("--topic", required=True)
@click.option("--property", "props", multiple=True, metavar="KEY=VALUE",
              help="parse.key, key.separator (\\t), parse.headers, headers.delimiter (\\t), "
                   "headers.separator (,), headers.key.separator (:), null.marker")
@click.option("--compression-codec", default="none",
              type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]))
@click.option("--partition", type=int, help="every record to this partition")
@click.option("--file", "source", type=click.File("rb"), help="read this file instead of stdin")
@click.option("--batch-lines", default=10000, show_default=True, help="lines per send_batch call")
@fail_on(Exception)
def console_producer(log_dirs, topic, props, compression_codec, partition, source, batch_lines) -> int:
    import pylog
    p = _properties(props, _PRODUCER_PROPS)
    parse_key = p.get("parse.key", "false") == "true"
    parse_headers = p.get("parse.headers", "false") == "true"
    key_sep = p.get("key.separator", "\t").encode()
    hdr_delim = p.get("headers.delimiter", "\t").encode()
    hdr_sep = p.get("headers.separator", ",").encode()
    hdr_key_sep = p.get("headers.key.separator", ":").encode()
    null = p.get("null.marker")
    null = None if null is None else null.encode()
    stream = source or sys.stdin.buffer
    sent = 0
    with pylog.open(log_dirs) as store:
        if topic not in store.list_topics():
            raise click.ClickException(f"topic {topic!r} does not exist (pylog topics --create)")
        producer = pylog.Producer(store, compression_type=compression_codec)
        try:
            while True:
                lines = [line.rstrip(b"\r\n") for line in _take(stream, batch_lines)]
                if not lines:
                    break
                values, keys, headers = [], [], []
                for n, line in enumerate(lines, sent + 1):
                    hs = []
                    if parse_headers:
                        raw, found, line = line.partition(hdr_delim)
                        if not found:
                            raise click.ClickException(f"line {n}: no headers delimiter "
                                                       f"{hdr_delim.decode()!r}")
                        for h in raw.split(hdr_sep) if raw else ():
                            k, _, v = h.partition(hdr_key_sep)
                            hs.append((k.decode(), None if v == null else v))
                    key = None
                    if parse_key:
                        key, found, line = line.partition(key_sep)
                        if not found:
                            raise click.ClickException(f"line {n}: no key separator "
                                                       f"{key_sep.decode()!r} (parse.key=true)")
                        key = None if key == null else key
                    keys.append(key)
                    values.append(None if line == null else line)
                    headers.append(hs)
                producer.send_batch(topic, values, keys=keys if parse_key else None,
                                    headers=headers if parse_headers else None,
                                    partition=partition).result()
                sent += len(lines)
        finally:
            producer.close()
    click.echo(f"{sent} records appended to {topic}", err=True)
    return 0


def _take(stream, n: int) -> list[bytes]:
    out = []
    for line in stream:
        out.append(line)
        if len(out) >= n:
            break
    return out


_CONSUMER_PROPS = {"print.key", "print.value", "print.timestamp", "print.headers",
                   "print.offset", "print.partition", "key.separator", "line.separator",
                   "headers.separator", "null.literal"}


def _text(raw, null: str) -> str:
    return null if raw is None else bytes(raw).decode("utf-8", errors="replace")


def _formatter(p: dict[str, str], as_json: bool, topic: str):
    if as_json:
        def fmt(partition, offset, ts, ts_type, key, value, headers):
            return json.dumps({"topic": topic, "partition": partition, "offset": offset,
                               "timestamp": ts, "timestampType": ts_type,
                               "key": _text(key, None) if key is not None else None,
                               "value": _text(value, None) if value is not None else None,
                               "headers": [[k, None if v is None else _text(v, "")]
                                           for k, v in headers]})
        return fmt
    sep = p.get("key.separator", "\t")
    null = p.get("null.literal", "null")
    flag = {k: p.get(k, "false") == "true" for k in _CONSUMER_PROPS if k.startswith("print.")}
    flag["print.value"] = p.get("print.value", "true") == "true"

    def fmt(partition, offset, ts, ts_type, key, value, headers):
        # Kafka's DefaultMessageFormatter: timestamp, partition, offset, headers, key, value.
        parts = []
        if flag["print.timestamp"]:
            parts.append(f"{'LogAppendTime' if ts_type == 1 else 'CreateTime'}:{ts}")
        if flag["print.partition"]:
            parts.append(f"Partition:{partition}")
        if flag["print.offset"]:
            parts.append(f"Offset:{offset}")
        if flag["print.headers"]:
            parts.append(p.get("headers.separator", ",").join(
                f"{k}:{_text(v, null)}" for k, v in headers) if headers else "NO_HEADERS")
        if flag["print.key"]:
            parts.append(_text(key, null))
        if flag["print.value"]:
            parts.append(_text(value, null))
        return sep.join(parts)
    return fmt


@click.command("console-consumer",
               help="Print a topic's records (kafka-console-consumer.sh). Reads the log dirs "
                    "read-only, beside a running owner, unless --group is given.")
@log_dirs_option()
@click.option("--topic", required=True)
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset (default: latest)")
@click.option("--partition", type=int, help="only this partition")
@click.option("--offset", default=None, help="with --partition: earliest, latest or an offset")
@click.option("--max-messages", type=int, help="exit after this many records")
@click.option("--timeout-ms", type=int, help="exit after this long without a new record")
@click.option("--group", help="consume as this group (opens the store; commits what it printed)")
@click.option("--property", "props", multiple=True, metavar="KEY=VALUE",
              help="print.key, print.timestamp, print.headers, print.offset, print.partition, "
                   "print.value, key.separator, headers.separator, null.literal")
@click.option("--formatter", type=click.Choice(["default", "json"]), default="default")
@fail_on(Exception)
def console_consumer(log_dirs, topic, from_beginning, partition, offset, max_messages, timeout_ms,
                     group, props, formatter) -> int:
    p = _properties(props, _CONSUMER_PROPS)
    fmt = _formatter(p, formatter == "json", topic)
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if group:
        return _consume_group(log_dirs, topic, group, from_beginning, max_messages, timeout_ms, fmt)
    from pylog.storage import LogDirsReader
    reader = LogDirsReader(log_dirs)
    count = reader.topics().get(topic)
    if count is None:
        raise click.ClickException(f"topic {topic!r} does not exist in {log_dirs}")
    parts = [partition] if partition is not None else list(range(count))
    readers = {q: reader.partition(topic, q) for q in parts}
    position = {}
    for q, pr in readers.items():
        if offset not in (None, "earliest", "latest"):
            position[q] = int(offset)
        elif from_beginning or offset == "earliest":
            position[q] = pr.log_start_offset()
        else:
            position[q] = pr.log_end_offset()
    printed, idle_since = 0, time.monotonic()
    while True:
        progressed = False
        for q, pr in readers.items():
            end = pr.log_end_offset()
            if end <= position[q]:
                continue
            for rows in pr.read_arrow(position[q], end):
                cols = rows.to_pydict()
                stamps = rows.column("timestamp").cast("int64").to_pylist()   # ms, no time zone
                for i in range(rows.num_rows):
                    click.echo(fmt(q, cols["offset"][i], stamps[i], cols["timestamp_type"][i],
                                   cols["key"][i], cols["value"][i],
                                   [(h["key"], h["value"]) for h in cols["headers"][i]]))
                    printed += 1
                    position[q] = cols["offset"][i] + 1
                    if max_messages is not None and printed >= max_messages:
                        return 0
            progressed = True
        if progressed:
            idle_since = time.monotonic()
        elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
            return 0
        else:
            time.sleep(0.1)


def _consume_group(log_dirs, topic, group, from_beginning, max_messages, timeout_ms, fmt) -> int:
    import pylog
    printed, idle_since = 0, time.monotonic()
    with pylog.open(log_dirs) as store:
        consumer = pylog.Consumer(store, group_id=group,
                                  auto_offset_reset="earliest" if from_beginning else "latest")
        consumer.subscribe([topic])
        try:
            while True:
                records = consumer.poll(0.2)
                for r in records:
                    # ConsumerRecord has no timestamp type: printed as CreateTime.
                    click.echo(fmt(r.partition, r.offset, r.timestamp, 0, r.key, r.value,
                                   list(r.headers)))
                    printed += 1
                    if max_messages is not None and printed >= max_messages:
                        consumer.commit()
                        return 0
                if records:
                    consumer.commit()
                    idle_since = time.monotonic()
                elif timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                    return 0
        finally:
            consumer.close()
