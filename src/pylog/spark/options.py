"""The options of ``format("pylog")``: Spark's Kafka source and sink names, checked on
the driver at planning time so a typo is an error naming the option, never a
traceback from an executor.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pylog.compression import CODECS
from pylog.errors import ConfigError, PylogError
from pylog.remote.security import PLAINTEXT, SECURITY_KEYS, ClientSecurity

__all__ = ["SourceOptions", "SinkOptions", "OptionError", "EARLIEST", "LATEST"]

EARLIEST = -2      # Kafka's JSON offsets: -2 is the earliest offset, -1 the latest
LATEST = -1

# Spark adds these itself (load(path), streaming writers).
_SPARK_ADDED = {"path", "paths", "queryname", "checkpointlocation"}

SOURCE_OPTIONS = {
    "path", "kafka.bootstrap.servers", "subscribe", "subscribepattern", "assign",
    "startingoffsets", "endingoffsets", "startingtimestamp", "endingtimestamp",
    "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy",
    "minpartitions", "maxrecordsperpartition", "failondataloss", "includeheaders",
    "maxoffsetspertrigger", "minoffsetspertrigger", "maxtriggerdelay", "filterpushdown",
    "kafka.isolation.level", "table",
}
SINK_OPTIONS = {"path", "kafka.bootstrap.servers", "topic", "kafka.compression.type",
                "includeheaders"}
# Remote mode's TLS and SASL: the Kafka client's own keys with Spark's "kafka." prefix
# (Spark's Kafka connector passes them the same way), e.g. kafka.security.protocol.
SECURITY_OPTIONS = {"kafka." + key for key in SECURITY_KEYS}

# The spelling users know, for messages.
_CANONICAL = {name.lower(): name for name in (
    "path", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "minPartitions",
    "maxRecordsPerPartition", "failOnDataLoss", "includeHeaders", "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger", "maxTriggerDelay", "filterPushdown", "topic",
    "kafka.compression.type", "kafka.bootstrap.servers", "kafka.isolation.level", "table")}


class OptionError(PylogError, ValueError):
    """A bad ``format("pylog")`` option: the message names it."""


def _location(opts: dict[str, str], what: str) -> tuple[str | None, str | None]:
    """(paths, bootstrap): exactly one of ``path`` and ``kafka.bootstrap.servers``."""
    paths = opts.get("path") or opts.get("paths")
    if paths and paths.startswith("["):      # load([...]) passes a JSON list as 'paths'
        paths = ",".join(json.loads(paths))
    bootstrap = opts.get("kafka.bootstrap.servers")
    if bool(paths) == bool(bootstrap):
        verb = "load" if what != "sink" else "save"
        raise OptionError(
            f"the pylog {what} needs exactly one of the log dirs (.option(\"path\", "
            f"\"/data/pylog\") or .{verb}(\"/data/pylog\"), comma-separated for JBOD) and a "
            "broker (.option(\"kafka.bootstrap.servers\", \"host:9092\"))"
            + (", not both" if paths else ""))
    return paths or None, bootstrap or None


def _name(key: str) -> str:
    return _CANONICAL.get(key, key)


def _check_known(options: Mapping[str, str], known: set[str], what: str) -> dict[str, str]:
    out = {str(k).lower(): str(v) for k, v in options.items()}
    for key in out:
        if key in known or key in _SPARK_ADDED or key in SECURITY_OPTIONS:
            continue
        if key.startswith("kafka."):
            raise OptionError(
                f"option {key!r} is not supported: of the Kafka client's options, the pylog "
                f"{what} takes kafka.bootstrap.servers (remote mode)"
                + (" and kafka.compression.type" if what == "sink" else
                   " and kafka.isolation.level")
                + f", and for TLS and SASL {', '.join(sorted(SECURITY_OPTIONS))}")
        hint = difflib.get_close_matches(key, sorted(known), n=1)
        suggestion = f"; did you mean {_name(hint[0])!r}?" if hint else ""
        raise OptionError(f"unknown option {key!r} for the pylog {what}{suggestion} "
                          f"(known: {', '.join(sorted(_name(k) for k in known))})")
    return out


def _security(opts: dict[str, str], bootstrap: str | None, what: str) -> ClientSecurity:
    """Remote mode's connections: the kafka.security.protocol, kafka.sasl.* and
    kafka.ssl.* options, checked here on the driver (a missing trust store or a wrong
    mechanism is an error naming the option, not an executor's traceback)."""
    given = {k[len("kafka."):]: v for k, v in opts.items() if k in SECURITY_OPTIONS}
    if not given:
        return PLAINTEXT
    if bootstrap is None:
        raise OptionError(f"option(s) {', '.join('kafka.' + k for k in sorted(given))}: TLS and "
                          f"SASL are for remote mode (kafka.bootstrap.servers); the {what} reads "
                          f"log dirs directly")
    try:
        return ClientSecurity(given, "option kafka.")
    except ConfigError as exc:
        raise OptionError(str(exc).replace("option kafka.: ", "option kafka.", 1)) from None


def _int(opts: dict[str, str], key: str, minimum: int | None = None) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        raise OptionError(f"option {_name(key)!r} must be an integer, got {opts[key]!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option {_name(key)!r} must be >= {minimum}, got {value}")
    return value


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    text = opts[key].strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {_name(key)!r} must be true or false, got {opts[key]!r}")
    return text == "true"


def _json_partitions(key: str, text: str, what: str) -> dict[str, dict[int, int]]:
    """``{"topic":{"0":23,"1":-2}}`` -> {"topic": {0: 23, 1: -2}}."""
    example = '{"topicA":{"0":23,"1":-1}}' if what == "offsets" else '{"topicA":{"0":1700000000000}}'
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise OptionError(f"option {_name(key)!r} is not valid JSON ({exc}); expected "
                          f"earliest, latest or {example}") from None
    if not isinstance(body, dict) or not body:
        raise OptionError(f"option {_name(key)!r} must be a JSON object like {example}, got {text!r}")
    out: dict[str, dict[int, int]] = {}
    for topic, parts in body.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {_name(key)!r}: topic {topic!r} must map to an object of "
                              f"partition -> {what[:-1]}, like {example}")
        out[topic] = {}
        for p, value in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(f"option {_name(key)!r}: partition {p!r} of topic {topic!r} "
                                  f"is not an integer") from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"option {_name(key)!r}: {topic}-{partition} must be an "
                                  f"integer {what[:-1]}, got {value!r}")
            out[topic][partition] = value
    return out


