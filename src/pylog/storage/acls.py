"""The authorizer's ACLs, kept by the store (Kafka keeps them in its metadata log as
AccessControlEntryRecords; ``kafka-acls.sh`` changes them with CreateAcls/DeleteAcls).

pylog keeps them in ``pylog-acls.json``, one copy per online log dir (dir_tables.py: tmp,
fsync, rename, fsync of the dir, in every dir before a change is answered, so they
survive kill -9 and the loss of any one disk; the newest epoch wins at open). Readers
(the broker's authorizer, on every request) take no lock: a change installs a new
immutable table, and :attr:`acl_epoch` tells them when to re-index.

:class:`AccessControlLists` is the keeper the LogManager owns (it delegates its public
methods); it sees the store only through :class:`~.dir_tables.TableDirs`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from pylog.common.acl import AclBinding, AclFilter, validate_binding
from pylog.errors import CorruptCheckpointError, PylogError

from . import files
from .dir_tables import TableDirs, install_table, load_table

__all__ = ["AclTable", "AccessControlLists"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AclTable:
    FILE = files.ACLS_FILE
    WHAT = "ACLs"
    MODE = 0o644

    epoch: int = 0
    bindings: tuple[AclBinding, ...] = ()

    def to_json(self) -> dict:
        return {"acls": [b.to_json() for b in self.bindings]}

    @classmethod
    def from_json(cls, body: dict, path: str) -> AclTable:
        bindings = []
        for row in body["acls"]:
            b = AclBinding(int(row[0]), str(row[1]), int(row[2]), str(row[3]), str(row[4]),
                           int(row[5]), int(row[6]))
            try:
                validate_binding(b)
            except PylogError as exc:
                raise CorruptCheckpointError(f"{path}: ACL {row!r}: {exc}") from None
            bindings.append(b)
        return cls(int(body["epoch"]), tuple(dict.fromkeys(bindings)))


class AccessControlLists:
    """The store's ACLs: read without a lock, changed under ``dirs.lock``."""

    def __init__(self, dirs: TableDirs) -> None:
        self._dirs = dirs
        self._acls = AclTable()

    def load(self) -> None:
        """At open: the newest copy in the log dirs."""
        table = load_table(self._dirs, AclTable)
        if table is not None:
            self._acls = table

    @property
    def acls(self) -> tuple[AclBinding, ...]:
        """Every ACL binding (an immutable snapshot)."""
        return self._acls.bindings

    @property
    def acl_epoch(self) -> int:
        """One more after each change (the authorizer re-indexes when it moves)."""
        return self._acls.epoch

    def describe_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [b for b in self._acls.bindings if acl_filter.matches(b)]

    def create_acls(self, bindings: Iterable[AclBinding]) -> list[PylogError | None]:
        """Kafka's CreateAcls: each binding is validated (InvalidRequestError naming the
        problem) and the valid ones are added together, in one write to every online log
        dir, before this returns. A binding that exists already is a success."""
        results: list[PylogError | None] = []
        new: list[AclBinding] = []
        for b in bindings:
            try:
                validate_binding(b)
                new.append(b)
                results.append(None)
            except PylogError as exc:
                results.append(exc)
        if new:
            with self._dirs.lock:
                self._dirs.check_open()
                current = self._acls
                merged = tuple(dict.fromkeys(current.bindings + tuple(new)))
                if len(merged) != len(current.bindings):
                    self._install_acls(AclTable(current.epoch + 1, merged))
                    log.info("ACLs added: %s", "; ".join(str(b) for b in new))
        return results

    def delete_acls(self, filters: Iterable[AclFilter]) -> list[list[AclBinding] | PylogError]:
        """Kafka's DeleteAcls: per filter, the bindings it matched and deleted (a
        binding two filters match is reported by both), or the error that made the
        filter invalid; one write for the whole request."""
        filters = list(filters)
        results: list[list[AclBinding] | PylogError] = []
        with self._dirs.lock:
            self._dirs.check_open()
            current = self._acls
            doomed: set[AclBinding] = set()
            for f in filters:
                try:
                    f.check()
                except PylogError as exc:
                    results.append(exc)
                    continue
                matched = [b for b in current.bindings if f.matches(b)]
                doomed.update(matched)
                results.append(matched)
            if doomed:
                self._install_acls(AclTable(current.epoch + 1, tuple(
                    b for b in current.bindings if b not in doomed)))
                log.info("ACLs deleted: %s", "; ".join(str(b) for b in doomed))
        return results

    def _install_acls(self, table: AclTable) -> None:
        install_table(self._dirs, table)
        self._acls = table
