"""Listeners as Kafka names them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map``, ``inter.broker.listener.name``.

A listener is a name, a security protocol and an address: ``listeners =
PLAINTEXT://127.0.0.1:9092,SSL://:9093`` opens two sockets; the name before ``://``
is looked up in ``listener.security.protocol.map`` (by default each protocol's own
name maps to itself), so ``INTERNAL://...`` with ``INTERNAL:SSL`` is an SSL listener.
Names are case-insensitive and kept upper-case (Kafka's ListenerName.normalised).
Each listener advertises its own address (``advertised.listeners`` by name, else the
address it is bound to): a client connected to one listener is told that listener's
address in Metadata and FindCoordinator, as Kafka does.

pylog's additions, each Kafka-compatible: a bare ``host:port`` is a PLAINTEXT listener
named PLAINTEXT (``pylog serve --listen``); port 0 picks a free port, and port 0 in
``advertised.listeners`` means the port the listener got; a listener that
``advertised.listeners`` leaves out advertises its own address (Kafka would leave
the broker out of that listener's Metadata). ``inter.broker.listener.name`` and
``security.inter.broker.protocol`` are checked as Kafka checks them and otherwise unused
(a single node has no other broker to talk to).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pylog.errors import ConfigError

__all__ = ["Listener", "SECURITY_PROTOCOLS", "parse_listeners", "parse_protocol_map",
           "resolve_listeners"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: The protocols whose connections are TLS.
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
#: The protocols whose connections authenticate with SASL before anything else.
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: ``name`` (upper-case), ``security_protocol`` (one of
    SECURITY_PROTOCOLS), the address it binds (``host`` "" or "0.0.0.0": every
    interface; ``port`` 0: a free port) and the address it advertises (``None``: its
    bound address)."""

    name: str
    security_protocol: str
    host: str
    port: int
    advertised_host: str | None = None
    advertised_port: int | None = None

    @property
    def tls(self) -> bool:
        return self.security_protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.security_protocol in SASL_PROTOCOLS

    @property
    def config_prefix(self) -> str:
        """Kafka's per-listener config prefix: ``listener.name.<name lower-case>.``"""
        return f"listener.name.{self.name.lower()}."

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def _split_address(text: str, key: str, whole: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{key} = {whole!r}: {text!r} is not host:port, e.g. "
                          f"PLAINTEXT://127.0.0.1:9092")
    if host.startswith("[") != host.endswith("]"):
        raise ConfigError(f"{key} = {whole!r}: unbalanced brackets in {text!r}")
    return host.strip("[]"), int(port)


def parse_listeners(text: str, key: str = "listeners") -> list[tuple[str, str, int]]:
    """``NAME://host:port,...`` -> [(NAME, host, port)]. A bare ``host:port`` is named
    PLAINTEXT. Names must differ (Kafka: "Each listener must have a different name")."""
    out: list[tuple[str, str, int]] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            name, _, address = item.partition("://")
            name = name.strip().upper()
            if not name or not all(c.isalnum() or c in "_-" for c in name):
                raise ConfigError(f"{key} = {text!r}: {name!r} is not a listener name "
                                  f"(letters, digits, _ and -)")
        else:
            name, address = "PLAINTEXT", item
        host, port = _split_address(address, key, text)
        if any(name == other for other, _, _ in out):
            raise ConfigError(f"{key} = {text!r}: each listener must have a different name "
                              f"({name} appears twice)")
        out.append((name, host, port))
    if not out:
        raise ConfigError(f"{key} = {text!r}: no listener (expected NAME://host:port)")
    return out


def parse_protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...`` -> {NAME: PROTOCOL}."""
    out: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map = {text!r}: {item!r} is not "
                              f"LISTENER_NAME:SECURITY_PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map = {text!r}: {protocol!r} is not a "
                              f"security protocol (one of {', '.join(SECURITY_PROTOCOLS)})")
        if name in out:
            raise ConfigError(f"listener.security.protocol.map = {text!r}: {name} is mapped twice")
        out[name] = protocol
    return out


def resolve_listeners(values: Mapping[str, Any], explicit: set[str]) -> list[Listener]:
    """The broker's listeners from its validated keys (``values``); ``explicit`` holds
    the keys that were given (Kafka checks some pairs only when both are set).
    Raises ConfigError naming the key and the rule, in Kafka's words where it has them."""
    protocols = parse_protocol_map(values["listener.security.protocol.map"])
    bound = parse_listeners(values["listeners"])
    ports: dict[tuple[int, bool], str] = {}
    for name, host, port in bound:
        if name not in protocols:
            raise ConfigError(f"listeners = {values['listeners']!r}: no security protocol defined "
                              f"for listener {name} (add {name}:<PROTOCOL> to "
                              f"listener.security.protocol.map)")
        # Kafka: different ports, except one IPv4 and one IPv6 listener may share one.
        family = ":" in host
        if port and (port, family) in ports:
            raise ConfigError(f"listeners = {values['listeners']!r}: each listener must have a "
                              f"different port ({ports[port, family]} and {name} both use {port})")
        ports[port, family] = name
    advertised: dict[str, tuple[str, int]] = {}
    if values["advertised.listeners"]:
        names = {name for name, _, _ in bound}
        for name, host, port in parse_listeners(values["advertised.listeners"],
                                                "advertised.listeners"):
            if name not in names:
                raise ConfigError(f"advertised.listeners = {values['advertised.listeners']!r}: "
                                  f"{name} is not in listeners: advertised.listeners listener "
                                  f"names must be equal to or a subset of the ones defined in "
                                  f"listeners")
            if host in ("0.0.0.0", "::"):
                raise ConfigError(f"advertised.listeners = {values['advertised.listeners']!r}: "
                                  f"advertised.listeners cannot use the nonroutable "
                                  f"meta-address {host}. Use a routable IP address.")
            advertised[name] = (host, port)
    listeners = [Listener(name, protocols[name], host, port, *advertised.get(name, (None, None)))
                 for name, host, port in bound]
    _check_inter_broker(values, explicit, listeners)
    return listeners


def _check_inter_broker(values: Mapping[str, Any], explicit: set[str],
                        listeners: list[Listener]) -> None:
    name = values["inter.broker.listener.name"].strip().upper()
    protocol = values["security.inter.broker.protocol"].strip().upper()
    if name and "security.inter.broker.protocol" in explicit:
        raise ConfigError("Only one of inter.broker.listener.name and "
                          "security.inter.broker.protocol should be set.")
    if name and all(listener.name != name for listener in listeners):
        raise ConfigError(f"inter.broker.listener.name = {name!r}: it must be a listener name "
                          f"defined in advertised.listeners (listeners here: "
                          f"{', '.join(listener.name for listener in listeners)})")
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"security.inter.broker.protocol = {protocol!r}: must be one of "
                          f"{', '.join(SECURITY_PROTOCOLS)}")
    if "security.inter.broker.protocol" in explicit and all(
            listener.name != protocol for listener in listeners):
        raise ConfigError(f"security.inter.broker.protocol = {protocol!r}: no listener named "
                          f"{protocol} (the inter-broker listener is the one with the "
                          f"protocol's name)")
