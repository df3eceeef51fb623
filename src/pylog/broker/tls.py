"""TLS for the broker's SSL and SASL_SSL listeners: an OpenSSL context from Kafka's
``ssl.*`` keys, and kernel TLS (kTLS), which keeps Fetch zero-copy.

Stores are PEM only (``ssl.keystore.type=PEM``): the key and its certificate chain in
``ssl.keystore.location`` (the key encrypted with ``ssl.key.password``, or not), or as
text in ``ssl.keystore.key`` and ``ssl.keystore.certificate.chain``; trusted CAs in
``ssl.truststore.location`` or ``ssl.truststore.certificates``. JKS (Kafka's default
type) and PKCS12 stores are refused with the PEM keys to use instead. Each listener may
override any ``ssl.*`` key with Kafka's ``listener.name.<name>.`` prefix.

kTLS: with OpenSSL 3 (SSL_OP_ENABLE_KTLS) and the kernel's ``tls`` module, OpenSSL hands
a connection's record layer to the kernel after the handshake when the negotiated
cipher allows it (AES-GCM, ChaCha20-Poly1305). OpenSSL 3.0 hands over both directions
for TLS 1.2 and only the send direction for TLS 1.3; the kernel then encrypts what is
written to the socket, so a fetched file region goes out with sendfile(2) as over
PLAINTEXT, and received records are decrypted by the kernel (TLS 1.2) or by OpenSSL
(TLS 1.3). Without kTLS (no module, another cipher, ``pylog.ssl.ktls.enable=false``)
OpenSSL encrypts in user space and fetched records are copied through it.
:func:`ktls_support` probes the kernel once; :func:`tls_engine` (``pylog.tls_engine()``)
says which path is in use and why; the broker logs it once at start-up.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import socket
import ssl
import struct
from typing import Any

from pylog.errors import ConfigError

from .listeners import Listener
from .tls_ciphers import IANA_TO_OPENSSL, TLS13_SUITES
from .tls_principal import PrincipalMapper

__all__ = ["KernelTls", "ktls_support", "kernel_directions", "server_context", "tls_engine"]

#: SSL_OP_ENABLE_KTLS (OpenSSL 3.0; Python 3.11's ssl module has no name for it).
OP_ENABLE_KTLS = 0x8
#: SSL_CTRL_SET_READ_AHEAD (SSL_CTX_set_read_ahead is a macro over SSL_CTX_ctrl).
SSL_CTRL_SET_READ_AHEAD = 41
#: OpenSSL's read buffer with read-ahead: the most one read(2) of a TLS connection takes.
#: 0: OpenSSL's least, one record at its largest (2^14 bytes and its overhead). Before
#: each record OpenSSL moves the unread rest of this buffer to its front (to align the
#: record's payload): with one record's room that rest is the few bytes of the next
#: record one read took, where a larger buffer moved up to all of it per record. A
#: read(2) per record, about, instead of two (a record's header, then its body).
READ_AHEAD_BYTES = 0
SOL_TLS = 282
TLS_TX, TLS_RX = 1, 2
TCP_ULP = 31
_PROTOCOLS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
              "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                "none": ssl.CERT_NONE}
_PEM_KEYS = ("ssl.keystore.type=PEM with ssl.keystore.location=<a PEM file holding the "
             "private key and its certificate chain> (and ssl.key.password if the key is "
             "encrypted), or ssl.keystore.key and ssl.keystore.certificate.chain as PEM text")


# ============================================================ kernel TLS


class KernelTls:
    """Whether this kernel and OpenSSL can do kTLS, and why (:func:`ktls_support`)."""

    __slots__ = ("available", "why")

    def __init__(self, available: bool, why: str) -> None:
        self.available, self.why = available, why


@functools.lru_cache(maxsize=1)
def ktls_support() -> KernelTls:
    """Probes kTLS once: OpenSSL 3 (SSL_OP_ENABLE_KTLS), the kernel's ``tls`` upper layer
    on a connected loopback TCP socket (TCP_ULP), and the kernel's AES-GCM for it (a
    TLS_TX key set on that socket)."""
    version = ssl.OPENSSL_VERSION
    if ssl.OPENSSL_VERSION_INFO < (3, 0):
        return KernelTls(False, f"{version} predates kTLS support (OpenSSL 3.0)")
    if not hasattr(socket, "TCP_NODELAY") or os.uname().sysname != "Linux":
        return KernelTls(False, f"kTLS is Linux's ({os.uname().sysname} here)")
    listener = socket.socket()
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname(), timeout=5) as probe, \
                listener.accept()[0]:         # (the ULP needs an established connection)
            try:
                probe.setsockopt(socket.IPPROTO_TCP, TCP_ULP, b"tls")
            except OSError as exc:
                hint = f" ({_module_hint()})" if exc.errno == errno.ENOENT else ""
                return KernelTls(False, f"the kernel has no TLS upper layer: setsockopt "
                                        f"TCP_ULP 'tls': {os.strerror(exc.errno)}{hint}")
            # struct tls12_crypto_info_aes_gcm_128: TLS 1.3, AES-GCM-128, iv, key, salt, seq.
            info = struct.pack("<HH8s16s4s8s", 0x0304, 51, bytes(8), bytes(16), bytes(4), bytes(8))
            try:
                probe.setsockopt(SOL_TLS, TLS_TX, info)
            except OSError as exc:
                return KernelTls(False, f"the kernel's TLS cannot encrypt AES-GCM: setsockopt "
                                        f"TLS_TX: {os.strerror(exc.errno)} (its gcm(aes) "
                                        f"crypto module is missing?)")
    except OSError as exc:
        return KernelTls(False, f"could not probe kTLS on a loopback socket: {exc}")
    finally:
        listener.close()
    return KernelTls(True, f"kernel TLS (the tls module) with {version}")


def _module_hint() -> str:
    release = os.uname().release
    modules = f"/lib/modules/{release}/kernel/net/tls"
    if os.path.isdir(modules):
        return "the kernel's tls module is not loaded: modprobe tls, as root"
    return f"kernel {release} has no tls module (built without CONFIG_TLS)"


def tls_engine(enabled: bool = True) -> str:
    """Which record layer TLS listeners use and why, e.g. ``"kTLS (kernel TLS (the tls
    module) with OpenSSL 3.0.19): ..."`` or ``"user space (OpenSSL 3.0.19): no kTLS:
    ..."``. ``enabled``: the broker's ``pylog.ssl.ktls.enable``."""
    if not enabled:
        return (f"user space ({ssl.OPENSSL_VERSION}): kTLS disabled (pylog.ssl.ktls.enable="
                f"false): fetched records are copied and encrypted in user space")
    support = ktls_support()
    if not support.available:
        return (f"user space ({ssl.OPENSSL_VERSION}): no kTLS: {support.why}: fetched records "
                f"are copied and encrypted in user space")
    return (f"kTLS ({support.why}): AES-GCM and ChaCha20-Poly1305 connections send fetched "
            f"records with sendfile(2), encrypted by the kernel; others, and received records "
            f"of TLS 1.3, in user space")


