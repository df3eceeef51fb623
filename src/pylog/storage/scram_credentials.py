"""Users' SCRAM credentials (Kafka's SCRAM-SHA-256 and SCRAM-SHA-512), kept by the store.

Kafka keeps them in its metadata log (UserScramCredentialRecord: name, mechanism, salt,
StoredKey, ServerKey, iterations) and changes them with AlterUserScramCredentials
(``kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type
users``). pylog keeps the same fields in ``pylog-scram-credentials.json``, one copy per
online log dir, written like the topic table (tmp, fsync, rename, fsync of the dir;
mode 0600; the newest ``epoch`` wins at open, stale copies are rewritten; a corrupt
copy is ignored with a warning): a change is on disk in every dir before it is answered,
and survives kill -9. The password is never stored, nor ever seen by the store: clients
salt it (docs/FORMAT.md, section 11).

Changes follow Kafka's controller (ScramControlManager.alterCredentials): per user, all
or nothing; a user named twice in one request (either list) gets DUPLICATE_RESOURCE,
an empty name or iterations outside the mechanism's bounds UNACCEPTABLE_CREDENTIAL, an
unknown mechanism UNSUPPORTED_SASL_MECHANISM, deleting a credential that does not exist
RESOURCE_NOT_FOUND; the users without an error change together, in one write.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from pylog.common.scram import MECHANISMS, MECHANISMS_BY_TYPE, ScramCredential, ScramMechanism
from pylog.errors import (
    CorruptCheckpointError,
    DuplicateResourceError,
    PylogError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)

from . import files
from .dir_tables import TableDirs, install_table, load_table

__all__ = ["ScramCredentialTable", "UserScramCredentials"]

log = logging.getLogger(__name__)

#: user -> mechanism name -> credential
Credentials = dict[str, dict[str, ScramCredential]]


@dataclass(slots=True)
class ScramCredentialTable:
    """Every user's credentials, and the epoch of the last change (a dir_tables table)."""

    FILE = files.SCRAM_CREDENTIALS_FILE
    WHAT = "SCRAM credentials"
    MODE = 0o600

    epoch: int = 0
    users: Credentials = field(default_factory=dict)

    def to_json(self) -> dict:
        b64 = lambda raw: base64.b64encode(raw).decode("ascii")     # noqa: E731
        return {"users": {user: {name: {"salt": b64(c.salt), "stored_key": b64(c.stored_key),
                                        "server_key": b64(c.server_key), "iterations": c.iterations}
                                 for name, c in sorted(mechanisms.items())}
                          for user, mechanisms in sorted(self.users.items())}}

    @classmethod
    def from_json(cls, body: dict, path: str) -> ScramCredentialTable:
        users: Credentials = {}
        for user, mechanisms in body["users"].items():
            users[user] = {}
            for name, c in mechanisms.items():
                mechanism = MECHANISMS.get(name)
                if mechanism is None:
                    raise CorruptCheckpointError(f"{path}: user {user!r} has an unknown "
                                                 f"mechanism {name!r}")
                keys = [base64.b64decode(c[k], validate=True) for k in ("stored_key", "server_key")]
                if any(len(k) != mechanism.digest_size for k in keys):
                    raise CorruptCheckpointError(f"{path}: user {user!r}'s {name} keys are not "
                                                 f"{mechanism.digest_size} bytes")
                users[user][name] = ScramCredential(base64.b64decode(c["salt"], validate=True),
                                                    *keys, int(c["iterations"]))
        return cls(int(body["epoch"]), users)


def _mechanism(which: str | int) -> ScramMechanism:
    found = MECHANISMS_BY_TYPE.get(which) if isinstance(which, int) else MECHANISMS.get(which)
    if found is None:
        raise UnsupportedSaslMechanismError("Unknown SCRAM mechanism")
    return found


