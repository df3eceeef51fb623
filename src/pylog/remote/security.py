"""How pylog's own connections to a broker authenticate: Kafka's client keys
(``security.protocol``, ``sasl.*``, ``ssl.*``) held as plain text, checked once, and turned
into a connected :class:`ProtocolClient` per address.

A :class:`ClientSecurity` pickles as its keys (Spark ships it from the driver to the
executors); each process builds the ``ssl.SSLContext`` and the SASL login from them once,
on its first connection. With no keys it is PLAINTEXT, as Kafka's clients default.
"""

from __future__ import annotations

from collections.abc import Mapping

from pylog.protocol.client import ProtocolClient

from .sasl import SaslLogin
from .tls import client_ssl_context, security_protocol

__all__ = ["ClientSecurity", "PLAINTEXT", "SECURITY_KEYS"]

#: The Kafka client keys a ClientSecurity takes (Kafka's names; PEM stores only).
SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.key.password", "ssl.endpoint.identification.algorithm",
})


class ClientSecurity:
    """Kafka client security keys for pylog's connections. Raises ConfigError at
    construction for a key that cannot work (unknown key, a missing file, a wrong
    mechanism), so the caller learns it before any connection is made."""

    def __init__(self, props: Mapping[str, str] | None = None, where: str = "client config") -> None:
        self.props = {str(k): str(v) for k, v in (props or {}).items()}
        self.where = where
        from pylog.errors import ConfigError
        unknown = sorted(set(self.props) - SECURITY_KEYS)
        if unknown:
            raise ConfigError(f"{where}: {', '.join(unknown)}: not a security key pylog's "
                              f"clients take (they take {', '.join(sorted(SECURITY_KEYS))})")
        self.protocol = security_protocol(self.props, where)
        self._built = False
        self._build()                         # checks every key now

    def _build(self) -> None:
        self._ssl = client_ssl_context(self.props, self.where)
        self._login = SaslLogin.from_properties(self.props, self.where)
        self._built = True

    def __getstate__(self) -> dict:
        return {"props": self.props, "where": self.where, "protocol": self.protocol}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._built = False                   # an SSLContext does not pickle: rebuilt here

    def __repr__(self) -> str:
        return f"ClientSecurity({self.protocol})"

    def connect(self, address: str, client_id: str = "pylog", timeout: float = 30.0) -> ProtocolClient:
        """A client connected to ``address`` ("host:port"), through TLS and SASL as the
        keys say."""
        if not self._built:
            self._build()
        return ProtocolClient(address, client_id=client_id, timeout=timeout,
                              authenticate=self._login, ssl_context=self._ssl)


#: No TLS, no SASL (Kafka's default security.protocol).
PLAINTEXT = ClientSecurity()