def kernel_directions(sock: socket.socket) -> tuple[bool, bool]:
    """(send, receive): which directions of a TLS socket the kernel's TLS holds
    (getsockopt SOL_TLS TLS_TX/TLS_RX answers the crypto info only where one is set)."""
    out = []
    for direction in (TLS_TX, TLS_RX):
        try:
            sock.getsockopt(SOL_TLS, direction, 4)
            out.append(True)
        except OSError:
            out.append(False)
    return out[0], out[1]


# ============================================================ the context


class _Keys:
    """One listener's ssl.* values, and each key's name as the user wrote it (with the
    listener prefix where the value came from a per-listener key)."""

    def __init__(self, config, listener: Listener) -> None:
        self.config, self.listener = config, listener

    def __getitem__(self, key: str) -> Any:
        return self.config.for_listener(key, self.listener)

    def name(self, key: str) -> str:
        return self.config.listener_key(key, self.listener)

    def overridden(self, key: str) -> bool:
        return self.name(key) != key


def server_context(config, listener: Listener, ktls: bool) -> tuple[ssl.SSLContext, PrincipalMapper]:
    """The SSLContext of one TLS listener and its principal mapper, from the broker's
    ServerConfig. Raises ConfigError naming the key at fault."""
    keys = _Keys(config, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    if ktls:
        ctx.options |= OP_ENABLE_KTLS
    else:
        _set_read_ahead(ctx)
    _load_keystore(ctx, keys, listener)
    _load_truststore(ctx, keys)
    ctx.verify_mode = _CLIENT_AUTH[keys["ssl.client.auth"]]
    _set_protocols(ctx, keys)
    _set_ciphers(ctx, keys)
    if keys["ssl.protocol"] not in ("TLS", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3", "SSL",
                                    "SSLv2", "SSLv3"):
        raise ConfigError(f"{keys.name('ssl.protocol')} = {keys['ssl.protocol']!r}: not an "
                          f"SSLContext protocol (TLSv1.3, TLSv1.2, TLS)")
    return ctx, PrincipalMapper(keys["ssl.principal.mapping.rules"])


def _store_type(keys: _Keys, key: str, what: str, pem_keys: str) -> None:
    kind = keys[key].strip().upper()
    if kind == "PEM":
        return
    if kind in ("JKS", "PKCS12"):
        default = " (Kafka's default)" if kind == "JKS" and not keys.overridden(key) \
            else ""
        raise ConfigError(f"{keys.name(key)} = {keys[key]}{default}: pylog reads PEM {what}s "
                          f"only, not {kind}. Convert the store (keytool -importkeystore "
                          f"-deststoretype PKCS12, then openssl pkcs12 -nodes) and set "
                          f"{pem_keys}")
    raise ConfigError(f"{keys.name(key)} = {keys[key]!r}: must be PEM (JKS and PKCS12 stores "
                      f"are not read; set {pem_keys})")


def _pem_path(keys: _Keys, key: str) -> str:
    path = keys[key]
    if not os.path.isfile(path):
        raise ConfigError(f"{keys.name(key)} = {path!r}: no such file")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigError(f"{keys.name(key)} = {path!r}: cannot be read: {exc.strerror}") from None
    return path


def _load_keystore(ctx: ssl.SSLContext, keys: _Keys, listener: Listener) -> None:
    location, key, chain = (keys["ssl.keystore.location"], keys["ssl.keystore.key"],
                            keys["ssl.keystore.certificate.chain"])
    if not (location or key or chain):
        raise ConfigError(f"listener {listener} ({listener.security_protocol}) needs a key "
                          f"store: set {_PEM_KEYS}")
    _store_type(keys, "ssl.keystore.type", "key store", _PEM_KEYS)
    if keys["ssl.keystore.password"]:
        raise ConfigError(f"{keys.name('ssl.keystore.password')}: SSL key store password cannot "
                          f"be specified with PEM format, only key password may be specified "
                          f"(ssl.key.password)")
    if location and (key or chain):
        raise ConfigError(f"{keys.name('ssl.keystore.location')} and "
                          f"{keys.name('ssl.keystore.key')}: both SSL key store location and "
                          f"separate private key are provided; give one")
    if not location and not (key and chain):
        missing = "ssl.keystore.certificate.chain" if key else "ssl.keystore.key"
        raise ConfigError(f"{keys.name(missing)} is missing: ssl.keystore.key and "
                          f"ssl.keystore.certificate.chain go together")
    password = keys["ssl.key.password"]
    # A callable, never None: OpenSSL would prompt on the terminal for an encrypted key.
    secret = (lambda: password) if password else (lambda: b"")
    names = (keys.name("ssl.keystore.location"),) if location else (
        keys.name("ssl.keystore.key"), keys.name("ssl.keystore.certificate.chain"))
    try:
        if location:
            path = _pem_path(keys, "ssl.keystore.location")
            ctx.load_cert_chain(path, path, password=secret)
        else:
            with _memory_file(chain) as chain_path, _memory_file(key) as key_path:
                ctx.load_cert_chain(chain_path, key_path, password=secret)
    except ssl.SSLError as exc:
        text = key or _read_text(location)
        if "ENCRYPTED" in text and not password:
            reason = "the key is encrypted: set ssl.key.password"
        elif "ENCRYPTED" in text:
            reason = "the key does not decrypt: is ssl.key.password right?"
        elif exc.reason == "KEY_VALUES_MISMATCH":
            reason = "the private key is not the first certificate's"
        else:
            reason = f"{exc.reason or exc} (a PEM private key, PKCS#8 or traditional, and its " \
                     f"certificate chain, the broker's certificate first)"
        raise ConfigError(f"{' and '.join(names)}: no usable PEM private key and certificate "
                          f"chain: {reason}") from None


def _load_truststore(ctx: ssl.SSLContext, keys: _Keys) -> None:
    location, certificates = keys["ssl.truststore.location"], keys["ssl.truststore.certificates"]
    if not (location or certificates):
        if keys["ssl.client.auth"] != "none":
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)   # as Java's default cacerts
        return
    _store_type(keys, "ssl.truststore.type", "trust store",
                "ssl.truststore.type=PEM with ssl.truststore.location=<a PEM file of CA "
                "certificates>, or ssl.truststore.certificates as PEM text")
    if keys["ssl.truststore.password"]:
        raise ConfigError(f"{keys.name('ssl.truststore.password')}: SSL trust store password "
                          f"cannot be specified for PEM format")
    if location and certificates:
        raise ConfigError(f"{keys.name('ssl.truststore.location')} and "
                          f"{keys.name('ssl.truststore.certificates')}: give one")
    try:
        if location:
            ctx.load_verify_locations(cafile=_pem_path(keys, "ssl.truststore.location"))
        else:
            ctx.load_verify_locations(cadata=certificates)
    except (ssl.SSLError, ValueError) as exc:
        key = "ssl.truststore.location" if location else "ssl.truststore.certificates"
        raise ConfigError(f"{keys.name(key)}: no PEM certificates: "
                          f"{getattr(exc, 'reason', None) or exc}") from None


