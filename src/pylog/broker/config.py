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
    one_of,
    subset_of,
    unknown_key,
)
from pylog.errors import ConfigError
from pylog.storage import BROKER_CONFIGS, TOPIC_CONFIGS

from .listeners import Listener, resolve_listeners

__all__ = ["SERVER_CONFIGS", "DYNAMIC_SERVER_CONFIGS", "LISTENER_PREFIX", "Listener",
           "ServerConfig", "read_properties", "split_config", "SASL_MECHANISMS"]

#: The SASL mechanisms pylog's broker speaks (Kafka's GSSAPI and OAUTHBEARER it does not).
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

SERVER_CONFIGS: dict[str, ConfigDef] = config_defs(
    ConfigDef("listeners", "str", "PLAINTEXT://127.0.0.1:9092",
              "Comma-separated NAME://host:port listeners, e.g. PLAINTEXT://127.0.0.1:9092,"
              "SSL://:9093; each name's security protocol comes from "
              "listener.security.protocol.map. An empty host binds every interface; port 0 "
              "picks a free port; a bare host:port is a PLAINTEXT listener. Kafka binds every "
              "interface by default; pylog binds loopback unless told."),
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
              "NAME://host:port per listener: the address Metadata and FindCoordinator give "
              "the clients connected to that listener (default: the listener's own address; "
              "port 0: the port it got)."),
    ConfigDef("listener.security.protocol.map", "str",
              "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
              "NAME:PROTOCOL pairs: the security protocol of each listener name (PLAINTEXT, "
              "SSL, SASL_PLAINTEXT or SASL_SSL)."),
    ConfigDef("inter.broker.listener.name", "str", "",
              "The listener brokers use among themselves; must name a listener (accepted for "
              "compatibility: a single node has no other broker)."),
    ConfigDef("security.inter.broker.protocol", "str", "PLAINTEXT",
              "The inter-broker listener by protocol; set this or inter.broker.listener.name, "
              "not both (accepted for compatibility)."),
    # ---- TLS (SSL and SASL_SSL listeners; listener.name.<name>.ssl.* overrides per
    # listener). Kafka's keys; pylog reads PEM stores only (see broker/tls.py).
    ConfigDef("ssl.keystore.type", "str", "JKS",
              "The key store's format. pylog reads PEM only (ssl.keystore.type=PEM); JKS, "
              "Kafka's default, and PKCS12 are refused with the PEM keys to use instead."),
    ConfigDef("ssl.keystore.location", "str", "",
              "A PEM file holding the broker's private key and its certificate chain."),
    ConfigDef("ssl.keystore.password", "password", "",
              "The store's password: not used by PEM stores (set ssl.key.password for an "
              "encrypted key), refused with them as Kafka refuses it."),
    ConfigDef("ssl.key.password", "password", "",
              "The password of an encrypted private key (PEM)."),
    ConfigDef("ssl.keystore.key", "password", "",
              "The private key as PEM text (instead of ssl.keystore.location)."),
    ConfigDef("ssl.keystore.certificate.chain", "password", "",
              "The certificate chain as PEM text, with ssl.keystore.key."),
    ConfigDef("ssl.truststore.type", "str", "JKS",
              "The trust store's format: PEM (JKS and PKCS12 are refused)."),
    ConfigDef("ssl.truststore.location", "str", "",
              "A PEM file of the CA certificates that client certificates must chain to."),
    ConfigDef("ssl.truststore.password", "password", "",
              "Not used by PEM trust stores (refused with them, as Kafka refuses it)."),
    ConfigDef("ssl.truststore.certificates", "password", "",
              "The trusted CA certificates as PEM text (instead of ssl.truststore.location)."),
    ConfigDef("ssl.client.auth", "str", "none",
              "Client certificates: required (a client without a trusted one fails the "
              "handshake), requested (checked when sent) or none.",
              one_of("required", "requested", "none")),
    ConfigDef("ssl.enabled.protocols", "list", ("TLSv1.2", "TLSv1.3"),
              "The TLS versions a client may negotiate (TLSv1.2, TLSv1.3; TLSv1 and TLSv1.1 "
              "where OpenSSL still allows them)."),
    ConfigDef("ssl.protocol", "str", "TLSv1.3",
              "Kafka's SSLContext protocol; the versions offered are ssl.enabled.protocols."),
    ConfigDef("ssl.cipher.suites", "list", (),
              "The cipher suites allowed, by IANA name (TLS_AES_256_GCM_SHA384, "
              "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, ...) or OpenSSL name; empty: "
              "OpenSSL's defaults."),
    ConfigDef("ssl.principal.mapping.rules", "str", "DEFAULT",
              "Rules mapping a client certificate's distinguished name (RFC 2253) to a "
              "principal name: RULE:pattern/replacement/[LU] or DEFAULT, as Kafka's."),
    ConfigDef("ssl.endpoint.identification.algorithm", "str", "https",
              "Host name checking of the peer: a client setting (accepted for compatibility)."),
    ConfigDef("ssl.keymanager.algorithm", "str", "SunX509",
              "A JSSE setting (accepted for compatibility; OpenSSL has no key managers)."),
    ConfigDef("ssl.trustmanager.algorithm", "str", "PKIX",
              "A JSSE setting (accepted for compatibility; OpenSSL verifies X.509 chains)."),
    ConfigDef("ssl.secure.random.implementation", "str", "",
              "A JSSE setting (accepted for compatibility; OpenSSL seeds itself)."),
    ConfigDef("pylog.ssl.ktls.enable", "bool", True,
              "Hand the TLS record layer to the kernel (kTLS) when the kernel and the "
              "negotiated cipher allow it, so Fetch sends records with sendfile(2) (zero "
              "copy); false, or without kTLS, records are encrypted in user space "
              "(pylog.tls_engine() says which and why)."),
    ConfigDef("pylog.ssl.handshake.timeout.ms", "int32", 10000,
              "A TLS handshake not finished in this many ms closes the connection "
              "(connections that never finish cannot hold memory; Kafka's clients give "
              "up on a connection after socket.connection.setup.timeout.ms, 10 s).",
              at_least(1)),
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
    ConfigDef("group.consumer.assignors", "list", ("uniform", "range"),
              "The server-side assignors of consumer-protocol groups (KIP-848), in order of "
              "preference: a member may name one (group.remote.assignor); a group uses the "
              "one most of its members name, else the first.", subset_of("uniform", "range")),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int32", 5000,
              "How often a member of a consumer-protocol group heartbeats (the broker "
              "tells it in every ConsumerGroupHeartbeat response).", at_least(1)),
    ConfigDef("group.consumer.session.timeout.ms", "int32", 45000,
              "A consumer-protocol member that sends no heartbeat for this long is fenced "
              "and its partitions are reassigned.", at_least(1)),
    ConfigDef("group.consumer.max.size", "int32", 2147483647,
              "The most members of one consumer-protocol group (GROUP_MAX_SIZE_REACHED "
              "beyond).", at_least(1)),
    ConfigDef("group.share.session.timeout.ms", "int32", 45000,
              "A share group member (KIP-932) that sends no heartbeat for this long is "
              "removed and the records it holds become available again (a group's own "
              "share.session.timeout.ms overrides it).", at_least(1)),
    ConfigDef("group.share.heartbeat.interval.ms", "int32", 5000,
              "How often a share group member heartbeats (told in every "
              "ShareGroupHeartbeat response; a group's share.heartbeat.interval.ms "
              "overrides it).", at_least(1)),
    ConfigDef("group.share.record.lock.duration.ms", "int32", 30000,
              "How long a share group member holds the records a ShareFetch acquired for "
              "it before they become available again (a group's "
              "share.record.lock.duration.ms overrides it).", between(1000, 3600000)),
    ConfigDef("group.share.delivery.count.limit", "int32", 5,
              "How many times a share group delivers a record: released or timed out that "
              "often, it is archived instead of delivered again.", between(2, 10)),
    ConfigDef("group.share.max.share.sessions", "int32", 2000,
              "The most share sessions (ShareFetch, KIP-932) the broker keeps: a new one "
              "beyond gets SHARE_SESSION_LIMIT_REACHED. A member's session ends when it "
              "closes it or leaves its group.", at_least(1)),
    ConfigDef("group.share.partition.max.record.locks", "int32", 2000,
              "The most records of one share-partition in flight (its window from the "
              "share-partition start offset): a ShareFetch acquires no further.",
              between(100, 10000)),
    ConfigDef("fetch.max.bytes", "int32", 57671680,
              "The most bytes one Fetch response carries (a request may ask for less).",
              at_least(1024)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int32", 1000,
              "The most incremental fetch sessions (KIP-227) the broker keeps; when full, a "
              "new session evicts one idle for 2 minutes, or a smaller one older than that, "
              "else the fetch goes on without a session.", at_least(0)),
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
              "Committed offsets of a group are kept this long after it became empty (or, "
              "for a group that never joined, after each commit), as Kafka's KIP-211.",
              at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", "int", 600000,
              "How often expired committed offsets are removed.", at_least(1)),
    ConfigDef("request.timeout.ms", "int32", 30000,
              "Kafka's broker key (the timeout of its inter-broker clients), accepted; pylog "
              "has no such client. A parked JoinGroup or SyncGroup waits as Kafka's do: "
              "until its rebalance completes (at most the group's rebalance timeout).",
              between(1, 2**31 - 1)),
)

