"""LogDir: one log directory (one disk) of a LogManager.

A log dir holds partition directories plus Kafka's root files: ``.lock``,
``meta.properties``, the two offset checkpoints and the clean-shutdown
marker (docs/FORMAT.md, section 11). It has its own I/O engine, so each disk
has its own io_uring ring (or its own portable engine) and disks work in
parallel.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``.lock``, which also holds the
pid of the process that owns it, so a second process (or a second LogManager
in the same process) fails with a LogDirLockedError naming the holder. The
kernel drops the lock when the process dies, so a crash never leaves a dir
locked.

Thread safety: ``online``/``offline_reason`` are set once (online -> offline,
never back while the process runs, as in Kafka); everything else is called by
the LogManager under its own locks.
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import threading

from pylog._core.engine import IoEngine
from pylog.errors import LogDirLockedError

from . import checkpoints, files

__all__ = ["LogDir", "PartitionDirLock", "process_limit_hint"]


class LogDir:
    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)
        self.meta: checkpoints.MetaProperties | None = None
        self.online = True
        self.offline_reason: str | None = None
        self.had_clean_shutdown = False
        self._lock_fd = -1
        self._recorded_pid = False          # lock() wrote this process's pid into .lock
        self._engines: dict[tuple[str, int], IoEngine] = {}
        self._engines_lock = threading.Lock()

    @property
    def directory_id(self) -> str:
        return self.meta.directory_id if self.meta else ""

    # ------------------------------------------------------------------ lock

    def lock(self, record_pid: bool = True) -> None:
        """Creates the dir if needed and takes its lock; LogDirLockedError if held.
        Without `record_pid` (a process that only reads the dir while holding its
        lock: ``pylog export-to-kafka``) the ``.lock`` must exist and is neither
        created nor written (FileNotFoundError when it is missing)."""
        if record_pid:
            files.make_dirs(self.path)
        path = os.path.join(self.path, files.LOCK_FILE)
        def message(holder: str | None) -> str:
            who = f"process {holder}" if holder else "another process"
            if holder == str(os.getpid()):
                who = f"this process (pid {holder}; another LogManager has it open)"
            return (f"log dir {self.path} is locked by {who}: {path} is held; close the other "
                    f"LogManager, Kafka broker or standalone pylog.Log using this directory first")
        kafka = (f"log dir {self.path} is held by a running Kafka broker (a POSIX lock on "
                 f"{path}): stop it first, or read the dir with pylog.storage.LogDirsReader")
        self._lock_fd = _take_lock(path, fcntl.LOCK_EX, create=record_pid, message=message,
                                   before_write=lambda fd: _refuse_running_kafka(fd, kafka))
        self._recorded_pid = record_pid

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            try:
                if self._recorded_pid:
                    os.ftruncate(self._lock_fd, 0)
            except OSError:
                pass   # a read-only or failed disk: the kernel still drops the lock
            os.close(self._lock_fd)
            self._lock_fd = -1

    @property
    def locked(self) -> bool:
        return self._lock_fd >= 0

    # -------------------------------------------------------- meta.properties

    def load_meta(self, node_id: int) -> checkpoints.MetaProperties | None:
        """Reads meta.properties (None if the dir is new); checks the node id."""
        meta = checkpoints.MetaProperties.read(self.path)
        if meta is not None and meta.node_id != node_id:
            raise ValueError(f"{self.path}/{files.META_PROPERTIES_FILE} has node.id "
                             f"{meta.node_id}, but this LogManager is node.id {node_id}")
        self.meta = meta
        return meta

    def init_meta(self, cluster_id: str, node_id: int) -> None:
        """Writes meta.properties for a new dir, or adds a missing directory.id."""
        if self.meta is None:
            self.meta = checkpoints.MetaProperties(cluster_id, node_id, checkpoints.random_uuid())
            self.meta.write(self.path)
        elif not self.meta.directory_id:
            self.meta.directory_id = checkpoints.random_uuid()
            self.meta.write(self.path)

    # ---------------------------------------------------------- checkpoints

    def read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        return checkpoints.read_offset_checkpoint(os.path.join(self.path, name))

    def write_checkpoint(self, name: str, entries: dict[tuple[str, int], int]) -> None:
        checkpoints.write_offset_checkpoint(os.path.join(self.path, name), entries)

    # ------------------------------------------------------------- engines

    def engine(self, kind: str, queue_depth: int) -> IoEngine:
        """This dir's engine of `kind` (one per dir, shared by its partitions)."""
        key = (kind, queue_depth)
        with self._engines_lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = self._engines[key] = IoEngine(kind, queue_depth)
            return engine

    def engine_description(self) -> str:
        with self._engines_lock:
            return "; ".join(e.why for e in self._engines.values()) or "none yet"

    # -------------------------------------------------------------- offline

    def mark_offline(self, reason: str) -> bool:
        """Returns True the first time (the caller then handles the failure)."""
        if not self.online:
            return False
        self.online = False
        self.offline_reason = reason
        return True

    def __repr__(self) -> str:
        state = "online" if self.online else f"offline: {self.offline_reason}"
        return f"LogDir({self.path!r}, {state})"


