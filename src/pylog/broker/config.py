"""The broker's own configs (network, groups), with Kafka's names and defaults.

Everything else a ``server.properties`` holds (``log.dirs``, ``log.segment.bytes``,
``num.partitions``, ``auto.create.topics.enable``, ``message.max.bytes``, ``node.id``,
...) is the store's (:mod:`pylog.storage.config`): :func:`split_config` hands each key
to its owner, so one properties file configures both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pylog.common.config import (
    ConfigDef,
    ConfigMapping,
    at_least,
    between,
    config_defs,
    normalize_key,
    subset_of,
    unknown_key,
)
from pylog.errors import ConfigError
from pylog.storage import BROKER_CONFIGS, TOPIC_CONFIGS

__all__ = ["SERVER_CONFIGS", "DYNAMIC_SERVER_CONFIGS", "Listener", "ServerConfig", "parse_listener",
           "read_properties", "split_config", "SASL_MECHANISMS"]

#: The SASL mechanisms pylog's broker speaks (Kafka's GSSAPI and OAUTHBEARER it does not).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
#: Security protocols whose listener pylog can open today (SSL and SASL_SSL need TLS).
_OPEN_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")

SERVER_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("listeners", "str", "PLAINTEXT://127.0.0.1:9092",
              "The address the broker listens on: NAME://host:port, one listener, whose "
              "security protocol listener.security.protocol.map gives (PLAINTEXT or "
              "SASL_PLAINTEXT; port 0 picks a free port). Kafka binds every interface by "
              "default; pylog binds loopback unless told."),
    ConfigDef("listener.security.protocol.map", "str",
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "Listener name -> security protocol, as Kafka's (NAME:PROTOCOL,...): the "
              "listener's name is the scheme of its listeners entry."),
    ConfigDef("sasl.enabled.mechanisms", "list", ("SCRAM-SHA-256", "SCRAM-SHA-512"),
              "The SASL mechanisms a SASL listener offers (listener.name.<listener>."
              "sasl.enabled.mechanisms for one listener): PLAIN, SCRAM-SHA-256, "
              "SCRAM-SHA-512. Kafka's default is GSSAPI, which pylog does not have; PLAIN "
              "needs users in listener.name.<listener>.plain.sasl.jaas.config or "
              "pylog.sasl.jaas.file.", subset_of(*SASL_MECHANISMS)),
    ConfigDef("sasl.jaas.config", "password", None,
              "JAAS login module config. On a broker Kafka reads it only prefixed with the "
              "listener and the mechanism: listener.name.<listener>.plain.sasl.jaas.config = "
              "org.apache.kafka.common.security.plain.PlainLoginModule required "
              "user_alice=\"alice-secret\";"),
    ConfigDef("pylog.sasl.jaas.file", "str", "",
              "A JAAS file as Kafka's brokers read it (java.security.auth.login.config): "
              "PLAIN users are the user_<name>=\"<password>\" options of PlainLoginModule in "
              "its <listener>.KafkaServer or KafkaServer section, where no "
              "listener.name.<listener>.plain.sasl.jaas.config is set."),
    ConfigDef("connections.max.reauth.ms", "int", 0,
              "KIP-368: the SASL session lifetime told to clients (SaslAuthenticate v1+), "
              "after which a request other than a re-authentication closes the connection; "
              "0 disables it. Per listener and mechanism: listener.name.<listener>."
              "<mechanism>.connections.max.reauth.ms.", at_least(0)),
    ConfigDef("sasl.server.max.receive.size", "int32", 524288,
              "The largest request a connection may send before it has authenticated (the "
              "size prefix is refused, the connection closed, before the frame is read).",
              at_least(64)),
    ConfigDef("connection.failed.authentication.delay.ms", "int32", 100,
              "A failed authentication is answered, and its connection closed, after this "
              "many ms (slows password guessing).", at_least(0)),
    ConfigDef("pylog.connections.authentication.timeout.ms", "int", 30000,
              "A connection to a SASL listener that has not authenticated this many ms after "
              "it connected (or after it began re-authenticating) is closed. Kafka has no "
              "such bound (connections.max.idle.ms only closes idle ones).", at_least(1)),
    ConfigDef("authorizer.class.name", "str", "",
              "The authorizer: org.apache.kafka.metadata.authorizer.StandardAuthorizer turns "
              "ACLs on (Kafka's semantics: deny wins, super.users, allow.everyone.if.no.acl."
              "found); empty (Kafka's default) allows every request, as Kafka without an "
              "authorizer.", lambda v: None if v in ("", _STANDARD_AUTHORIZER) else
              f"pylog's authorizer is Kafka's StandardAuthorizer: set {_STANDARD_AUTHORIZER}, or "
              f"leave it empty for none (Kafka 4 has no other built-in one)"),
    ConfigDef("super.users", "str", "",
              "Principals every ACL check allows, semicolon-separated as Kafka's: "
              "User:admin;User:alice."),
    ConfigDef("allow.everyone.if.no.acl.found", "bool", False,
              "With the authorizer on: a resource no ACL names (no binding of any principal "
              "matches it) is open to everyone when true, closed to all but super.users when "
              "false (Kafka's default)."),
    ConfigDef("quota.window.num", "int32", 11,
              "Client quotas: the number of samples a client's rate is measured over "
              "(Kafka's default 11).", at_least(1)),
    ConfigDef("quota.window.size.seconds", "int32", 1,
              "Client quotas: the time span of each sample (Kafka's default 1 s).", at_least(1)),
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


#: Keys that one listener may set for itself, as Kafka's listener.name.<listener>.<key>,
#: and those a SASL mechanism may set for itself, listener.name.<listener>.<mechanism>.<key>.
LISTENER_KEYS = frozenset({"sasl.enabled.mechanisms", "sasl.server.max.receive.size",
                           "connections.max.reauth.ms"})
MECHANISM_KEYS = frozenset({"sasl.jaas.config", "connections.max.reauth.ms"})


@dataclass(frozen=True, slots=True)
class Listener:
    """A listener's name (the scheme of its ``listeners`` entry) and security protocol."""

    name: str
    security_protocol: str

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")


