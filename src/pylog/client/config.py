"""Producer and consumer configuration: Kafka's client config names and defaults.

Keys are Kafka's (``batch.size``, ``linger.ms``, ``group.id``, ...) and may be
written with underscores as Python keywords (``batch_size=...``). Unknown keys
and out-of-range values raise :class:`pylog.errors.ConfigError` naming the key.
Keys that only matter to a networked client (``bootstrap.servers``,
``client.id``, ``request.timeout.ms``, ...) are accepted and ignored, so a
Kafka client's config dict works unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pylog.common.config import (
    ConfigDef,
    ConfigMapping,
    at_least,
    between,
    config_defs,
    normalize_key,
    one_of,
    unknown_key,
)
from pylog.errors import ConfigError
from pylog.compression import CODECS

__all__ = ["PRODUCER_CONFIGS", "CONSUMER_CONFIGS", "SHARE_CONSUMER_CONFIGS", "ClientConfig"]

_CODECS = tuple(CODECS)

PRODUCER_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("batch.size", "int", 16384, "Bytes of records per partition batch before it is "
              "sent.", between(1, 1 << 30)),
    ConfigDef("linger.ms", "int", 5, "How long a batch waits for more records before it is "
              "sent (Kafka 4.0's default).", at_least(0)),
    ConfigDef("compression.type", "str", "none", "Codec for batches.", one_of(*_CODECS)),
    ConfigDef("acks", "str", "all", "0 or 1: done when the batch is in the log (page cache); "
              "all (-1): done after the fsync that covers it.", one_of("0", "1", "all", "-1")),
    ConfigDef("max.request.size", "int", 1048576, "Largest record (and batch) in bytes.",
              at_least(1)),
    ConfigDef("buffer.memory", "int", 33554432, "Bytes of records waiting to be sent; send() "
              "blocks when they are used up.", at_least(1)),
    ConfigDef("max.block.ms", "int", 60000, "How long send() blocks for buffer memory or "
              "metadata before it raises KafkaTimeoutError.", at_least(0)),
    ConfigDef("enable.idempotence", "bool", True, "Producer id and sequence numbers: "
              "duplicates of a batch are not appended twice (requires acks=all; as in "
              "Kafka, turned off when acks is set otherwise and this key is not)."),
    ConfigDef("partitioner.ignore.keys", "bool", False, "Treat every record as keyless "
              "(sticky partitioning)."),
    ConfigDef("delivery.timeout.ms", "int", 120000, "Upper bound on the time between send() "
              "and completion: a batch still unsent after it fails with KafkaTimeoutError.",
              at_least(0)),
    ConfigDef("transactional.id", "str", "", "Makes the producer transactional "
              "(init_transactions, begin/commit/abort_transaction); needs idempotence."),
    ConfigDef("transaction.timeout.ms", "int", 60000, "How long a transaction may stay open "
              "before the coordinator aborts it (at most the store's "
              "transaction.max.timeout.ms).", at_least(1)),
)

CONSUMER_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("group.id", "str", "", "Consumer group: shares partitions and commits offsets."),
    ConfigDef("auto.offset.reset", "str", "latest", "Where to start without a committed "
              "offset: earliest, latest or none (raise).", one_of("earliest", "latest", "none")),
    ConfigDef("enable.auto.commit", "bool", True, "Commit positions every "
              "auto.commit.interval.ms from poll()."),
    ConfigDef("auto.commit.interval.ms", "int", 5000, "Auto-commit interval.", at_least(0)),
    ConfigDef("max.poll.records", "int", 500, "Records returned by one poll() at most.",
              at_least(1)),
    ConfigDef("fetch.max.bytes", "int", 52428800, "Bytes read by one poll() at most (at least "
              "one batch).", at_least(0)),
    ConfigDef("max.partition.fetch.bytes", "int", 1048576, "Bytes read per partition per poll "
              "at most (at least one batch).", at_least(0)),
    ConfigDef("fetch.min.bytes", "int", 1, "Only 1 (Kafka's default) is supported: poll() "
              "returns as soon as any record is available.", at_least(0)),
    ConfigDef("partition.assignment.strategy", "list", ("range",), "Assignors for groups: "
              "range, roundrobin.", None),
    ConfigDef("isolation.level", "str", "read_uncommitted", "read_uncommitted (every record "
              "below the high watermark) or read_committed (below the last stable offset, "
              "aborted transactions' records skipped); Kafka's Java default.",
              one_of("read_uncommitted", "read_committed")),
    ConfigDef("check.crcs", "bool", True, "Validate batch CRCs when reading."),
)

#: KafkaShareConsumer's (KIP-932): a share group member's keys.
SHARE_CONSUMER_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("group.id", "str", "", "The share group (required)."),
    ConfigDef("share.acknowledgement.mode", "str", "implicit", "implicit: the next poll() or "
              "commit accepts every record the last poll() returned; explicit: each record "
              "is acknowledged with acknowledge() before the next poll().",
              one_of("implicit", "explicit")),
    ConfigDef("max.poll.records", "int", 500, "Records acquired by one poll() at most.",
              at_least(1)),
    ConfigDef("fetch.max.bytes", "int", 52428800, "Bytes read by one poll() at most (at least "
              "one batch).", at_least(0)),
    ConfigDef("check.crcs", "bool", True, "Validate batch CRCs when reading."),
)

# Accepted for compatibility with networked clients' configs; no effect here.
_IGNORED = frozenset({
    "bootstrap.servers", "client.id", "request.timeout.ms", "retries", "retry.backoff.ms",
    "metadata.max.age.ms", "security.protocol", "connections.max.idle.ms", "send.buffer.bytes",
    "receive.buffer.bytes", "max.in.flight.requests.per.connection", "session.timeout.ms",
    "heartbeat.interval.ms", "max.poll.interval.ms", "fetch.max.wait.ms", "client.rack",
    "reconnect.backoff.ms", "socket.connection.setup.timeout.ms", "key.serializer",
    "value.serializer", "key.deserializer", "value.deserializer",
})


class ClientConfig(ConfigMapping):
    """Validated producer or consumer config; read as a mapping or as attributes
    with underscores (``config.batch_size``)."""

    __slots__ = ("_kind",)

    def __init__(self, kind: str, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        defs = {"producer": PRODUCER_CONFIGS, "consumer": CONSUMER_CONFIGS,
                "share_consumer": SHARE_CONSUMER_CONFIGS}[kind]
        parsed = {name: d.default for name, d in defs.items()}
        given = set()
        for raw_key, value in {**dict(values or {}), **kwargs}.items():
            key = normalize_key(raw_key)
            given.add(key)
            if key in _IGNORED:
                continue
            definition = defs.get(key)
            if definition is None:
                raise unknown_key(key, defs, kind)
            parsed[key] = definition.parse(value, key)
        self._values = parsed
        self._kind = kind
        if kind == "producer":
            if parsed["acks"] == "-1":
                parsed["acks"] = "all"
            if parsed["acks"] != "all" and "enable.idempotence" not in given:
                parsed["enable.idempotence"] = False
            if parsed["enable.idempotence"] and parsed["acks"] != "all":
                raise ConfigError(f"enable.idempotence = true requires acks = all, not "
                                  f"{parsed['acks']}")
            if parsed["transactional.id"] and not parsed["enable.idempotence"]:
                raise ConfigError("transactional.id needs enable.idempotence = true (and acks = "
                                  "all), as Kafka's producer")
            if parsed["delivery.timeout.ms"] < parsed["linger.ms"]:
                raise ConfigError(f"delivery.timeout.ms = {parsed['delivery.timeout.ms']} must be at "
                                  f"least linger.ms ({parsed['linger.ms']})")
        elif kind == "consumer":
            if parsed["fetch.min.bytes"] != 1:
                raise ConfigError(f"fetch.min.bytes = {parsed['fetch.min.bytes']}: pylog's in-process "
                                  f"consumer does not support it; poll() returns records as soon "
                                  f"as any are available (Kafka's default, 1)")
            for name in parsed["partition.assignment.strategy"]:
                if name not in ("range", "roundrobin"):
                    raise ConfigError(f"partition.assignment.strategy = {name!r}: expected range "
                                      f"or roundrobin")

    def __repr__(self) -> str:
        return f"ClientConfig({self._kind!r}, {self._values!r})"


