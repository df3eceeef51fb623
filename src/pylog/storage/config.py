"""Configuration: Kafka's keys, defaults and validation, each defined once.

Topic configs (:class:`LogConfig`) use Kafka's exact keys (``segment.bytes``,
``retention.ms``, ...); broker-level defaults for them use Kafka's ``log.``
synonyms (``log.segment.bytes``, ``log.retention.ms``, ``message.max.bytes``,
...), and broker-only keys (``log.dirs``, ``num.recovery.threads.per.data.dir``,
...) live in :data:`BROKER_CONFIGS`. Settings that Kafka does not have use the
``pylog.`` prefix. Every key may also be spelled with underscores
(``segment_bytes``), for Python keyword arguments.

Unknown keys and out-of-range values raise :class:`pylog.errors.ConfigError`,
naming the key, the value and what is allowed. Values may be given as Python
values or as the strings a Kafka properties file would hold.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pylog.common.config import (
    LONG_MAX,
    ConfigDef,
    ConfigMapping,
    at_least,
    between,
    config_defs,
    normalize_key,
    one_of,
    subset_of,
    unknown_key,
)
from pylog.errors import ConfigError
from pylog.compression import CODECS

__all__ = ["TOPIC_CONFIGS", "TOPIC_CONFIG_PREFIXES", "topic_config_def", "BROKER_CONFIGS", "LogConfig", "BrokerConfig", "LONG_MAX"]

_DAY_MS = 24 * 3600 * 1000


def _direct_value(value: str) -> str | None:
    """pylog.io.direct: true, false or auto (also as a bool)."""
    return None if value in ("true", "false", "auto") else "expected true, false or auto"


#: Replaces the default of pylog.io.direct, as PYLOG_IO_ENGINE pins the engine: a
#: deployment (or the test suite, which runs the Log suite in both modes) switches
#: without code changes. Read at import.
DIRECT_ENV_VAR = "PYLOG_IO_DIRECT"


def _direct_default() -> str:
    value = os.environ.get(DIRECT_ENV_VAR, "false").strip().lower()
    if _direct_value(value) is not None:
        raise ConfigError(f"{DIRECT_ENV_VAR}={value!r}: expected true, false or auto")
    return value

#: Topic-level configs (Kafka's TopicConfig + LogConfig), with their broker synonyms.
TOPIC_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("segment.bytes", "int32", 1 << 30, "Size of a segment file; the log rolls to a new "
              "segment when the next append would exceed it.", at_least(14), ("log.segment.bytes",)),
    ConfigDef("segment.ms", "int", 7 * _DAY_MS, "Roll a new segment after this much time, measured "
              "from the first batch's timestamp.", at_least(1), ("log.roll.ms", "log.roll.hours"),
              (1, 3600_000)),
    ConfigDef("segment.jitter.ms", "int", 0, "Maximum random jitter subtracted from segment.ms.",
              at_least(0), ("log.roll.jitter.ms", "log.roll.jitter.hours"), (1, 3600_000)),
    ConfigDef("segment.index.bytes", "int32", 10 << 20, "Size each index file is preallocated to; "
              "trimmed when the segment rolls; at least 12 (one time index entry).", at_least(12),
              ("log.index.size.max.bytes",)),
    ConfigDef("index.interval.bytes", "int32", 4096, "Bytes appended between two offset index "
              "entries.", at_least(0), ("log.index.interval.bytes",)),
    ConfigDef("flush.messages", "int", LONG_MAX, "fsync after this many messages (records); the "
              "default leaves flushing to the OS.", at_least(1), ("log.flush.interval.messages",)),
    ConfigDef("flush.ms", "int", LONG_MAX, "fsync when this long has passed since the last "
              "flush; the default leaves flushing to the OS.", at_least(0),
              ("log.flush.interval.ms",)),
    ConfigDef("retention.ms", "int", 7 * _DAY_MS, "Delete segments whose largest timestamp is "
              "older than this; -1 keeps them forever.", at_least(-1),
              ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
              (1, 60_000, 3600_000)),
    ConfigDef("retention.bytes", "int", -1, "Delete the oldest segments while the partition is "
              "larger than this; -1 means no size limit.", at_least(-1), ("log.retention.bytes",)),
    ConfigDef("max.message.bytes", "int32", (1 << 20) + 12, "Largest record batch the log accepts.",
              at_least(0), ("message.max.bytes",)),
    ConfigDef("message.timestamp.type", "str", "CreateTime", "CreateTime keeps the producer's "
              "timestamps; LogAppendTime stamps each batch with the append time.",
              one_of("CreateTime", "LogAppendTime"), ("log.message.timestamp.type",)),
    ConfigDef("message.timestamp.before.max.ms", "int", LONG_MAX, "Reject CreateTime batches "
              "whose timestamp is more than this far in the past.", at_least(0),
              ("log.message.timestamp.before.max.ms",)),
    ConfigDef("message.timestamp.after.max.ms", "int", LONG_MAX, "Reject CreateTime batches "
              "whose timestamp is more than this far in the future.", at_least(0),
              ("log.message.timestamp.after.max.ms",)),
    ConfigDef("file.delete.delay.ms", "int", 60_000, "Delay between renaming a deleted segment "
              "to .deleted and removing its files.", at_least(0), ("log.segment.delete.delay.ms",)),
    ConfigDef("preallocate", "bool", False, "Preallocate segment files (fallocate) when they are "
              "created; trimmed on roll and close.", None, ("log.preallocate",)),
    ConfigDef("cleanup.policy", "list", ("delete",), "delete, compact, or both.",
              subset_of("delete", "compact"), ("log.cleanup.policy",)),
    ConfigDef("compression.type", "str", "producer", "Final compression of the topic's batches; "
              "producer keeps what the producer sent.",
              one_of("producer", "uncompressed", *(name for name in CODECS if name != "none")),
              ("compression.type",)),
    ConfigDef("delete.retention.ms", "int", _DAY_MS, "How long tombstones are kept in a "
              "compacted log.", at_least(0), ("log.cleaner.delete.retention.ms",)),
    ConfigDef("min.cleanable.dirty.ratio", "float", 0.5, "Dirty ratio above which the log is "
              "compacted.", between(0, 1), ("log.cleaner.min.cleanable.ratio",)),
    ConfigDef("min.compaction.lag.ms", "int", 0, "Minimum age before a record can be compacted.",
              at_least(0), ("log.cleaner.min.compaction.lag.ms",)),
    ConfigDef("max.compaction.lag.ms", "int", LONG_MAX, "Maximum time a record stays "
              "uncompacted.", at_least(1), ("log.cleaner.max.compaction.lag.ms",)),
    # --- pylog-only ---
    ConfigDef("pylog.io.engine", "str", "auto", "I/O engine: auto (io_uring when available), "
              "io_uring, or portable (pwritev + fdatasync).", one_of("auto", "io_uring", "portable"),
              ("pylog.io.engine",)),
    ConfigDef("pylog.io.direct", "str", _direct_default(), "Append with O_DIRECT, past the page cache, "
              "in whole blocks of the file system's direct I/O size (docs/FORMAT.md, O_DIRECT "
              "segments): true, false, or auto (O_DIRECT where the file system allows it, "
              "else buffered with a warning). Durability still needs a flush.",
              _direct_value, ("pylog.io.direct",)),
    ConfigDef("pylog.io.direct.queue.depth", "int32", 1, "O_DIRECT writes one append is cut "
              "into, in flight together (pieces of at least 128 KiB; io_uring engine). 1 "
              "writes each append as one request, which was fastest on the disks measured "
              "(bench/RESULTS.md); raise it for devices that need depth.", between(1, 64),
              ("pylog.io.direct.queue.depth",)),
    ConfigDef("pylog.flush.fadvise.dontneed", "bool", False, "After a flush, drop the flushed "
              "data from the page cache (posix_fadvise DONTNEED).", None,
              ("pylog.flush.fadvise.dontneed",)),
    ConfigDef("pylog.write.behind.bytes", "int", 0, "Start write-back (sync_file_range) after "
              "every this many appended bytes; 0 leaves write-back to the OS.", at_least(0),
              ("pylog.write.behind.bytes",)),
    ConfigDef("pylog.validate.records", "bool", True, "Parse every record of uncompressed "
              "batches on append (compressed batches are checked by CRC only).", None,
              ("pylog.validate.records",)),
    ConfigDef("pylog.recovery.point.checkpoint.interval.ms", "int", 60_000, "How often a "
              "standalone Log persists its recovery point (a LogManager uses "
              "log.flush.offset.checkpoint.interval.ms).", at_least(0),
              ("log.flush.offset.checkpoint.interval.ms",)),
    # Topics as tables (pylog.table, docs/TABLES.md "Configuration"): declared here, with
    # every topic config, so that CreateTopics, kafka-configs and the CLI validate them;
    # pylog.table interprets them. Their broker synonyms are their own names (a broker-wide
    # default, as for the pylog.io.* keys).
    ConfigDef("pylog.table.enable", "bool", False, "Convert the topic into an Apache Iceberg "
              "table in the background (needs the [table] extra: pyiceberg, pyarrow).", None,
              ("pylog.table.enable",)),
    ConfigDef("pylog.table.catalog", "str", "pylog", "The pyiceberg catalog's name. \"pylog\" "
              "with no pylog.table.catalog.* properties is the local SQL catalog on SQLite in "
              "the first log dir (__tables/catalog.db); any other catalog (rest, sql, hive, "
              "glue) is given by pylog.table.catalog.<property> (type, uri, warehouse...) or "
              "by pyiceberg's own configuration (.pyiceberg.yaml, PYICEBERG_CATALOG__*).",
              lambda v: None if v.strip() else "must not be empty", ("pylog.table.catalog",)),
    ConfigDef("pylog.table.namespace", "str", "pylog", "The Iceberg namespace of the table.",
              lambda v: None if v.strip() and "." not in v else "must be one non-empty name "
              "without '.'", ("pylog.table.namespace",)),
    ConfigDef("pylog.table.name", "str", "", "The Iceberg table's name; empty: the topic's "
              "name with '.' replaced by '_'.",
              lambda v: None if "." not in v else "must not contain '.' (Iceberg's namespace "
              "separator)", ("pylog.table.name",)),
    ConfigDef("pylog.table.commit.interval.ms", "int", 60_000, "How often the table receives "
              "a commit of the records appended since the last one (its freshness).",
              at_least(1), ("pylog.table.commit.interval.ms",)),
    ConfigDef("pylog.table.partition.by", "str", "none", "The table's partitioning: none, "
              "partition (the Kafka partition), hour(timestamp) or day(timestamp). Fixed "
              "when the table is created.",
              one_of("none", "partition", "hour(timestamp)", "day(timestamp)"),
              ("pylog.table.partition.by",)),
    ConfigDef("pylog.table.retention", "str", "keep", "keep: the table keeps every converted "
              "record after the topic's segments are deleted (the only policy built; follow, "
              "deleting the table's rows with the segments, is refused).",
              lambda v: None if v == "keep" else (
                  "follow is not built: the table keeps its history (set keep)" if v == "follow"
                  else "must be keep"), ("pylog.table.retention",)),
    # Table maintenance (pylog.table.maintenance, docs/TABLES.md "Maintenance"): run by the
    # store's TableService between the topic's conversion commits.
    ConfigDef("pylog.table.maintenance.interval.ms", "int", 3_600_000, "How often the store "
              "maintains the table (compacts small files, expires old snapshots, removes "
              "orphan files), at multiples of it on the wall clock; 0 or -1 disables (the "
              "pylog tables commands still work).", at_least(-1),
              ("pylog.table.maintenance.interval.ms",)),
    ConfigDef("pylog.table.compact.target.file.bytes", "int", 128 << 20, "Compaction's "
              "target: data files below 3/4 of it are small, and are rewritten together "
              "into files of about this size.", at_least(1 << 10),
              ("pylog.table.compact.target.file.bytes",)),
    ConfigDef("pylog.table.compact.min.files", "int32", 5, "Fewest small files of one "
              "Iceberg partition that compaction rewrites (fewer are left as they are).",
              at_least(2), ("pylog.table.compact.min.files",)),
    ConfigDef("pylog.table.snapshot.max.age.ms", "int", 86_400_000, "Snapshots older than "
              "this are expired by maintenance (with the files only they use); -1 keeps "
              "every snapshot.", at_least(-1), ("pylog.table.snapshot.max.age.ms",)),
    ConfigDef("pylog.table.snapshot.retain.last", "int32", 1, "Newest snapshots that expiry "
              "always keeps, whatever their age (the current one is always kept).",
              at_least(1), ("pylog.table.snapshot.retain.last",)),
    ConfigDef("pylog.table.orphan.min.age.ms", "int", 86_400_000, "Maintenance removes files "
              "under the table's location that no snapshot references once they are older "
              "than this (the files of a conversion killed before its commit); -1 never. "
              "A conversion's files are unreferenced until its commit: the floor keeps them.",
              lambda v: None if v == -1 or v >= 60_000 else "must be -1 (never remove) or "
              "at least 60000: a younger unreferenced file may be one a conversion has "
              "written and not yet committed", ("pylog.table.orphan.min.age.ms",)),
)

#: Families of topic configs by prefix, each key a string the family's owner interprets:
#: pyiceberg catalog properties, and the value schema's settings (pylog.table.schema).
TOPIC_CONFIG_PREFIXES: tuple[str, ...] = ("pylog.table.catalog.", "pylog.table.schema.")


def topic_config_def(key: str) -> ConfigDef | None:
    """The definition of a topic config key: one of :data:`TOPIC_CONFIGS`, or a string
    of a prefixed family (``pylog.table.catalog.uri``); None for an unknown key."""
    definition = TOPIC_CONFIGS.get(key)
    if definition is not None:
        return definition
    for prefix in TOPIC_CONFIG_PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            return ConfigDef(key, "str", "", f"A property of the {prefix}* family "
                             "(docs/TABLES.md).", None, ())
    return None

#: Broker-level configs that have no topic-level key.
BROKER_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("log.dirs", "list", (), "Log directories, one per disk (JBOD)."),
    ConfigDef("log.dir", "str", "/tmp/kafka-logs", "The log directory when log.dirs is unset."),
    ConfigDef("num.recovery.threads.per.data.dir", "int32", 1, "Threads per log dir that load "
              "and recover logs at startup and flush them at shutdown.", at_least(1)),
    ConfigDef("log.flush.scheduler.interval.ms", "int", LONG_MAX, "How often the flusher checks "
              "whether any log is due for a flush.", at_least(0)),
    ConfigDef("log.retention.check.interval.ms", "int", 300_000, "How often retention runs.",
              at_least(1)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", "int", 60_000,
              "How often log start offsets are checkpointed.", at_least(0)),
    ConfigDef("num.partitions", "int32", 1, "Default partition count for new topics.", at_least(1)),
    ConfigDef("auto.create.topics.enable", "bool", True, "Create topics on first use."),
    ConfigDef("node.id", "int32", 0, "This node's id, written to meta.properties.", at_least(0)),
    ConfigDef("pylog.io.queue.depth", "int32", 64, "io_uring ring size per log dir.", between(1, 4096)),
    ConfigDef("offsets.topic.num.partitions", "int32", 50, "Partitions of __consumer_offsets "
              "(fixed when the topic is created).", at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", "int32", 100 << 20, "segment.bytes of "
              "__consumer_offsets.", at_least(14)),
    # The transaction coordinator (coordinator/transactions.py), Kafka's names and defaults.
    ConfigDef("transaction.state.log.num.partitions", "int32", 50, "Partitions of "
              "__transaction_state (fixed when the topic is created).", at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int32", 100 << 20, "segment.bytes of "
              "__transaction_state.", at_least(14)),
    ConfigDef("transaction.max.timeout.ms", "int32", 900_000, "The longest "
              "transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT "
              "beyond).", at_least(1)),
    ConfigDef("transactional.id.expiration.ms", "int32", 604_800_000, "A transactional id "
              "with no transaction open and no request for this long is forgotten.",
              at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int32", 10_000,
              "How often transactions past their timeout are aborted.", at_least(1)),
    ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", "int32", 3_600_000,
              "How often expired transactional ids are removed.", at_least(1)),
    ConfigDef("pylog.background.poll.ms", "int32", 500, "Longest the LogManager's background "
              "thread sleeps before it re-reads the clock.", between(1, 60_000)),
    ConfigDef("log.cleaner.enable", "bool", True, "Run the log cleaner (compacted topics)."),
    ConfigDef("log.cleaner.threads", "int32", 1, "Log cleaner threads (pylog runs one).",
              lambda v: None if v == 1 else "pylog runs one log cleaner thread (Kafka's "
                                            "default): set 1"),
    ConfigDef("log.cleaner.dedupe.buffer.size", "int", 128 << 20, "Memory for the cleaner's "
              "offset map (24 bytes per record mapped, at most 90% used).", at_least(1 << 10)),
    ConfigDef("log.cleaner.io.max.bytes.per.second", "float", float("inf"), "Bytes the cleaner "
              "reads per second, at most.", at_least(1)),
    ConfigDef("log.cleaner.backoff.ms", "int", 15_000, "How long the cleaner sleeps when no "
              "log needs cleaning.", at_least(0)),
    # Partition bounds (storage/budget.py, docs/ARCHITECTURE.md "Partition limits").
    ConfigDef("pylog.max.partitions.per.request", "int32", 10_000, "Most partitions one "
              "CreateTopics request (all its topics together) or CreatePartitions request may "
              "add; more is refused with POLICY_VIOLATION. Kafka's controller has the same "
              "bound, fixed at 10000.", at_least(1)),
    ConfigDef("pylog.max.partitions", "int32", 100_000, "Most partitions the store may hold, "
              "internal topics included; a creation beyond it is refused with POLICY_VIOLATION "
              "(Kafka's KIP-578 proposed this as max.partitions; Kafka has none).", at_least(1)),
    ConfigDef("pylog.open.files.reserve", "int32", 256, "Descriptors a creation must leave free "
              "for client connections and other files, beyond each open partition's three and "
              "the inactive segments' share; at start-up, partitions that would eat into it "
              "stay offline.", at_least(0)),
    ConfigDef("pylog.raise.open.files.limit", "bool", True, "At store open, raise the soft "
              "open-files limit (ulimit -n) to the hard limit, as the JVM does for Kafka."),
)

_BROKER_SYNONYMS: dict[str, tuple[str, int]] = {}
for _d in TOPIC_CONFIGS.values():
    scales = _d.synonym_scale or (1,) * len(_d.broker_synonyms)
    for _syn, _scale in zip(_d.broker_synonyms, scales):
        _BROKER_SYNONYMS[_syn] = (_d.name, _scale)


class LogConfig(ConfigMapping):
    """Validated topic-level configuration of one log.

    ``LogConfig({"segment.bytes": 1 << 20})`` or ``LogConfig(segment_bytes=1 << 20)``;
    ``defaults`` (another LogConfig, e.g. from broker settings) fills unset keys.
    Read values as a mapping (``config["segment.bytes"]``) or as attributes
    with underscores (``config.segment_bytes``). Immutable: ``with_overrides``
    returns a new config.
    """

    # Every key is also a slot (segment.bytes -> segment_bytes), so attribute
    # reads on the append path are plain slot loads, not __getattr__ misses.
    __slots__ = ("_overrides", *(name.replace(".", "_") for name in TOPIC_CONFIGS))

    def __init__(self, overrides: Mapping[str, Any] | None = None, *,
                 defaults: LogConfig | None = None, **kwargs: Any) -> None:
        given = dict(overrides or {})
        given.update(kwargs)
        parsed: dict[str, Any] = {}
        for raw_key, value in given.items():
            key = normalize_key(raw_key)
            definition = topic_config_def(key)
            if definition is None:
                raise unknown_key(key, TOPIC_CONFIGS, "topic")
            parsed[key] = definition.parse(value, key)
        base = defaults._values if defaults is not None else {
            name: d.default for name, d in TOPIC_CONFIGS.items()}
        self._values = {**base, **parsed}
        self._overrides = parsed
        for name, value in self._values.items():
            if name in TOPIC_CONFIGS:      # prefixed keys have no slot: read by key
                object.__setattr__(self, name.replace(".", "_"), value)

    @classmethod
    def from_broker(cls, broker: Mapping[str, Any]) -> LogConfig:
        """Topic defaults from broker-level synonyms (``log.segment.bytes`` ...)."""
        values: dict[str, Any] = {}
        ranked: dict[str, int] = {}
        for raw_key, value in broker.items():
            key = normalize_key(raw_key)
            if key in _BROKER_SYNONYMS:
                name, scale = _BROKER_SYNONYMS[key]
                definition = TOPIC_CONFIGS[name]
                rank = definition.broker_synonyms.index(key)
                if name in ranked and ranked[name] <= rank:
                    continue
                parsed = definition.parse(value, key)
                values[name] = parsed * scale if scale != 1 else parsed
                ranked[name] = rank
        return cls(values)

    def with_overrides(self, overrides: Mapping[str, Any]) -> LogConfig:
        return LogConfig(overrides, defaults=self)

    @property
    def overrides(self) -> dict[str, Any]:
        """The keys set explicitly (not defaults)."""
        return dict(self._overrides)

    def __repr__(self) -> str:
        return f"LogConfig({self._overrides!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogConfig) and self._values == other._values

    __hash__ = None  # type: ignore[assignment]


class BrokerConfig(ConfigMapping):
    """Validated broker-level configuration: broker keys plus ``log.`` topic defaults."""

    __slots__ = ("log_config",)

    def __init__(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        given = {normalize_key(k): v for k, v in {**dict(values or {}), **kwargs}.items()}
        parsed: dict[str, Any] = {name: d.default for name, d in BROKER_CONFIGS.items()}
        topic_level: dict[str, Any] = {}
        for key, value in given.items():
            if key in BROKER_CONFIGS:
                parsed[key] = BROKER_CONFIGS[key].parse(value, key)
            elif key in _BROKER_SYNONYMS:
                topic_level[key] = value
            else:
                raise unknown_key(key, list(BROKER_CONFIGS) + list(_BROKER_SYNONYMS), "broker")
        self.log_config = LogConfig.from_broker(topic_level)
        self._values = parsed

    def __repr__(self) -> str:
        return f"BrokerConfig({self._values!r})"