def _set_protocols(ctx: ssl.SSLContext, keys: _Keys) -> None:
    names = keys["ssl.enabled.protocols"]
    key = keys.name("ssl.enabled.protocols")
    unknown = [n for n in names if n not in _PROTOCOLS]
    if unknown or not names:
        raise ConfigError(f"{key} = {','.join(names)!r}: {', '.join(unknown) or 'empty'}: the "
                          f"protocols are {', '.join(_PROTOCOLS)}")
    order = list(_PROTOCOLS)
    ranks = sorted(order.index(n) for n in names)
    if ranks != list(range(ranks[0], ranks[-1] + 1)):
        raise ConfigError(f"{key} = {','.join(names)!r}: the versions must be consecutive "
                          f"(OpenSSL enables a range)")
    ctx.minimum_version = _PROTOCOLS[order[ranks[0]]]
    ctx.maximum_version = _PROTOCOLS[order[ranks[-1]]]


def _set_ciphers(ctx: ssl.SSLContext, keys: _Keys) -> None:
    """ssl.cipher.suites: TLS 1.2 suites by IANA (Java's) or OpenSSL name; TLS 1.3 suites
    through SSL_CTX_set_ciphersuites (Python's ssl module has no call for it). Java
    cannot negotiate a version none of whose suites is enabled: neither can pylog."""
    suites = keys["ssl.cipher.suites"]
    if not suites:
        return
    key = keys.name("ssl.cipher.suites")
    tls13 = [s for s in suites if s in TLS13_SUITES]
    tls12 = [IANA_TO_OPENSSL.get(s, s) for s in suites if s not in TLS13_SUITES]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(f"{key} = {','.join(suites)!r}: OpenSSL knows none of "
                              f"{', '.join(s for s in suites if s not in TLS13_SUITES)}") from None
        known = {c["name"] for c in ctx.get_ciphers()}
        missing = [s for s, name in zip((s for s in suites if s not in TLS13_SUITES), tls12)
                   if name not in known]
        if missing:
            raise ConfigError(f"{key}: OpenSSL does not offer {', '.join(missing)}")
    elif ctx.minimum_version <= ssl.TLSVersion.TLSv1_2:
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3      # no TLS 1.2 suite enabled
    if tls13:
        _set_tls13_suites(ctx, ":".join(tls13), key)
    elif ctx.maximum_version >= ssl.TLSVersion.TLSv1_3 or \
            ctx.maximum_version == ssl.TLSVersion.MAXIMUM_SUPPORTED:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2      # no TLS 1.3 suite enabled
    if ctx.minimum_version > ctx.maximum_version:
        raise ConfigError(f"{key} = {','.join(suites)!r}: no suite of the versions in "
                          f"{keys.name('ssl.enabled.protocols')}")


