"""The client side of SASL for pylog's own tools: PLAIN and SCRAM-SHA-256/512 over
SaslHandshake v1 and SaslAuthenticate, as Kafka's clients speak them.

``ProtocolClient(bootstrap, authenticate=SaslLogin("SCRAM-SHA-512", "alice", "secret"))``
authenticates before its first request (over TLS too, for SASL_SSL: add
``ssl_context=``, :mod:`pylog.remote.tls`). :meth:`SaslLogin.from_properties` reads
Kafka's client keys, as a ``--command-config`` file holds them: ``security.protocol``,
``sasl.mechanism`` and ``sasl.jaas.config`` (``...ScramLoginModule required
username="alice" password="secret";``).

The SCRAM client checks the server's signature: a broker that does not hold the user's
ServerKey cannot pass for one that does (RFC 5802, section 3).
"""

from __future__ import annotations

import base64
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from pylog.common import jaas, scram
from pylog.errors import ConfigError, ErrorCode
from pylog.protocol import ApiKey
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient, ProtocolError

from .tls import security_protocol

__all__ = ["SaslLogin"]

_FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED       # what a broker that fails SCRAM's checks gets

_SERVER_FIRST = re.compile(rb"(?:m=[^,]+,)?r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+),s=(?P<salt>[A-Za-z0-9+/=]+),"
                           rb"i=(?P<iterations>[0-9]+)(?:,.*)?", re.DOTALL)


@dataclass(frozen=True)
class SaslLogin:
    """A SASL login: mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), user, password.
    Call it with a connected client to authenticate that connection."""

    mechanism: str
    username: str
    password: str

    def __repr__(self) -> str:
        return f"SaslLogin({self.mechanism!r}, {self.username!r}, password=[hidden])"

    @classmethod
    def from_properties(cls, props: Mapping[str, str], where: str = "client config") -> SaslLogin | None:
        """From Kafka's client keys; None when ``security.protocol`` is PLAINTEXT (or
        unset) or SSL. ConfigError names a key that is missing or wrong."""
        protocol = security_protocol(props, where)
        if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            return None
        mechanism = props.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in ("PLAIN", *scram.MECHANISMS):
            raise ConfigError(f"{where}: sasl.mechanism = {mechanism}: expected PLAIN, "
                              f"{', '.join(scram.MECHANISMS)}")
        text = props.get("sasl.jaas.config")
        if not text:
            raise ConfigError(f"{where}: sasl.jaas.config is not set (e.g. {jaas.SCRAM_LOGIN_MODULE} "
                              f"required username=\"alice\" password=\"alice-secret\";)")
        module, options = jaas.parse_jaas_config(text, f"{where}: sasl.jaas.config")
        if "username" not in options or "password" not in options:
            raise ConfigError(f"{where}: sasl.jaas.config: {module} needs username and password")
        return cls(mechanism, options["username"], options["password"])

    def __call__(self, client: ProtocolClient) -> None:
        answer = client.request(ApiKey.SASL_HANDSHAKE, m.SaslHandshakeRequest(mechanism=self.mechanism),
                                version=1)
        if answer.error_code:
            raise ProtocolError(answer.error_code, f"SASL handshake for {self.mechanism} (the "
                                f"broker offers {', '.join(answer.mechanisms) or 'none'})")
        if self.mechanism == "PLAIN":
            self._step(client, b"\0" + self.username.encode() + b"\0" + self.password.encode())
        else:
            self._scram(client, scram.MECHANISMS[self.mechanism])

    def _step(self, client: ProtocolClient, token: bytes) -> bytes:
        answer = client.request(ApiKey.SASL_AUTHENTICATE, m.SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code:
            raise ProtocolError(answer.error_code, f"SASL authentication as {self.username!r}: "
                                f"{answer.error_message}")
        return bytes(answer.auth_bytes)

    def _scram(self, client: ProtocolClient, mech: scram.ScramMechanism) -> None:
        nonce = secrets.token_urlsafe(24).encode("ascii")
        first_bare = b"n=" + scram.sasl_name(self.username).encode("utf-8") + b",r=" + nonce
        server_first = self._step(client, b"n,," + first_bare)
        found = _SERVER_FIRST.fullmatch(server_first)
        if found is None or not found["nonce"].startswith(nonce):
            raise ProtocolError(_FAILED, f"SCRAM: the broker's first message is invalid: {server_first!r}")
        iterations = int(found["iterations"])
        if iterations < mech.min_iterations:
            raise ProtocolError(_FAILED, f"SCRAM: the broker asks for {iterations} iterations, fewer "
                                         f"than {mech.min_iterations}")
        salted = scram.salted_password(mech, self.password, base64.b64decode(found["salt"]), iterations)
        without_proof = b"c=biws,r=" + found["nonce"]
        auth_message = b",".join((first_bare, server_first, without_proof))
        proof = scram.client_proof(mech, salted, auth_message)
        server_final = self._step(client, without_proof + b",p=" + base64.b64encode(proof))
        expected = b"v=" + base64.b64encode(
            scram.server_signature(mech, mech.hmac(salted, b"Server Key"), auth_message))
        if not hmac.compare_digest(server_final, expected):
            raise ProtocolError(_FAILED, "SCRAM: the broker's signature is wrong (it does not hold "
                                         f"{self.username!r}'s credential)")