class UserScramCredentials:
    """The store's SCRAM credentials (the LogManager owns this keeper and delegates its
    public methods; the store is seen only through :class:`~.dir_tables.TableDirs`).

    Readers (the broker's SASL server, on its event loop) take no lock: a change
    installs a new table."""

    def __init__(self, dirs: TableDirs) -> None:
        self._dirs = dirs
        self._scram = ScramCredentialTable()

    def load(self) -> None:
        """At open: the newest copy in the log dirs."""
        table = load_table(self._dirs, ScramCredentialTable)
        if table is not None:
            self._scram = table

    # ============================================================== reading

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """`user`'s credential for `mechanism` (``SCRAM-SHA-256``...), or None."""
        return self._scram.users.get(user, {}).get(mechanism)

    def describe_user_scram_credentials(self, users: Iterable[str] | None = None
                                        ) -> dict[str, dict[str, int] | PylogError]:
        """Kafka's DescribeUserScramCredentials: user -> {mechanism: iterations}, for
        `users` (None or empty: every user that has a credential). A user named twice
        gets DuplicateResourceError, one without credentials ResourceNotFoundError, as
        Kafka's messages say."""
        table = self._scram.users
        if not users:
            return {u: {n: c.iterations for n, c in sorted(m.items())} for u, m in sorted(table.items())}
        out: dict[str, dict[str, int] | PylogError] = {}
        for user in users:
            if user in out:
                out[user] = DuplicateResourceError(
                    "Cannot describe SCRAM credentials for the same user twice in a single "
                    "request: " + user)
            elif table.get(user):
                out[user] = {n: c.iterations for n, c in sorted(table[user].items())}
            else:
                out[user] = ResourceNotFoundError(
                    "Attempt to describe a user credential that does not exist: " + user)
        return out

    # ============================================================== changing

    def alter_user_scram_credentials(
            self, deletions: Iterable[tuple[str, str | int]] = (),
            upsertions: Iterable[tuple[str, str | int, ScramCredential]] = (),
    ) -> dict[str, PylogError | None]:
        """Kafka's AlterUserScramCredentials: `deletions` are (user, mechanism),
        `upsertions` (user, mechanism, credential); a mechanism is its name or Kafka's type
        byte (1: SCRAM-SHA-256, 2: SCRAM-SHA-512). Returns user -> None (changed) or the
        error that left that user unchanged; every user without an error changes, in one
        write to every online log dir, before this returns."""
        errors: dict[str, PylogError] = {}
        changes: dict[str, tuple[ScramMechanism, ScramCredential | None]] = {}

        def take(user: str, which, credential: ScramCredential | None) -> None:
            if user in errors:
                return
            if changes.pop(user, None) is not None:
                errors[user] = DuplicateResourceError(
                    "A user credential cannot be altered twice in the same request")
                return
            try:
                changes[user] = (self._check_change(user, which, credential), credential)
            except PylogError as exc:
                errors[user] = exc
        for user, which in deletions:
            take(user, which, None)
        for user, which, credential in upsertions:
            take(user, which, credential)
        if changes:
            with self._dirs.lock:
                self._dirs.check_open()
                users = {u: dict(m) for u, m in self._scram.users.items()}
                for user, (mechanism, credential) in list(changes.items()):
                    if credential is None:
                        if mechanism.name not in users.get(user, {}):
                            del changes[user]
                            errors[user] = ResourceNotFoundError(
                                "Attempt to delete a user credential that does not exist")
                            continue
                        del users[user][mechanism.name]
                        if not users[user]:
                            del users[user]
                    else:
                        users.setdefault(user, {})[mechanism.name] = credential
                if changes:
                    table = ScramCredentialTable(self._scram.epoch + 1, users)
                    install_table(self._dirs, table)
                    self._scram = table
                    log.info("SCRAM credentials changed: %s", ", ".join(
                        f"{u} {'-' if c is None else '+'}{m.name}" for u, (m, c) in changes.items()))
        return {**{u: None for u in changes}, **errors}

    @staticmethod
    def _check_change(user: str, which: str | int, credential: ScramCredential | None) -> ScramMechanism:
        if not user:
            raise UnacceptableCredentialError("Username must not be empty")
        mechanism = _mechanism(which)
        if credential is not None:
            if credential.iterations < mechanism.min_iterations:
                raise UnacceptableCredentialError("Too few iterations")
            if credential.iterations > mechanism.max_iterations:
                raise UnacceptableCredentialError("Too many iterations")
        return mechanism