def _ssl_ctx(ctx: ssl.SSLContext):
    """(libssl, the context's SSL_CTX pointer) or (libssl, None): the SSL_CTX is the
    first field after the object header of CPython's PySSLContext, checked against
    SSL_CTX_get_options before use, through the libssl Python's _ssl module is linked
    with (Python's ssl module has no call for what follows)."""
    import _ssl
    lib = ctypes.CDLL(_ssl.__file__)
    lib.SSL_CTX_get_options.restype = ctypes.c_uint64
    lib.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    pointer = ctypes.c_void_p.from_address(id(ctx) + object.__basicsize__).value
    if not pointer or lib.SSL_CTX_get_options(pointer) != ctx.options:
        return lib, None
    return lib, pointer


def _set_tls13_suites(ctx: ssl.SSLContext, suites: str, key: str) -> None:
    """SSL_CTX_set_ciphersuites on the context's SSL_CTX."""
    lib, pointer = _ssl_ctx(ctx)
    if pointer is None:
        raise ConfigError(f"{key}: cannot set TLS 1.3 cipher suites with this Python")
    lib.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    if lib.SSL_CTX_set_ciphersuites(pointer, suites.encode()) != 1:
        raise ConfigError(f"{key}: OpenSSL refused the TLS 1.3 suites {suites}")


