"""The server side of the SASL mechanisms pylog's broker speaks: PLAIN and SCRAM.

Each is a small state machine over opaque tokens, Kafka's PlainSaslServer and
ScramSaslServer: ``evaluate(token)`` returns the token to answer with, and sets
``complete`` and ``authorization_id`` once the client has proved who it is. A failure
raises :class:`SaslAuthenticationError`: its message goes to the client where Kafka
sends its own (``client_message``), else the connection sends Kafka's generic one
("Authentication failed during authentication due to invalid credentials with SASL
mechanism ..."), which tells nothing of why (a user that does not exist, a wrong
password, a malformed message all read the same).

Comparisons of secrets take the same time whatever they hold (hmac.compare_digest);
a SCRAM exchange for a user that has no credential runs to its end against a made-up
one (RFC 5802, section 9: the server should not reveal which users exist), so it fails
at the same step as a wrong password. Kafka fails it at the first message.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets

from pylog.common import scram
from pylog.errors import SaslAuthenticationError

__all__ = ["PlainServer", "ScramServer", "SaslAuthenticationError"]


def _refuse(message: str, client_message: bool = False) -> SaslAuthenticationError:
    exc = SaslAuthenticationError(message)
    exc.client_message = client_message         # Kafka sends this message to the client
    return exc


class PlainServer:
    """RFC 4616: one message, ``[authzid] NUL authcid NUL passwd``, checked against the
    JAAS users (PlainServerCallbackHandler); Kafka's messages."""

    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise _refuse("Unexpected SASL/PLAIN message after authentication completed")
        text = bytes(token).decode("utf-8", errors="replace")
        parts = text.split("\0", 3)
        if len(parts) != 3:
            raise _refuse(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}", True)
        authzid, username, password = parts
        if not username:
            raise _refuse("Authentication failed: username not specified", True)
        if not password:
            raise _refuse("Authentication failed: password not specified", True)
        expected = self._users.get(username)
        # The same comparison for an unknown user, against itself: no timing tells.
        given = password.encode("utf-8")
        ok = hmac.compare_digest(given, (expected if expected is not None else password).encode("utf-8"))
        if expected is None or not ok:
            raise _refuse("Authentication failed: Invalid username or password", True)
        if authzid and authzid != username:
            raise _refuse("Authentication failed: Client requested an authorization id that is "
                          "different from username", True)
        self.authorization_id = username
        self.complete = True
        return b""


# ScramMessages.java's grammar (RFC 5802, section 7), in bytes.
_VALUE = rb"[\x01-\x2b\x2d-\x7f]+"                       # no NUL, no comma
_SASLNAME = rb"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = rb"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)?"
_EXTENSIONS = rb"(?:,[A-Za-z]+=" + _VALUE + rb")*"
_CLIENT_FIRST = re.compile(rb"(n,(?:a=(?P<authzid>" + _SASLNAME + rb"))?,)(?:m=" + _VALUE + rb",)?"
                           rb"(?P<bare>n=(?P<saslname>" + _SASLNAME + rb"),r=(?P<nonce>" + _PRINTABLE
                           + rb")(?P<extensions>" + _EXTENSIONS + rb"))")
_CLIENT_FINAL = re.compile(rb"(?P<without_proof>c=(?P<channel>" + _BASE64 + rb"),r=(?P<nonce>"
                           + _PRINTABLE + rb")" + _EXTENSIONS + rb"),p=(?P<proof>" + _BASE64 + rb")")

#: Salts of users that do not exist derive from this (one per process): stable for a name,
#: so asking twice does not tell either.
_FAKE_SALT_KEY = secrets.token_bytes(32)


