"""Every file name pylog uses, in one place (docs/FORMAT.md, section 8).

Segment files are named by their base offset, zero-padded to 20 digits so
that ``ls`` sorts them numerically, exactly as Kafka names them.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "LOG_SUFFIX", "INDEX_SUFFIX", "TIME_INDEX_SUFFIX", "TXN_INDEX_SUFFIX", "SNAPSHOT_SUFFIX",
    "DELETED_SUFFIX", "CLEANED_SUFFIX", "SWAP_SUFFIX", "DELETE_DIR_SUFFIX",
    "LOG_STATE_FILE", "filename_prefix_from_offset", "offset_from_filename",
    "log_file", "index_file", "time_index_file", "txn_index_file", "snapshot_file",
    "SEGMENT_FILE_SUFFIXES",
    "partition_dir_name", "parse_partition_dir",
    "fsync_dir", "make_dirs", "LOCK_FILE", "META_PROPERTIES_FILE", "CLEAN_SHUTDOWN_FILE",
    "RECOVERY_POINT_CHECKPOINT_FILE", "LOG_START_OFFSET_CHECKPOINT_FILE",
    "CLEANER_OFFSET_CHECKPOINT_FILE", "PARTITION_METADATA_FILE",
    "TOPICS_FILE", "BROKER_CONFIGS_FILE", "SCRAM_CREDENTIALS_FILE", "ACLS_FILE", "CLIENT_QUOTAS_FILE", "SPARK_DIR", "TABLES_DIR", "SHARE_GROUPS_DIR", "STRAY_DIR_SUFFIX", "renamed_dir_name", "write_file_atomically",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"       # producer state
DELETED_SUFFIX = ".deleted"         # a segment file scheduled for removal
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: The files of one segment (a .txnindex exists only once an aborted transaction ended in it).
SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
DELETE_DIR_SUFFIX = "-delete"       # a partition dir scheduled for removal

STRAY_DIR_SUFFIX = "-stray"         # a partition dir no topic claims, set aside

# --- log dir root (docs/FORMAT.md, section 11) ---
LOCK_FILE = ".lock"                                         # flock'ed while open; holds the pid
META_PROPERTIES_FILE = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"   # first dirty offset per partition
TOPICS_FILE = "pylog-topics.json"                          # pylog's topic metadata (copy per dir)
BROKER_CONFIGS_FILE = "pylog-broker-configs.json"          # dynamic broker configs (copy per dir)
SCRAM_CREDENTIALS_FILE = "pylog-scram-credentials.json"    # users' SCRAM credentials (copy per dir)
ACLS_FILE = "pylog-acls.json"                              # the authorizer's ACLs (copy per dir)
CLIENT_QUOTAS_FILE = "pylog-client-quotas.json"            # client quotas (copy per dir)
SPARK_DIR = "pylog-spark"           # the Spark sink's staged batches and streaming sink state
TABLES_DIR = "__tables"             # topics as tables: the local Iceberg catalog and warehouse
SHARE_GROUPS_DIR = "share-groups"   # share groups' state (pylog.coordinator.share_group)
# --- partition dir ---
PARTITION_METADATA_FILE = "partition.metadata"             # Kafka's "version: 0 / topic_id: ..."

#: A standalone Log's own state (recovery point, log start offset, clean shutdown).
LOG_STATE_FILE = "pylog-log-state"

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.[a-z]+)(\.deleted|\.cleaned|\.swap)?$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def filename_prefix_from_offset(offset: int) -> str:
    """``42`` -> ``00000000000000000042``."""
    if offset < 0:
        raise ValueError(f"segment base offset {offset} is negative")
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int | None:
    """The base offset a segment file name encodes, or None if it is not one."""
    match = _SEGMENT_FILE.match(name)
    return int(match.group(1)) if match else None


def log_file(directory: str, base_offset: int) -> str:
    return os.path.join(directory, filename_prefix_from_offset(base_offset) + LOG_SUFFIX)


def index_file(directory: str, base_offset: int) -> str:
    return os.path.join(directory, filename_prefix_from_offset(base_offset) + INDEX_SUFFIX)


def time_index_file(directory: str, base_offset: int) -> str:
    return os.path.join(directory, filename_prefix_from_offset(base_offset) + TIME_INDEX_SUFFIX)


def txn_index_file(directory: str, base_offset: int) -> str:
    return os.path.join(directory, filename_prefix_from_offset(base_offset) + TXN_INDEX_SUFFIX)


def snapshot_file(directory: str, offset: int) -> str:
    """The producer-state snapshot taken at `offset` (Kafka's ``<offset>.snapshot``)."""
    return os.path.join(directory, filename_prefix_from_offset(offset) + SNAPSHOT_SUFFIX)


def partition_dir_name(topic: str, partition: int) -> str:
    """``clicks``, 3 -> ``clicks-3`` (Kafka's topic-partition directory)."""
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``clicks-3`` -> (``clicks``, 3); None for anything else."""
    match = _PARTITION_DIR.match(name)
    return (match.group(1), int(match.group(2))) if match else None


def fsync_dir(path: str) -> None:
    """fsync a directory so that entries created or renamed in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, durably: each directory created is
    fsync'ed into its parent, so a power loss cannot take away a directory
    (and everything fsync'ed inside it) that was already in use."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    make_dirs(parent)
    try:
        os.mkdir(path)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
    fsync_dir(parent)


def renamed_dir_name(topic: str, partition: int, unique_id: str, suffix: str) -> str:
    """Kafka's name for a partition dir being deleted or set aside:
    ``<topic>-<partition>.<unique id><suffix>``, the topic cut short so that the
    name fits in 255 bytes (a 249-character topic would not)."""
    tail = f"-{partition}.{unique_id}{suffix}"
    return topic[: max(1, 255 - len(tail))] + tail


def write_file_atomically(path: str, data: bytes, *, sync: bool = True,
                          sync_dir: bool | None = None, mode: int = 0o644) -> None:
    """Writes `path` as Kafka writes its checkpoints: ``<path>.tmp``, fsync, rename
    over `path`, fsync of the directory. A crash leaves the old or the new file,
    never a mix (a stray ``.tmp`` is ignored by readers).

    Every small state file pylog writes goes through here (checkpoints, the
    topic table, producer ids and snapshots, a standalone Log's state), so the
    durability tests' fault layer sees each of them. ``sync_dir=False`` leaves
    the directory fsync to the caller (a Log's next flush covers a new snapshot).
    ``mode``: the new file's permissions (0600 for secrets: SCRAM credentials)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if mode & 0o077 == 0:
            os.fchmod(fd, mode)         # private: even a stale .tmp's older mode goes
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync if sync_dir is None else sync_dir:
        fsync_dir(os.path.dirname(path) or ".")