#: The broker keys that change at run time (KIP-226; Kafka's SocketServer reconfigurable
#: configs that pylog has): registered with the store, which persists them.
DYNAMIC_SERVER_CONFIGS = frozenset({"max.connections"})


#: Keys that one listener may set for itself, as Kafka's listener.name.<listener>.<key>
#: (every ssl.* key, and these), and those a SASL mechanism may set for itself,
#: listener.name.<listener>.<mechanism>.<key>.
LISTENER_KEYS = frozenset({"sasl.enabled.mechanisms", "sasl.server.max.receive.size",
                           "connections.max.reauth.ms"})
MECHANISM_KEYS = frozenset({"sasl.jaas.config", "connections.max.reauth.ms"})
#: Kafka's per-listener config prefix: ``listener.name.<listener name>.<key>``.
LISTENER_PREFIX = "listener.name."


class ServerConfig(ConfigMapping):
    """The validated broker keys (see :data:`SERVER_CONFIGS`), the listeners they name
    (:attr:`listeners`, :mod:`pylog.broker.listeners`) and Kafka's per-listener and
    per-mechanism keys, ``listener.name.<name>.[<mechanism>.]<key>`` (kept under their
    full names; :meth:`for_listener` resolves them)."""

    __slots__ = ("listeners",)

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = {name: d.default for name, d in SERVER_CONFIGS.items()}
        prefixed = {}
        explicit: set[str] = set()
        for key, value in (values or {}).items():
            key = normalize_key(key)
            if key.startswith(LISTENER_PREFIX):
                prefixed[key] = value
                continue
            if key not in SERVER_CONFIGS:
                raise unknown_key(key, SERVER_CONFIGS, "broker")
            self._values[key] = SERVER_CONFIGS[key].parse(value, key)
            explicit.add(key)
        self.listeners = resolve_listeners(self._values, explicit)
        for key, value in prefixed.items():
            self._values[key] = _listener_key_def(key, self.listeners).parse(value, key)

    @property
    def listener(self) -> Listener:
        """The first listener (the one ``pylog serve --listen host:port`` names)."""
        return self.listeners[0]

    def for_listener(self, key: str, listener: Listener, mechanism: str | None = None) -> Any:
        """`key` for one listener (and SASL mechanism), as Kafka resolves it:
        ``listener.name.<listener>.<mechanism>.<key>``, then
        ``listener.name.<listener>.<key>``, then ``<key>`` (names in lower case)."""
        name = self.listener_key(key, listener, mechanism)
        return self._values[name]

    def listener_key(self, key: str, listener: Listener, mechanism: str | None = None) -> str:
        """The key `key`'s value comes from for `listener` (and `mechanism`): the most
        specific one set, to name in errors as the user wrote it."""
        prefix = listener.config_prefix
        if mechanism and prefix + mechanism.lower() + "." + key in self._values:
            return prefix + mechanism.lower() + "." + key
        if prefix + key in self._values:
            return prefix + key
        return key


