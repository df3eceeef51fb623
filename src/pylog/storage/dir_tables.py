"""Tables kept as one JSON copy per online log dir: the topic table, the dynamic broker
configs, SCRAM credentials, ACLs and client quotas.

Each is written ``<file>.tmp``, fsync, rename, fsync of the dir
(files.write_file_atomically), in **every** online dir before a change is answered, so
losing any one disk loses none of them and a kill -9 leaves the old or the new copy,
never a mix. Each copy is ``{"version": 1, "epoch": n, ...the table's own keys}``; the
epoch is one more per change: at open the newest copy wins and stale or missing copies
are rewritten; a corrupt copy is ignored with a warning (another dir's copy, or an
empty table, takes its place). docs/FORMAT.md, section 11.

:class:`TableDirs` is all a table's keeper needs of the store: the LogManager builds
one and hands it to each keeper it owns (topic admin, dynamic configs, SCRAM, ACLs,
client quotas).
"""

from __future__ import annotations

import errno as errno_mod
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pylog.errors import CorruptCheckpointError, KafkaStorageError

from .files import write_file_atomically

__all__ = ["DirTable", "TableDirs", "read_copy", "write_copy", "read_copies", "install_table",
           "load_table"]

log = logging.getLogger(__name__)

TABLE_VERSION = 1


class DirTable(Protocol):
    FILE: str          # its file name in each log dir (storage/files.py)
    WHAT: str          # for messages: "ACLs" ("writing the ACLs", "a corrupt ACLs file")
    MODE: int          # the file's permissions
    epoch: int

    def to_json(self) -> dict: ...

    @classmethod
    def from_json(cls, body: dict, path: str) -> Any: ...


T = TypeVar("T", bound=DirTable)


@dataclass(frozen=True, slots=True)
class TableDirs:
    """The store's side of a table kept in every log dir (LogManager's, bound).

    ``lock``: serialises changes (held while a change is written and installed);
    ``check_open()``: raises if the store is closed or every dir is offline;
    ``online_dirs()``: the LogDirs to write; ``fail_dir(d, exc, where)``: an OSError
    while serving takes `d` offline; ``dir_failed_at_startup(d, exc, what)``: the same
    while opening."""

    lock: threading.RLock
    check_open: Callable[[], None]
    online_dirs: Callable[[], list]
    fail_dir: Callable[[Any, OSError, str], None]
    dir_failed_at_startup: Callable[[Any, Exception, str], None]


def read_copy(cls: type[T], log_dir: str) -> T | None:
    """The copy in `log_dir`; None if it has none. Raises CorruptCheckpointError."""
    path = os.path.join(log_dir, cls.FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(raw)
        if body.get("version") != TABLE_VERSION:
            raise CorruptCheckpointError(f"{path}: unsupported version {body.get('version')!r}")
        return cls.from_json(body, path)
    except CorruptCheckpointError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise CorruptCheckpointError(f"{path} is not a valid {cls.WHAT} file: {exc!r}") from None


def write_copy(table: DirTable, log_dir: str) -> None:
    body = {"version": TABLE_VERSION, "epoch": table.epoch, **table.to_json()}
    write_file_atomically(os.path.join(log_dir, table.FILE),
                          (json.dumps(body, indent=1) + "\n").encode("utf-8"), mode=table.MODE)


def install_table(dirs: TableDirs, table: DirTable) -> None:
    """Writes `table` to every online dir (``dirs.lock`` held); a dir that fails goes
    offline; with none written the change fails (KafkaStorageError)."""
    written = 0
    for d in dirs.online_dirs():
        try:
            write_copy(table, d.path)
            written += 1
        except OSError as exc:
            dirs.fail_dir(d, exc, f"writing the {table.WHAT}")
    if not written:
        dirs.check_open()
        raise KafkaStorageError(errno_mod.EIO, f"the {table.WHAT} could not be written to any "
                                f"log dir")


def read_copies(dirs: TableDirs, cls: type[T]) -> dict[str, T | None]:
    """At open: each online dir's copy (None: it has none, or a corrupt one, ignored
    with a warning); a dir that cannot be read goes offline."""
    copies: dict[str, T | None] = {}
    for d in dirs.online_dirs():
        try:
            copies[d.path] = read_copy(cls, d.path)
        except CorruptCheckpointError as exc:
            log.warning("ignoring a corrupt %s file: %s", cls.WHAT, exc)
            copies[d.path] = None
        except OSError as exc:
            dirs.dir_failed_at_startup(d, exc, f"cannot read the {cls.WHAT}")
    return copies


def load_table(dirs: TableDirs, cls: type[T]) -> T | None:
    """At open: the newest copy among the online dirs (None if none has one); stale or
    missing copies are rewritten."""
    copies = read_copies(dirs, cls)
    tables = [t for t in copies.values() if t is not None]
    if not tables:
        return None
    table = max(tables, key=lambda t: t.epoch)
    for d in dirs.online_dirs():
        copy = copies.get(d.path)
        if copy is None or copy.epoch != table.epoch:
            try:
                write_copy(table, d.path)
            except OSError as exc:
                dirs.dir_failed_at_startup(d, exc, f"cannot write the {cls.WHAT}")
    return table
