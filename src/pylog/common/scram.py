"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: mechanisms, credentials, and the formulas.

A SCRAM credential is what Kafka stores for a user per mechanism: a salt, the iteration
count, and two keys derived from the salted password (never the password itself):

    SaltedPassword = Hi(password, salt, iterations)      (PBKDF2 with HMAC-H)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

The server proves it holds ServerKey (its signature over the exchange) and checks that the
client knew ClientKey (H(ClientProof xor ClientSignature) == StoredKey); neither key lets
a reader of the store log in as the user. Kafka's ScramFormatter, ScramMechanism and
ScramCredential (org.apache.kafka.common.security.scram); the password is UTF-8 encoded,
without SASLprep, as Kafka does.

Shared by the store (credentials on disk), the broker (the SASL server) and the tools
(which salt a password before it leaves the process).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

__all__ = ["ScramMechanism", "ScramCredential", "MECHANISMS", "MECHANISMS_BY_TYPE",
           "DEFAULT_ITERATIONS", "scram_mechanism", "salted_password", "credential_from_salted",
           "new_credential", "client_signature", "server_signature", "stored_key_from_proof",
           "client_proof", "sasl_name", "username_from_sasl_name"]

#: Kafka's kafka-configs and admin client default (ConfigCommand.DefaultScramIterations).
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism, with Kafka's wire type (AlterUserScramCredentials' ``mechanism``
    byte) and iteration bounds (ScramMechanism.java: at least 4096; the controller refuses
    more than 16384)."""

    name: str                   # "SCRAM-SHA-256"
    type: int                   # Kafka's ScramMechanism.type(): 1, 2
    hash_name: str              # hashlib's name
    min_iterations: int = 4096
    max_iterations: int = 16384

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.digest(key, data, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


MECHANISMS: dict[str, ScramMechanism] = {
    m.name: m for m in (ScramMechanism("SCRAM-SHA-256", 1, "sha256"),
                        ScramMechanism("SCRAM-SHA-512", 2, "sha512"))}
MECHANISMS_BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS.values()}


def scram_mechanism(name: str) -> ScramMechanism:
    """The mechanism named `name` (``SCRAM-SHA-256``, ``SCRAM-SHA-512``); ValueError names
    the ones there are."""
    try:
        return MECHANISMS[name]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {name!r}: expected one of "
                         f"{', '.join(MECHANISMS)}") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What is stored for one user and mechanism (Kafka's ScramCredential). ``repr`` hides
    the keys, as Kafka's toString does."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(salt=[hidden], stored_key=[hidden], server_key=[hidden], " \
               f"iterations={self.iterations})"


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, iterations): PBKDF2 with HMAC-H, one block (RFC 5802 section 2.2)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted(mechanism: ScramMechanism, salt: bytes, salted: bytes,
                           iterations: int) -> ScramCredential:
    """The stored form of a salted password (what AlterUserScramCredentials carries)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(bytes(salt), mechanism.hash(client_key),
                           mechanism.hmac(salted, b"Server Key"), iterations)


def new_credential(mechanism: ScramMechanism, password: str,
                   iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
    """A credential for `password` with a fresh random salt."""
    salt = secrets.token_bytes(32)
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt,
                                                                   iterations), iterations)


def client_signature(mechanism: ScramMechanism, stored_key: bytes, auth_message: bytes) -> bytes:
    return mechanism.hmac(stored_key, auth_message)


def server_signature(mechanism: ScramMechanism, server_key: bytes, auth_message: bytes) -> bytes:
    return mechanism.hmac(server_key, auth_message)


def stored_key_from_proof(mechanism: ScramMechanism, signature: bytes, proof: bytes) -> bytes:
    """H(ClientProof xor ClientSignature): equal to StoredKey iff the client knew ClientKey.
    `proof` must be as long as `signature` (the caller checks)."""
    client_key = (int.from_bytes(signature, "big") ^ int.from_bytes(proof, "big")).to_bytes(
        len(signature), "big")
    return mechanism.hash(client_key)


def client_proof(mechanism: ScramMechanism, salted: bytes, auth_message: bytes) -> bytes:
    """ClientKey xor ClientSignature (the client's side; pylog's tools and tests)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    signature = mechanism.hmac(mechanism.hash(client_key), auth_message)
    return (int.from_bytes(client_key, "big") ^ int.from_bytes(signature, "big")).to_bytes(
        len(client_key), "big")


def sasl_name(username: str) -> str:
    """A username as SCRAM's ``n=`` attribute writes it: ``=`` -> ``=3D``, ``,`` -> ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_from_sasl_name(name: str) -> str:
    """The inverse of :func:`sasl_name`; ValueError for an ``=`` that escapes nothing
    (Kafka's ScramFormatter.username)."""
    unescaped = name.replace("=2C", ",")
    if "=" in unescaped.replace("=3D", ""):
        raise ValueError(f"invalid SCRAM username {name!r}")
    return unescaped.replace("=3D", "=")