class ScramServer:
    """SCRAM-SHA-256/512 (RFC 5802, RFC 7677) over the store's credentials, as Kafka's
    ScramSaslServer: client-first (user, nonce) -> server-first (nonce, salt,
    iterations); client-final (channel binding, proof) -> server-final (signature).
    The ``tokenauth`` extension (Kafka's delegation tokens) is refused: pylog has none."""

    def __init__(self, mechanism: scram.ScramMechanism, lookup) -> None:
        self.mechanism = mechanism.name
        self._scram = mechanism
        self._lookup = lookup                  # (user, mechanism name) -> ScramCredential | None
        self.complete = False
        self.authorization_id: str | None = None
        self._state = "first"
        self._credential: scram.ScramCredential | None = None
        self._known = False

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "first":
                return self._client_first(bytes(token))
            if self._state == "final":
                return self._client_final(bytes(token))
            raise _refuse(f"Unexpected SCRAM message in state {self._state}")
        except SaslAuthenticationError:
            self._state = "failed"
            self._credential = None
            raise

    def _client_first(self, message: bytes) -> bytes:
        found = _CLIENT_FIRST.fullmatch(message)
        if found is None:
            raise _refuse("Invalid SCRAM client first message format")
        try:
            username = scram.username_from_sasl_name(found["saslname"].decode("ascii"))
            authzid = found["authzid"] and scram.username_from_sasl_name(found["authzid"].decode("ascii"))
        except ValueError as exc:
            raise _refuse(str(exc)) from None
        extensions = dict(item.split(b"=", 1) for item in found["extensions"].split(b",")[1:])
        if extensions.get(b"tokenauth", b"").lower() == b"true":
            raise _refuse("Token authentication is not supported (pylog has no delegation tokens)")
        if authzid and authzid != username:
            raise _refuse("Authentication failed: Client requested an authorization id that is "
                          "different from username", True)
        credential = self._lookup(username, self.mechanism)
        self._known = credential is not None
        if credential is None:
            fake = hmac.digest(_FAKE_SALT_KEY, username.encode("utf-8"), "sha256")
            size = self._scram.digest_size
            credential = scram.ScramCredential(fake, secrets.token_bytes(size),
                                               secrets.token_bytes(size), scram.DEFAULT_ITERATIONS)
        elif credential.iterations < self._scram.min_iterations:
            raise _refuse(f"Iterations {credential.iterations} is less than the minimum "
                          f"{self._scram.min_iterations} for {self.mechanism}")
        self._credential = credential
        self._username = username
        self._gs2_header = message[:found.start("bare")]
        self._client_first_bare = found["bare"]
        self._nonce = found["nonce"] + secrets.token_urlsafe(24).encode("ascii")
        self._server_first = b"r=%s,s=%s,i=%d" % (self._nonce, base64.b64encode(credential.salt),
                                                   credential.iterations)
        self._state = "final"
        return self._server_first

    def _client_final(self, message: bytes) -> bytes:
        found = _CLIENT_FINAL.fullmatch(message)
        if found is None:
            raise _refuse("Invalid SCRAM client final message format")
        # Kafka checks that the nonce *ends with* the one it sent, not that it equals it:
        # librdkafka 2.0 (Debian's kcat) puts its own nonce in front once more (measured).
        # The proof covers whatever the client sent, so a replay still fails.
        if not found["nonce"].endswith(self._nonce):
            raise _refuse("Invalid client nonce in the final client message.")
        try:
            channel = base64.b64decode(found["channel"], validate=True)
            proof = base64.b64decode(found["proof"], validate=True)
        except binascii.Error:
            raise _refuse("Invalid SCRAM client final message encoding") from None
        if channel != self._gs2_header:
            raise _refuse("Invalid channel binding in the final client message")
        credential = self._credential
        mech = self._scram
        auth_message = b",".join((self._client_first_bare, self._server_first, found["without_proof"]))
        signature = scram.client_signature(mech, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise _refuse("Invalid client credentials")
        computed = scram.stored_key_from_proof(mech, signature, proof)
        if not hmac.compare_digest(computed, credential.stored_key) or not self._known:
            raise _refuse("Invalid client credentials")
        server_signature = scram.server_signature(mech, credential.server_key, auth_message)
        self._credential = None
        self.authorization_id = self._username
        self.complete = True
        self._state = "complete"
        return b"v=" + base64.b64encode(server_signature)