class PartitionDirLock:
    """The lock a standalone :class:`~pylog.storage.log.Log` holds on its partition dir.

    ``flock(LOCK_EX | LOCK_NB)`` on the partition directory's own descriptor (flock
    works on a directory opened ``O_RDONLY``), so that no two writers append to one
    partition, in one process or in two, and no file is created for it: a Log
    opened only to read leaves the dir exactly as it found it (a Kafka broker's
    partition dirs hold no lock file either). And, when the parent is a log dir
    (it has a ``.lock``), ``flock(LOCK_SH | LOCK_NB)`` on the parent's lock, so
    that a Log is refused a partition of a live LogManager and a LogManager is
    refused a log dir one of whose partitions a standalone Log has open. The
    kernel drops both when the process dies. Raises LogDirLockedError naming the
    holder: its pid, as the kernel's lock table (``/proc/locks``) lists the
    directory's flock holder, or "another process" where that table does not
    name it (another pid namespace).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fds: list[int] = []
        try:
            parent = os.path.dirname(os.path.abspath(path))
            parent_lock = os.path.join(parent, files.LOCK_FILE)
            if os.path.exists(parent_lock):
                self._fds.append(_take_lock(parent_lock, fcntl.LOCK_SH, create=False,
                                            message=lambda holder: (
                    f"partition dir {path} is in log dir {parent}, which a LogManager holds "
                    f"({_who(holder)}): use that LogManager's log(), or close it first")))
                _refuse_running_kafka(self._fds[-1], (
                    f"partition dir {path} is in log dir {parent}, which a running Kafka broker "
                    f"holds: stop it first, or read the dir with pylog.storage.LogDirsReader"))
            self._fds.append(_lock_directory(path, lambda holder: (
                f"partition dir {path} is open for writing by {_who(holder)}: close that Log "
                f"first")))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fd in reversed(self._fds):
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


def _lock_directory(path: str, message) -> int:
    """``flock(LOCK_EX | LOCK_NB)`` on directory `path` itself; returns its descriptor.
    If another holder has it: LogDirLockedError(message(holder)), `holder` the pid
    /proc/locks gives for it (None if unknown)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        st = os.fstat(fd)
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise LogDirLockedError(message(_flock_holder(st))) from None
    return fd


def _flock_holder(st: os.stat_result) -> str | None:
    """The pid holding a flock on the file `st` describes, from the kernel's lock table:
    lines like ``1: FLOCK  ADVISORY  WRITE 2880 fe:00:10076333 0 EOF`` (pid, then
    major:minor:inode, the device numbers in hex). None when no line names it (a
    holder in another pid namespace shows as pid 0 or not at all)."""
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue                    # a waiter, or not a flock
        pid, dev_ino = fields[4], fields[5].split(":")
        if len(dev_ino) != 3 or not pid.isdigit() or pid == "0":
            continue
        try:
            same = (int(dev_ino[0], 16), int(dev_ino[1], 16), int(dev_ino[2])) == \
                (major, minor, st.st_ino)
        except ValueError:
            continue
        if same:
            return pid
    return None


def _take_lock(lock_path: str, mode: int, *, create: bool, message, before_write=None) -> int:
    """``flock(mode | LOCK_NB)`` on `lock_path`; returns the descriptor. With `create`
    the file is created if needed and then holds this process's pid (written after
    ``before_write(fd)``, which may refuse the lock by raising). If another holder
    has it: LogDirLockedError(message(holder)), `holder` the pid the holder wrote
    there (None if unknown)."""
    fd = os.open(lock_path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        if before_write is not None:
            before_write(fd)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise LogDirLockedError(message(_read_holder(lock_path))) from None
    except BaseException:
        os.close(fd)
        raise
    if create:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _refuse_running_kafka(fd: int, message: str) -> None:
    """A Kafka broker locks its log dir's ``.lock`` with a POSIX record lock
    (FileChannel.tryLock), which flock(2) does not see: probe it too (`fd` open on
    that ``.lock``), so a Log or a LogManager is refused a running Kafka broker's
    dir (LogDirLockedError(message)) before it writes anything there."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise LogDirLockedError(message) from None
    fcntl.lockf(fd, fcntl.LOCK_UN)


def lock_holder(directory: str) -> str | None:
    """Who holds ``directory/.lock`` now ("pid N", "another process"), or None when nobody
    does (or there is no lock file). Probes with the same flock the owners take, and
    lets go at once (pylog's and Kafka's log dirs lock alike)."""
    path = os.path.join(directory, files.LOCK_FILE)
    try:
        fd = _take_lock(path, fcntl.LOCK_EX, create=False, message=_who)
    except FileNotFoundError:
        return None
    except LogDirLockedError as exc:
        return str(exc)
    os.close(fd)                       # closing drops the flock
    return None


def _who(holder: str | None) -> str:
    if not holder:
        return "another process"
    return f"this process (pid {holder})" if holder == str(os.getpid()) else f"pid {holder}"


def process_limit_hint(exc: OSError) -> str | None:
    """What to do when `exc` is a limit of this process or machine rather than a
    failure of the disk (EMFILE, ENFILE, ENOMEM), else None."""
    if exc.errno == errno.EMFILE:
        try:
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        except (OSError, ValueError):
            soft = -1
        limit = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
        return (f"too many open files (limit {limit}): raise ulimit -n, or use fewer, "
                f"larger segments")
    if exc.errno == errno.ENFILE:
        return "the system's open-file table is full: raise fs.file-max"
    if exc.errno == errno.ENOMEM:
        return "out of memory (or vm.max_map_count reached by index mappings)"
    return None


def _read_holder(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if text.isdigit() else None