class ServerConfig(ConfigMapping):
    """The validated broker keys (see :data:`SERVER_CONFIGS`), and the listener-prefixed
    ones (:meth:`for_listener`)."""

    __slots__ = ()

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = {name: d.default for name, d in SERVER_CONFIGS.items()}
        prefixed = {}
        for key, value in (values or {}).items():
            key = normalize_key(key)
            if key.startswith("listener.name."):
                prefixed[key] = value
                continue
            if key not in SERVER_CONFIGS:
                raise unknown_key(key, SERVER_CONFIGS, "broker")
            self._values[key] = SERVER_CONFIGS[key].parse(value, key)
        parse_listener(self._values["listeners"])
        if self._values["advertised.listeners"]:
            parse_listener(self._values["advertised.listeners"], "advertised.listeners")
        listener = self.listener
        for key, value in prefixed.items():
            self._values[key] = _listener_key_def(key, listener).parse(value, key)

    @property
    def listener(self) -> Listener:
        """The listener of ``listeners``, its security protocol from the map."""
        text = self._values["listeners"].strip()
        name = text.partition("://")[0].strip().upper() if "://" in text else "PLAINTEXT"
        protocols = {}
        for item in self._values["listener.security.protocol.map"].split(","):
            listener, sep, protocol = item.strip().partition(":")
            if not sep or not listener.strip() or not protocol.strip():
                raise ConfigError(f"listener.security.protocol.map: {item.strip()!r} is not "
                                  f"NAME:PROTOCOL")
            protocols[listener.strip().upper()] = protocol.strip().upper()
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(f"listeners = {text!r}: listener {name} has no security protocol in "
                              f"listener.security.protocol.map ({self._values['listener.security.protocol.map']})")
        if protocol not in _OPEN_PROTOCOLS:
            known = protocol in ("SSL", "SASL_SSL")
            raise ConfigError(f"listeners = {text!r}: listener {name} is {protocol}; "
                              + ("pylog has no TLS yet: use PLAINTEXT or SASL_PLAINTEXT" if known else
                                 "expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"))
        return Listener(name, protocol)

    def for_listener(self, key: str, listener: Listener, mechanism: str | None = None) -> Any:
        """`key` for one listener (and SASL mechanism), as Kafka resolves it:
        ``listener.name.<listener>.<mechanism>.<key>``, then
        ``listener.name.<listener>.<key>``, then ``<key>`` (names in lower case)."""
        prefix = f"listener.name.{listener.name.lower()}."
        for name in ((prefix + mechanism.lower() + "." + key) if mechanism else None, prefix + key):
            if name is not None and name in self._values:
                return self._values[name]
        return self._values[key]


def _listener_key_def(key: str, listener: Listener) -> ConfigDef:
    """The definition a ``listener.name.<listener>.[<mechanism>.]<key>`` key takes its
    type and rule from; ConfigError for another listener or a key no listener sets."""
    rest = key[len("listener.name."):]
    name, _, rest = rest.partition(".")
    if name != listener.name.lower():
        raise ConfigError(f"{key}: no listener is named {name!r} (listeners has "
                          f"{listener.name}; listener names are lower case in these keys)")
    if rest in LISTENER_KEYS:
        return SERVER_CONFIGS[rest]
    mechanism = next((m for m in SASL_MECHANISMS if rest.startswith(m.lower() + ".")), None)
    if mechanism is not None and rest[len(mechanism) + 1:] in MECHANISM_KEYS:
        return SERVER_CONFIGS[rest[len(mechanism) + 1:]]
    raise ConfigError(f"{key}: not a key a listener sets for itself (listener.name.<listener>. "
                      f"then one of {', '.join(sorted(LISTENER_KEYS))}, or <mechanism>. then one "
                      f"of {', '.join(sorted(MECHANISM_KEYS))}, mechanism in lower case: "
                      f"{', '.join(m.lower() for m in SASL_MECHANISMS)})")


def parse_listener(text: str, key: str = "listeners") -> tuple[str, int]:
    """``NAME://host:port`` (or ``host:port``) -> (host, port)."""
    value = text.strip()
    if "," in value:
        raise ConfigError(f"{key} = {text!r}: pylog serves one listener")
    if "://" in value:
        _, _, value = value.partition("://")
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
        if name in SERVER_CONFIGS or name.startswith("listener.name."):
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