@dataclass
class SourceOptions:
    paths: str | None
    bootstrap: str | None = None
    subscribe: list[str] | None = None
    pattern: re.Pattern | None = None
    assign: dict[str, list[int]] | None = None
    starting: str | dict[str, dict[int, int]] = "earliest"
    ending: str | dict[str, dict[int, int]] = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    starting_by_timestamp: dict[str, dict[int, int]] | None = None
    ending_by_timestamp: dict[str, dict[int, int]] | None = None
    timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    filter_pushdown: bool = False
    #: kafka.isolation.level=read_committed: ranges end at the last stable offset and
    #: aborted transactions' records are skipped (Spark's Kafka source option).
    read_committed: bool = False
    #: Remote mode's TLS and SASL (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*).
    security: ClientSecurity = PLAINTEXT
    #: table=true: the topic's Iceberg table below its watermark, the log from it on
    #: (pylog.spark.table_part).
    table: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> SourceOptions:
        what = "streaming source" if streaming else "source"
        opts = _check_known(options, SOURCE_OPTIONS, what)
        paths, bootstrap = _location(opts, what)
        out = cls(paths=paths, bootstrap=bootstrap, security=_security(opts, bootstrap, what))
        given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
        if len(given) != 1:
            raise OptionError("give exactly one of the options 'subscribe', 'subscribePattern' "
                              f"and 'assign' (got {', '.join(map(_name, given)) or 'none'})")
        if "subscribe" in opts:
            out.subscribe = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            if not out.subscribe:
                raise OptionError("option 'subscribe' names no topic")
        elif "subscribepattern" in opts:
            try:
                out.pattern = re.compile(opts["subscribepattern"])
            except re.error as exc:
                raise OptionError(f"option 'subscribePattern' is not a valid regular expression: "
                                  f"{exc}") from None
        else:
            try:
                body = json.loads(opts["assign"])
                assert isinstance(body, dict) and body and all(
                    isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool)
                                                for p in v) for v in body.values())
            except (ValueError, AssertionError):
                raise OptionError("option 'assign' must be JSON like {\"topicA\":[0,1]}, got "
                                  f"{opts['assign']!r}") from None
            out.assign = {str(t): sorted(set(ps)) for t, ps in body.items()}
        out.starting = _offsets(opts, "startingoffsets", "latest" if streaming else "earliest")
        if streaming and "endingoffsets" in opts:
            raise OptionError("option 'endingOffsets' is for batch queries; a streaming query "
                              "has no end (use trigger(availableNow=True) to stop at the end)")
        out.ending = _offsets(opts, "endingoffsets", "latest")
        if out.starting == "latest" and not streaming:
            raise OptionError("option 'startingOffsets' cannot be latest for a batch query")
        if out.ending == "earliest":
            raise OptionError("option 'endingOffsets' cannot be earliest")
        if isinstance(out.ending, dict) and any(v == EARLIEST for ps in out.ending.values()
                                                for v in ps.values()):
            raise OptionError("option 'endingOffsets' cannot use -2 (earliest) for a partition")
        out.starting_timestamp = _int(opts, "startingtimestamp", 0)
        out.ending_timestamp = _int(opts, "endingtimestamp", 0)
        if "startingoffsetsbytimestamp" in opts:
            out.starting_by_timestamp = _json_partitions(
                "startingoffsetsbytimestamp", opts["startingoffsetsbytimestamp"], "timestamps")
        if "endingoffsetsbytimestamp" in opts:
            if streaming:
                raise OptionError("option 'endingOffsetsByTimestamp' is for batch queries")
            out.ending_by_timestamp = _json_partitions(
                "endingoffsetsbytimestamp", opts["endingoffsetsbytimestamp"], "timestamps")
        if not streaming:
            _check_specified_order(out.starting, out.ending, "offset")
            _check_specified_order(out.starting_by_timestamp, out.ending_by_timestamp,
                                   "timestamp")
        if streaming and "endingtimestamp" in opts:
            raise OptionError("option 'endingTimestamp' is for batch queries")
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
        if strategy not in ("error", "latest"):
            raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or "
                              f"latest, got {strategy!r}")
        out.timestamp_strategy = strategy
        out.min_partitions = _int(opts, "minpartitions", 1)
        out.max_records_per_partition = _int(opts, "maxrecordsperpartition", 1)
        out.fail_on_data_loss = _bool(opts, "failondataloss", True)
        out.include_headers = _bool(opts, "includeheaders", False)
        out.filter_pushdown = _bool(opts, "filterpushdown", False)
        isolation = opts.get("kafka.isolation.level", "read_uncommitted").lower()
        if isolation not in ("read_uncommitted", "read_committed"):
            raise OptionError("option 'kafka.isolation.level' must be read_uncommitted or "
                              f"read_committed, got {opts['kafka.isolation.level']!r}")
        out.read_committed = isolation == "read_committed"
        out.table = _bool(opts, "table", False)
        if out.table and bootstrap is not None:
            raise OptionError("option 'table': the table and its catalog are read beside the "
                              "log dirs; give .option(\"path\", ...) (not kafka.bootstrap.servers)")
        if out.table and out.read_committed:
            raise OptionError("option 'table' with kafka.isolation.level=read_committed: the "
                              "table holds what its converter committed; read one or the other")
        out.max_offsets_per_trigger = _int(opts, "maxoffsetspertrigger", 1)
        out.min_offsets_per_trigger = _int(opts, "minoffsetspertrigger", 1)
        if "maxtriggerdelay" in opts:
            out.max_trigger_delay_ms = _duration_ms(opts["maxtriggerdelay"])
        return out


