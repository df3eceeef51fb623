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

from pylog.errors import ErrorCode
from pylog.compression import CODECS

from .common import fail_on, log_dirs_option
from .remote import bootstrap_option

__all__ = ["console_producer", "console_consumer"]

_UNESCAPE = {"\\t": "\t", "\\n": "\n"}
_METADATA_ATTEMPTS = 25          # 5 s for a broker to create a topic (0.2 s apart)


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
                    "(kafka-console-producer.sh), in log dirs or at a broker.")
@log_dirs_option(required=False)
@bootstrap_option()
@click.option("--topic", required=True)
@click.option("--property", "props", multiple=True, metavar="KEY=VALUE",
              help="parse.key, key.separator (\\t), parse.headers, headers.delimiter (\\t), "
                   "headers.separator (,), headers.key.separator (:), null.marker")
@click.option("--compression-codec", default="none",
              type=click.Choice(list(CODECS)))
@click.option("--partition", type=int, help="every record to this partition")
@click.option("--request-required-acks", "acks", default="-1", show_default=True,
              type=click.Choice(["-1", "all", "0", "1"]), help="with --bootstrap-server")
@click.option("--file", "source", type=click.File("rb"), help="read this file instead of stdin")
@click.option("--batch-lines", default=10000, show_default=True, help="lines per batch")
@fail_on(Exception)
def console_producer(log_dirs, bootstrap_server, topic, props, compression_codec, partition, acks,
                     source, batch_lines) -> int:
    if bool(log_dirs) == bool(bootstrap_server):
        raise click.UsageError("give --log-dirs or --bootstrap-server (one of them)")
    chunks = _parsed_lines(source or sys.stdin.buffer, batch_lines,
                           _properties(props, _PRODUCER_PROPS))
    if bootstrap_server:
        sent = _produce_remote(bootstrap_server, topic, chunks, compression_codec, partition,
                               -1 if acks == "all" else int(acks))
        click.echo(f"{sent} records produced to {topic} at {bootstrap_server}", err=True)
        return 0
    import pylog
    from pylog.errors import UnknownTopicOrPartitionError
    sent = 0
    with pylog.open(log_dirs) as store:
        # As a broker would for a producer: create it where auto.create.topics.enable is on.
        try:
            store.auto_create_topic(topic)
        except UnknownTopicOrPartitionError as exc:
            raise click.ClickException(f"{exc} (pylog topics --create)") from None
        producer = pylog.Producer(store, compression_type=compression_codec)
        try:
            for values, keys, headers in chunks:
                producer.send_batch(topic, values, keys=keys, headers=headers,
                                    partition=partition).result()
                sent += len(values)
        finally:
            producer.close()
    click.echo(f"{sent} records appended to {topic}", err=True)
    return 0


def _parsed_lines(stream, batch_lines: int, p: dict[str, str]):
    """Chunks of (values, keys or None, headers or None) from the lines of `stream`,
    split as Kafka's LineMessageReader splits them."""
    parse_key = p.get("parse.key", "false") == "true"
    parse_headers = p.get("parse.headers", "false") == "true"
    key_sep = p.get("key.separator", "\t").encode()
    hdr_delim = p.get("headers.delimiter", "\t").encode()
    hdr_sep = p.get("headers.separator", ",").encode()
    hdr_key_sep = p.get("headers.key.separator", ":").encode()
    null = p.get("null.marker")
    null = None if null is None else null.encode()
    n = 0
    while True:
        lines = [line.rstrip(b"\r\n") for line in _take(stream, batch_lines)]
        if not lines:
            return
        values, keys, headers = [], [], []
        for line in lines:
            n += 1
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
        yield values, keys if parse_key else None, headers if parse_headers else None


def _produce_remote(bootstrap, topic, chunks, compression, partition, acks) -> int:
    """Encodes each chunk per partition (keys by Kafka's murmur2, keyless records to one
    partition per chunk, as the sticky partitioner) and produces it to the leader."""
    from pylog._core.producer import partition_keys
    from pylog.record import encode_batch
    from pylog.remote import RemoteProducer, leaders
    _ensure_topic(bootstrap, topic)
    counts, where = leaders(bootstrap, [topic], "pylog-console-producer")
    count = counts.get(topic)
    if count is None:
        raise click.ClickException(f"topic {topic!r} does not exist at {bootstrap}")
    if partition is not None and not 0 <= partition < count:
        raise click.ClickException(f"topic {topic!r} has no partition {partition} "
                                   f"(it has {count})")
    sent = 0
    with RemoteProducer(where, "pylog-console-producer", acks=acks) as producer:
        for chunk, (values, keys, headers) in enumerate(chunks):
            if partition is not None:
                parts = [partition] * len(values)
            else:
                hashed = partition_keys(keys, count).tolist() if keys is not None else None
                sticky = chunk % count
                parts = [sticky if hashed is None or hashed[i] < 0 else hashed[i]
                         for i in range(len(values))]
            by_partition: dict[int, list[int]] = {}
            for i, q in enumerate(parts):
                by_partition.setdefault(q, []).append(i)
            now = int(time.time() * 1000)
            for q, rows in sorted(by_partition.items()):
                pick = (lambda col: None if col is None else [col[i] for i in rows])
                data = encode_batch(pick(values), pick(keys), now, pick(headers),
                                    compression=compression)
                producer.send(topic, q, data, len(rows))
            sent += len(values)
    return sent