def _set_read_ahead(ctx: ssl.SSLContext) -> bool:
    """OpenSSL reads ahead, up to its read buffer (READ_AHEAD_BYTES) a read(2), instead
    of a TLS record's header and then its body (two reads per record: librdkafka's
    ~2.7 KB records cost the broker ~1 read(2) per 1.4 KB produced). Not with kTLS, which must find the
    socket's receive queue untouched to take TLS 1.2's receive direction. False where
    this Python's context cannot be reached (reads stay per record: slower, correct)."""
    lib, pointer = _ssl_ctx(ctx)
    if pointer is None:
        return False
    lib.SSL_CTX_ctrl.restype = ctypes.c_long
    lib.SSL_CTX_ctrl.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_void_p]
    lib.SSL_CTX_ctrl(pointer, SSL_CTRL_SET_READ_AHEAD, 1, None)
    lib.SSL_CTX_set_default_read_buffer_len.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.SSL_CTX_set_default_read_buffer_len(pointer, READ_AHEAD_BYTES)
    return True


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


class _memory_file:
    """PEM text as a path OpenSSL can open (a memfd: never on disk)."""

    def __init__(self, text: str) -> None:
        self.fd = os.memfd_create("pylog-pem", os.MFD_CLOEXEC)
        os.write(self.fd, text.encode())

    def __enter__(self) -> str:
        return f"/proc/self/fd/{self.fd}"

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
