"""The client side of TLS for pylog's own tools: an ``ssl.SSLContext`` from Kafka's client
keys, as a ``--command-config`` file holds them.

``security.protocol`` SSL or SASL_SSL speaks TLS (with SASL_SSL, SASL runs inside it:
:mod:`pylog.remote.sasl`). The broker is checked against ``ssl.truststore.location``
(PEM CA certificates) or ``ssl.truststore.certificates`` (the same as text), else the
system's CAs; its name against the certificate unless
``ssl.endpoint.identification.algorithm`` is empty (Kafka's default is ``https``: check).
A client certificate, for a broker with ``ssl.client.auth``, comes from
``ssl.keystore.location`` (a PEM key and chain, the key encrypted with
``ssl.key.password`` or not) or ``ssl.keystore.key`` with
``ssl.keystore.certificate.chain``. Stores are PEM only, as the broker's; a JKS or
PKCS12 store is refused naming the keys to use.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping

from pylog.errors import ConfigError

__all__ = ["TLS_PROTOCOLS", "client_ssl_context", "security_protocol"]

#: Kafka's security protocols that speak TLS.
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_protocol(props: Mapping[str, str], where: str) -> str:
    """``security.protocol`` (PLAINTEXT when unset), checked."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in _PROTOCOLS:
        raise ConfigError(f"{where}: security.protocol = {protocol}: expected one of "
                          f"{', '.join(_PROTOCOLS)}")
    return protocol


def client_ssl_context(props: Mapping[str, str], where: str = "client config") -> ssl.SSLContext | None:
    """The context for ``security.protocol`` SSL or SASL_SSL; None for the others.
    ConfigError names a key that cannot work."""
    if security_protocol(props, where) not in TLS_PROTOCOLS:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        kind = props.get(key, "PEM").strip().upper()
        if kind != "PEM":
            raise ConfigError(f"{where}: {key} = {kind}: pylog's tools read PEM stores only "
                              f"(ssl.truststore.location: a PEM file of CA certificates; "
                              f"ssl.keystore.location: a PEM key and certificate chain)")
    trust, trusted = props.get("ssl.truststore.location"), props.get("ssl.truststore.certificates")
    try:
        if trust:
            ctx.load_verify_locations(cafile=_readable(trust, "ssl.truststore.location", where))
        elif trusted:
            ctx.load_verify_locations(cadata=trusted)
    except (ssl.SSLError, ValueError) as exc:
        key = "ssl.truststore.location" if trust else "ssl.truststore.certificates"
        raise ConfigError(f"{where}: {key}: no PEM certificates: "
                          f"{getattr(exc, 'reason', None) or exc}") from None
    if not props.get("ssl.endpoint.identification.algorithm", "https").strip():
        ctx.check_hostname = False           # Kafka's client: an empty algorithm checks no name
    password = props.get("ssl.key.password") or None
    location = props.get("ssl.keystore.location")
    key, chain = props.get("ssl.keystore.key"), props.get("ssl.keystore.certificate.chain")
    try:
        if location:
            path = _readable(location, "ssl.keystore.location", where)
            ctx.load_cert_chain(path, path, password=password or (lambda: b""))
        elif key or chain:
            if not (key and chain):
                raise ConfigError(f"{where}: ssl.keystore.key and ssl.keystore.certificate.chain "
                                  f"go together")
            with tempfile.TemporaryDirectory(prefix="pylog-pem-") as tmp:
                key_path, chain_path = os.path.join(tmp, "key.pem"), os.path.join(tmp, "chain.pem")
                for path, text in ((key_path, key), (chain_path, chain)):
                    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                        f.write(text)
                ctx.load_cert_chain(chain_path, key_path, password=password or (lambda: b""))
    except ssl.SSLError as exc:
        raise ConfigError(f"{where}: {'ssl.keystore.location' if location else 'ssl.keystore.key'}: "
                          f"no usable PEM private key and certificate chain ({exc.reason or exc}; "
                          f"an encrypted key needs ssl.key.password)") from None
    return ctx


def _readable(path: str, key: str, where: str) -> str:
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: {key} = {path!r}: no such file")
    return path