def _ensure_topic(bootstrap: str, topic: str) -> None:
    """A producer's Metadata request for `topic`, which lets the broker create it where
    its auto.create.topics.enable is on. Kafka answers LEADER_NOT_AVAILABLE until a new
    topic has its leaders: asked again meanwhile, for up to 5 s."""
    from pylog.protocol.client import ProtocolClient, ProtocolError
    with ProtocolClient(bootstrap.split(",")[0].strip(), "pylog-console-producer") as client:
        for _ in range(_METADATA_ATTEMPTS):
            answer = client.metadata([topic], allow_auto_create=True)
            error = next((t.error_code for t in answer.topics if t.name == topic),
                         ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if error != ErrorCode.LEADER_NOT_AVAILABLE:
                break
            time.sleep(0.2)
    if error:
        raise click.ClickException(str(ProtocolError(
            error, f"topic {topic!r} at {bootstrap} (created where the broker's "
                   f"auto.create.topics.enable is true)")))


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
               help="Print a topic's records (kafka-console-consumer.sh). Reads log dirs "
                    "read-only, beside a running owner (unless --group is given), or a "
                    "broker's topic (--bootstrap-server).")
@log_dirs_option(required=False)
@bootstrap_option()
@click.option("--topic", required=True)
@click.option("--from-beginning", is_flag=True, help="start at the earliest offset (default: latest)")
@click.option("--partition", type=int, help="only this partition")
@click.option("--offset", default=None, help="with --partition: earliest, latest or an offset")
@click.option("--max-messages", type=int, help="exit after this many records")
@click.option("--timeout-ms", type=int, help="exit after this long without a new record")
@click.option("--group", help="start at the group's committed offsets and commit what was "
                              "printed (log dirs: joins the group in the store)")
@click.option("--property", "props", multiple=True, metavar="KEY=VALUE",
              help="print.key, print.timestamp, print.headers, print.offset, print.partition, "
                   "print.value, key.separator, headers.separator, null.literal")
@click.option("--formatter", type=click.Choice(["default", "json"]), default="default")
@fail_on(Exception)
def console_consumer(log_dirs, bootstrap_server, topic, from_beginning, partition, offset,
                     max_messages, timeout_ms, group, props, formatter) -> int:
    if bool(log_dirs) == bool(bootstrap_server):
        raise click.UsageError("give --log-dirs or --bootstrap-server (one of them)")
    p = _properties(props, _CONSUMER_PROPS)
    fmt = _formatter(p, formatter == "json", topic)
    if offset is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if group and log_dirs:
        return _consume_group(log_dirs, topic, group, from_beginning, max_messages, timeout_ms, fmt)
    if bootstrap_server:
        from pylog.remote import RemoteGroups, RemoteTopics
        with RemoteTopics(bootstrap_server, "pylog-console-consumer") as where, \
                RemoteGroups(bootstrap_server, "pylog-console-consumer") as groups:
            return _tail(where, bootstrap_server, topic, from_beginning, partition, offset,
                         max_messages, timeout_ms, fmt, groups if group else None, group)
    from pylog.storage import LogDirsReader
    return _tail(LogDirsReader(log_dirs), log_dirs, topic, from_beginning, partition, offset,
                 max_messages, timeout_ms, fmt)


def _tail(where, name, topic, from_beginning, partition, offset, max_messages, timeout_ms, fmt,
          groups=None, group=None) -> int:
    """Prints records of `where` (log dirs read-only, or a broker's partitions) as they
    arrive. With `groups`, starts at the group's committed offsets and commits (as a
    client outside the group) what it printed."""
    count = where.topics().get(topic)
    if count is None:
        raise click.ClickException(f"topic {topic!r} does not exist in {name}")
    parts = [partition] if partition is not None else list(range(count))
    readers = {q: where.partition(topic, q) for q in parts}
    committed = groups.committed(group) if groups is not None else {}
    position = {}
    for q, pr in readers.items():
        if offset not in (None, "earliest", "latest"):
            position[q] = int(offset)
        elif (topic, q) in committed and offset is None:
            position[q] = committed[(topic, q)]
        elif from_beginning or offset == "earliest":
            position[q] = pr.log_start_offset()
        else:
            position[q] = pr.log_end_offset()
    printed, idle_since = 0, time.monotonic()

    def commit() -> None:
        if groups is not None:
            groups.commit(group, {(topic, q): o for q, o in position.items()})
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
                        commit()
                        return 0
            # Everything below `end` was read: control batches (transaction markers)
            # hold no record to print, and the position moves past them too, or a
            # partition that ends in one would be read again forever.
            position[q] = end
            progressed = True
        if progressed:
            commit()
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
