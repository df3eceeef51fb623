"""Certificates for the TLS tests, made fresh by ``openssl`` (Debian's) in a temporary dir:
no key is ever committed; and each real client's settings to use them.

``make_certs(dir)`` writes a CA, a broker certificate it signs (for localhost and
127.0.0.1), client certificates it signs (an mTLS principal's), an expired broker
certificate, and a second CA nobody trusts with a broker and a client certificate of its
own. Keys are EC P-256 (quick to make; every client here speaks ECDSA), in PKCS#8 PEM
as Kafka's PEM stores want them.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The subject of the client certificate the mTLS tests map with ssl.principal.mapping.rules.
CLIENT_SUBJECT = "/C=US/O=Acme, Inc./OU=payments/CN=alice"
#: The same subject as Java's X500Principal.getName() writes it (RFC 2253: last RDN first).
CLIENT_DN = "CN=alice,OU=payments,O=Acme\\, Inc.,C=US"
KEY_PASSWORD = "key-secret"


@dataclass
class Certs:
    dir: Path
    ca: Path               # the CA certificate (the clients' and the broker's trust store)
    server: Path           # broker: key + chain in one PEM (ssl.keystore.location)
    server_key: Path       # broker: the key alone
    server_cert: Path      # broker: the certificate alone
    server_encrypted: Path  # broker: key encrypted with KEY_PASSWORD + chain
    client_cert: Path      # client (CLIENT_SUBJECT), signed by the CA
    client_key: Path
    client: Path           # client key + chain in one PEM
    client_encrypted: Path  # client key encrypted with KEY_PASSWORD + chain (Java's
                           # ssl.keystore.location: Kafka wants ssl.key.password for PEM files)
    expired: Path          # broker: key + an expired certificate from the CA
    rogue_ca: Path         # a CA nobody trusts
    rogue_server: Path     # broker: key + a certificate from the rogue CA
    rogue_client_cert: Path   # client: a certificate from the rogue CA
    rogue_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    run = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    if run.returncode:
        raise RuntimeError(f"openssl {' '.join(args)}: {run.stderr}")


def _key(name: str, cwd: Path) -> str:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
             f"{name}.key", cwd=cwd)
    return f"{name}.key"


def _ca(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-new", "-key", _key(name, cwd), "-out", f"{name}.pem", "-days", "30",
             "-subj", f"/CN=pylog test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)


def _signed(name: str, ca: str, subject: str, cwd: Path, days: int = 30,
            server: bool = True) -> None:
    _openssl("req", "-new", "-key", _key(name, cwd), "-out", f"{name}.csr", "-subj", subject,
             cwd=cwd)
    ext = cwd / f"{name}.ext"
    ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                   f"extendedKeyUsage={'serverAuth' if server else 'clientAuth'}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", str(days), "-extfile", ext.name,
             cwd=cwd)


def make_certs(directory: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (apt-get install openssl)")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    _ca("ca", d)
    _ca("rogue-ca", d)
    _signed("server", "ca", "/CN=localhost", d)
    _signed("client", "ca", CLIENT_SUBJECT, d, server=False)
    _signed("expired", "ca", "/CN=localhost", d, days=0)      # notAfter = now: expired at once
    _signed("rogue-server", "rogue-ca", "/CN=localhost", d)
    _signed("rogue-client", "rogue-ca", "/CN=mallory", d, server=False)
    # PBE-SHA1-3DES (PKCS#12's): the scheme Java 17 decrypts (it has no PBES2 SecretKeyFactory).
    for name in ("server", "client"):
        _openssl("pkcs8", "-topk8", "-in", f"{name}.key", "-out", f"{name}-enc.key", "-v1",
                 "PBE-SHA1-3DES", "-passout", f"pass:{KEY_PASSWORD}", cwd=d)

    def bundle(name: str, *parts: str) -> Path:
        path = d / name
        path.write_text("".join((d / p).read_text() for p in parts))
        return path

    return Certs(
        dir=d, ca=d / "ca.pem", server=bundle("server-store.pem", "server.key", "server.pem", "ca.pem"),
        server_key=d / "server.key", server_cert=d / "server.pem",
        server_encrypted=bundle("server-enc-store.pem", "server-enc.key", "server.pem", "ca.pem"),
        client_cert=d / "client.pem", client_key=d / "client.key",
        client=bundle("client-store.pem", "client.key", "client.pem", "ca.pem"),
        client_encrypted=bundle("client-enc-store.pem", "client-enc.key", "client.pem", "ca.pem"),
        expired=bundle("expired-store.pem", "expired.key", "expired.pem", "ca.pem"),
        rogue_ca=d / "rogue-ca.pem",
        rogue_server=bundle("rogue-server-store.pem", "rogue-server.key", "rogue-server.pem"),
        rogue_client_cert=d / "rogue-client.pem", rogue_client_key=d / "rogue-client.key")


def settings(client: str, certs, mtls: bool = False, ca=None, cert=None, key=None,
             sasl: tuple[str, str, str] | None = None) -> dict:
    """A client's own TLS settings: trust `ca` (the test CA), and present `cert`/`key`
    (the test client's with mtls); with `sasl` (mechanism, user, password), SASL_SSL."""
    ca = str(ca or certs.ca)
    if mtls:
        cert, key = cert or certs.client_cert, key or certs.client_key
    protocol = "SASL_SSL" if sasl else "SSL"
    if client in ("kcat", "confluent"):
        out = {"security.protocol": protocol, "ssl.ca.location": ca}
        if cert:
            out |= {"ssl.certificate.location": str(cert), "ssl.key.location": str(key)}
        if sasl:
            out |= {"sasl.mechanisms": sasl[0], "sasl.username": sasl[1], "sasl.password": sasl[2]}
        return out
    login = {"sasl_mechanism": sasl[0], "sasl_plain_username": sasl[1],
             "sasl_plain_password": sasl[2]} if sasl else {}
    if client == "kafka-python":
        out = {"security_protocol": protocol, "ssl_cafile": ca, **login}
        if cert:
            out |= {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
        return out
    from aiokafka.helpers import create_ssl_context
    return {"security_protocol": protocol, **login, "ssl_context": create_ssl_context(
        cafile=ca, certfile=str(cert) if cert else None, keyfile=str(key) if key else None)}


def client_context(certs, cert=None, key=None, ca=None) -> ssl.SSLContext:
    """An ssl.SSLContext for pylog's ProtocolClient trusting the test CA (or `ca`)."""
    ctx = ssl.create_default_context(cafile=str(ca or certs.ca))
    if cert:
        ctx.load_cert_chain(str(cert), str(key))
    return ctx