def _check_specified_order(start, end, kind: str) -> None:
    """Spark's Kafka source refuses, before resolving anything, a partition whose given
    start is past its given end (-1/-2 are resolved later)."""
    if not isinstance(start, dict) or not isinstance(end, dict):
        return
    for topic, parts in sorted(start.items()):
        for p, s in sorted(parts.items()):
            e = end.get(topic, {}).get(p)
            if e is not None and s >= 0 and e >= 0 and s > e:
                raise OptionError(f"The specified start {kind} {s} is greater than the end "
                                  f"{kind} {e} for topic {topic} partition {p}.")


def _offsets(opts: dict[str, str], key: str, default: str):
    text = opts.get(key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    return _json_partitions(key, text, "offsets")


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h)?\s*$")


def _duration_ms(text: str) -> int:
    match = _DURATION.match(text)
    if not match:
        raise OptionError(f"option 'maxTriggerDelay' must be a duration like 15m or 30s, got {text!r}")
    value, unit = int(match.group(1)), match.group(2) or "ms"
    return value * {"ms": 1, "s": 1000, "m": 60000, "min": 60000, "h": 3600000}[unit]


@dataclass
class SinkOptions:
    paths: str | None
    bootstrap: str | None = None
    topic: str | None = None
    compression: str = "none"
    security: ClientSecurity = PLAINTEXT

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = _check_known(options, SINK_OPTIONS, "sink")
        paths, bootstrap = _location(opts, "sink")
        compression = opts.get("kafka.compression.type", "none").lower()
        if compression not in CODECS:
            *others, last = CODECS
            raise OptionError(f"option 'kafka.compression.type' must be {', '.join(others)} or "
                              f"{last}, got {compression!r}")
        return cls(paths=paths, bootstrap=bootstrap, topic=opts.get("topic") or None,
                   compression=compression, security=_security(opts, bootstrap, "sink"))
