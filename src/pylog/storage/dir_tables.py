"""Small tables kept as one JSON copy per online log dir (ACLs, client quotas).

Written like the topic table: ``<file>.tmp``, fsync, rename, fsync of the dir
(files.write_file_atomically), in **every** online dir before a change is answered, so
losing any one disk loses none of them and a kill -9 leaves the old or the new copy,
never a mix. Each copy carries an ``epoch`` (one more per change): at open the newest
copy wins and stale or missing copies are rewritten; a corrupt copy is ignored with a
warning (another dir's copy, or an empty table, takes its place).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Protocol

from pylog.errors import CorruptCheckpointError

from .files import write_file_atomically

__all__ = ["DirTable", "read_copy", "write_copy", "install_table", "load_table"]

log = logging.getLogger(__name__)


class DirTable(Protocol):
    FILE: str
    WHAT: str          # for messages: "the ACLs"
    epoch: int

    def to_json(self) -> dict: ...

    @classmethod
    def from_json(cls, body: dict, path: str): ...


def read_copy(cls, log_dir: str):
    """The copy in `log_dir`; None if it has none. Raises CorruptCheckpointError."""
    path = os.path.join(log_dir, cls.FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(raw)
        if body.get("version") != 1:
            raise CorruptCheckpointError(f"{path}: unsupported version {body.get('version')!r}")
        return cls.from_json(body, path)
    except CorruptCheckpointError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise CorruptCheckpointError(f"{path} is not a valid file of {cls.WHAT}: {exc!r}") from None


def write_copy(table, log_dir: str) -> None:
    body = {"version": 1, "epoch": table.epoch, **table.to_json()}
    write_file_atomically(os.path.join(log_dir, table.FILE),
                          (json.dumps(body, indent=1) + "\n").encode("utf-8"))


def install_table(manager, table) -> None:
    """Writes `table` to every online dir of `manager` (a LogManager, its lock held); a
    dir that fails goes offline; with none written the change fails (KafkaStorageError)."""
    written = 0
    for d in manager._online_dirs():
        try:
            write_copy(table, d.path)
            written += 1
        except OSError as exc:
            manager._fail_dir(d, exc, f"writing {table.WHAT}")
    if not written:
        manager._check_open()


def load_table(manager, cls):
    """At open: the newest copy among the online dirs (None if none has one); stale or
    missing copies are rewritten."""
    copies = {}
    for d in manager._online_dirs():
        try:
            copies[d.path] = read_copy(cls, d.path)
        except CorruptCheckpointError as exc:
            log.warning("ignoring a corrupt file of %s: %s", cls.WHAT, exc)
            copies[d.path] = None
        except OSError as exc:
            manager._dir_failed_at_startup(d, exc, f"cannot read {cls.WHAT}")
    tables = [t for t in copies.values() if t is not None]
    if not tables:
        return None
    table = max(tables, key=lambda t: t.epoch)
    for d in manager._online_dirs():
        copy = copies.get(d.path)
        if copy is None or copy.epoch != table.epoch:
            try:
                write_copy(table, d.path)
            except OSError as exc:
                manager._dir_failed_at_startup(d, exc, f"cannot write {cls.WHAT}")
    return table
