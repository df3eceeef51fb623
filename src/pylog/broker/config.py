"""The broker's own configs (network, groups), with Kafka's names and defaults.

Everything else a ``server.properties`` holds (``log.dirs``, ``log.segment.bytes``,
``num.partitions``, ``auto.create.topics.enable``, ``message.max.bytes``, ``node.id``,
...) is the store's (:mod:`pylog.storage.config`): :func:`split_config` hands each key
to its owner, so one properties file configures both.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pylog.common.config import (
    ConfigDef,
    ConfigMapping,
    at_least,
    between,
    config_defs,
    normalize_key,
    unknown_key,
)
from pylog.errors import ConfigError
from pylog.storage import BROKER_CONFIGS, TOPIC_CONFIGS

__all__ = ["SERVER_CONFIGS", "DYNAMIC_SERVER_CONFIGS", "ServerConfig", "parse_listener", "read_properties", "split_config"]

SERVER_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("listeners", "str", "PLAINTEXT://127.0.0.1:9092",
              "The address the broker listens on (one PLAINTEXT listener; port 0 picks a free "
              "port). Kafka binds every interface by default; pylog binds loopback unless told."),
    ConfigDef("advertised.listeners", "str", "",
              "The address Metadata tells clients to connect to (default: the listener's)."),
    ConfigDef("socket.request.max.bytes", "int32", 104857600,
              "The largest request a client may send; a larger size prefix closes the "
              "connection before anything is allocated.", at_least(1024)),
    ConfigDef("socket.listen.backlog.size", "int32", 512,
              "Connections the kernel completes and queues for the broker to accept (the "
              "listen(2) backlog, capped by net.core.somaxconn). Kafka's default is 50; "
              "pylog's is 512, for bursts of clients connecting at once.", at_least(1)),
    ConfigDef("pylog.request.max.elements", "int32", 20000,
              "The most array elements (and tagged fields) one request may hold, counted "
              "over all its arrays: a count past it closes the connection, with one log "
              "line, before it is allocated. Each costs 100-500 bytes decoded and answered, "
              "so this bounds a request's memory (Kafka refuses arrays of more than a "
              "million elements).", at_least(16)),
    ConfigDef("pylog.max.auto.create.topics.per.request", "int32", 100,
              "The most topics one Metadata request may auto-create "
              "(auto.create.topics.enable); the others it names get LEADER_NOT_AVAILABLE "
              "(retriable: the client asks again, as while Kafka creates a topic).",
              at_least(0)),
    ConfigDef("connections.max.idle.ms", "int", 600000,
              "A connection with no request for this many ms is closed (at that deadline), "
              "and so is one whose socket takes no bytes of a response for this long (a "
              "client that stopped reading).", at_least(1)),
    ConfigDef("max.connections", "int32", 2147483647,
              "Connections beyond this are closed on accept.", at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", "int32", 3000,
              "How long the first rebalance of an empty group waits for more members.",
              at_least(0)),
    ConfigDef("group.min.session.timeout.ms", "int32", 6000,
              "The smallest session.timeout.ms a member may ask for.", at_least(0)),
    ConfigDef("group.max.session.timeout.ms", "int32", 1800000,
              "The largest session.timeout.ms a member may ask for.", at_least(0)),
    ConfigDef("fetch.max.bytes", "int32", 57671680,
              "The most bytes one Fetch response carries (a request may ask for less).",
              at_least(1024)),
    ConfigDef("pylog.fetch.coalesce.ms", "int32", 1,
              "A parked fetch woken by an append waits this long for more appends before it "
              "answers (never past its max_wait_ms): fewer, fuller responses for consumers at "
              "the log's tail. 0 answers at once, as Kafka does.", between(0, 1000)),
    ConfigDef("offset.metadata.max.bytes", "int32", 4096,
              "The longest metadata string an offset commit may carry (in characters, as "
              "Kafka counts); a longer one gets OFFSET_METADATA_TOO_LARGE for its "
              "partition. At most 8191: __consumer_offsets stores it with Kafka's int16 "
              "length, and a character takes up to 4 bytes.", between(0, 8191)),
    ConfigDef("offsets.retention.minutes", "int32", 10080,
              "Committed offsets of empty groups are kept this long (not enforced yet).",
              at_least(1)),
    ConfigDef("request.timeout.ms", "int32", 30000,
              "Kafka's broker key (the timeout of its inter-broker clients), accepted; pylog "
              "has no such client. A parked JoinGroup or SyncGroup waits as Kafka's do: "
              "until its rebalance completes (at most the group's rebalance timeout).",
              between(1, 2**31 - 1)),
)

#: The broker keys that change at run time (KIP-226; Kafka's SocketServer reconfigurable
#: configs that pylog has): registered with the store, which persists them.
DYNAMIC_SERVER_CONFIGS = frozenset({"max.connections"})


class ServerConfig(ConfigMapping):
    """The validated broker keys (see :data:`SERVER_CONFIGS`)."""

    __slots__ = ()

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = {name: d.default for name, d in SERVER_CONFIGS.items()}
        for key, value in (values or {}).items():
            key = normalize_key(key)
            if key not in SERVER_CONFIGS:
                raise unknown_key(key, SERVER_CONFIGS, "broker")
            self._values[key] = SERVER_CONFIGS[key].parse(value, key)
        parse_listener(self._values["listeners"])
        if self._values["advertised.listeners"]:
            parse_listener(self._values["advertised.listeners"], "advertised.listeners")


def parse_listener(text: str, key: str = "listeners") -> tuple[str, int]:
    """``PLAINTEXT://host:port`` (or ``host:port``) -> (host, port)."""
    value = text.strip()
    if "," in value:
        raise ConfigError(f"{key} = {text!r}: pylog serves one listener")
    if "://" in value:
        scheme, _, value = value.partition("://")
        if scheme.upper() != "PLAINTEXT":
            raise ConfigError(f"{key} = {text!r}: only PLAINTEXT listeners are supported "
                              f"(no TLS or SASL yet)")
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{key} = {text!r}: expected host:port, e.g. PLAINTEXT://127.0.0.1:9092")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def split_config(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(broker keys, store keys) of one configuration. A key neither side knows is an
    error that suggests the closest key of either side."""
    store_keys = set(BROKER_CONFIGS) | {s for d in TOPIC_CONFIGS.values() for s in d.broker_synonyms}
    server, store = {}, {}
    for key, value in values.items():
        name = normalize_key(key)
        if name in SERVER_CONFIGS:
            server[key] = value
        elif name in store_keys:
            store[key] = value
        else:
            raise unknown_key(name, sorted(set(SERVER_CONFIGS) | store_keys), "broker")
    return server, store


def read_properties(path: str | Path) -> dict[str, str]:
    """A Java properties file as Kafka's ``server.properties`` uses it: ``key=value`` or
    ``key: value`` lines, ``#``/``!`` comments, backslash line continuations."""
    out: dict[str, str] = {}
    pending = ""
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw.strip()!r}")
        i = min(seps)
        out[line[:i].strip()] = line[i + 1:].strip()
    return out