def _listener_key_def(key: str, listeners: list[Listener]) -> ConfigDef:
    """The definition a ``listener.name.<listener>.[<mechanism>.]<key>`` key takes its
    type and rule from; ConfigError for a listener not in ``listeners`` or a key no
    listener sets."""
    name, _, rest = key[len(LISTENER_PREFIX):].partition(".")
    names = [listener.name.lower() for listener in listeners]
    if name not in names:
        raise ConfigError(f"{key}: no listener is named {name!r} (listeners has "
                          f"{', '.join(n.upper() for n in names)}; listener names are lower "
                          f"case in these keys)")
    if rest in LISTENER_KEYS or (rest.startswith("ssl.") and rest in SERVER_CONFIGS):
        return SERVER_CONFIGS[rest]
    mechanism = next((m for m in SASL_MECHANISMS if rest.startswith(m.lower() + ".")), None)
    if mechanism is not None and rest[len(mechanism) + 1:] in MECHANISM_KEYS:
        return SERVER_CONFIGS[rest[len(mechanism) + 1:]]
    raise ConfigError(f"{key}: not a key a listener sets for itself (listener.name.<listener>. "
                      f"then an ssl.* key or one of {', '.join(sorted(LISTENER_KEYS))}, or "
                      f"<mechanism>. then one of {', '.join(sorted(MECHANISM_KEYS))}, mechanism "
                      f"in lower case: {', '.join(m.lower() for m in SASL_MECHANISMS)})")


def split_config(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(broker keys, store keys) of one configuration. A key neither side knows is an
    error that suggests the closest key of either side."""
    store_keys = set(BROKER_CONFIGS) | {s for d in TOPIC_CONFIGS.values() for s in d.broker_synonyms}
    server, store = {}, {}
    for key, value in values.items():
        name = normalize_key(key)
        if name in SERVER_CONFIGS or name.startswith(LISTENER_PREFIX):
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
