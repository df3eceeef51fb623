"""Kafka's small log-dir files, byte for byte (docs/FORMAT.md, section 11).

- offset checkpoints (``recovery-point-offset-checkpoint``,
  ``log-start-offset-checkpoint``): ``0\\n<count>\\n`` then one
  ``<topic> <partition> <offset>\\n`` line per partition (Kafka's
  ``CheckpointFile`` with ``OffsetCheckpointFile``'s formatter);
- the clean-shutdown marker ``.kafka_cleanshutdown``:
  ``{"version":0,"brokerEpoch":<n>}``;
- ``meta.properties`` (KRaft v1: ``version``, ``cluster.id``, ``node.id``,
  ``directory.id``);
- ``partition.metadata`` in each partition dir: ``version: 0\\ntopic_id: <id>\\n``.

Every write goes through :func:`pylog.files.write_file_atomically`
(``.tmp``, fsync, rename, fsync of the directory). Readers are strict: a
wrong version, a bad line or a count that does not match raises
CorruptCheckpointError naming the file and the line.
"""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from collections.abc import Mapping

from pylog.errors import CorruptCheckpointError

from . import files

__all__ = ["read_offset_checkpoint", "write_offset_checkpoint", "format_offset_checkpoint",
           "read_clean_shutdown", "write_clean_shutdown", "delete_clean_shutdown", "read_properties", "write_properties",
           "MetaProperties", "read_partition_metadata", "write_partition_metadata", "random_uuid"]

CHECKPOINT_VERSION = 0
META_PROPERTIES_VERSION = 1


def random_uuid() -> str:
    """A Kafka ``Uuid`` as Kafka prints it: 16 random bytes, URL-safe base64, no padding.

    Like Kafka, never returns an id that starts with '-' (it would read as a
    command-line option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


# ---------------------------------------------------------------- offset checkpoints

def format_offset_checkpoint(entries: Mapping[tuple[str, int], int]) -> bytes:
    """The exact bytes of a Kafka offset checkpoint; entries sorted by topic, partition."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_offset_checkpoint(path: str, entries: Mapping[tuple[str, int], int]) -> None:
    files.write_file_atomically(path, format_offset_checkpoint(entries))


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """The entries of a checkpoint file; {} if it does not exist."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"checkpoint {path} is not UTF-8 text: {exc}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CorruptCheckpointError(f"checkpoint {path} is truncated: {len(lines)} lines, expected "
                                     f"a version line and a count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(f"checkpoint {path} has version {lines[0].strip()!r}, "
                                     f"expected {CHECKPOINT_VERSION}")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise CorruptCheckpointError(f"checkpoint {path}, line 2: count {lines[1]!r} is not a "
                                     f"number") from None
    entries: dict[tuple[str, int], int] = {}
    for number, line in enumerate(lines[2:], start=3):
        fields = line.split()
        if len(fields) != 3:
            raise CorruptCheckpointError(f"checkpoint {path}, line {number}: {line!r} is not "
                                         f"'topic partition offset'")
        try:
            entries[(fields[0], int(fields[1]))] = int(fields[2])
        except ValueError:
            raise CorruptCheckpointError(f"checkpoint {path}, line {number}: {line!r} has a "
                                         f"non-numeric partition or offset") from None
    if len(lines) - 2 != count:
        raise CorruptCheckpointError(f"checkpoint {path} says {count} entries but has "
                                     f"{len(lines) - 2}")
    return entries


# -------------------------------------------------------------- clean-shutdown marker

def write_clean_shutdown(log_dir: str, broker_epoch: int = -1) -> None:
    body = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":"))
    files.write_file_atomically(os.path.join(log_dir, files.CLEAN_SHUTDOWN_FILE), body.encode())


def read_clean_shutdown(log_dir: str) -> bool:
    """Whether the marker exists (its content is not needed to decide)."""
    return os.path.exists(os.path.join(log_dir, files.CLEAN_SHUTDOWN_FILE))


def delete_clean_shutdown(log_dir: str) -> None:
    """Deletes the marker durably, so a crash from here on counts as unclean."""
    try:
        os.remove(os.path.join(log_dir, files.CLEAN_SHUTDOWN_FILE))
    except FileNotFoundError:
        return
    files.fsync_dir(log_dir)


# ------------------------------------------------------------------ properties files

def read_properties(path: str) -> dict[str, str]:
    """A Java properties file of ``key=value`` lines (``#`` comments); the subset Kafka writes."""
    props: dict[str, str] = {}
    with open(path, "rb") as f:
        raw_lines = f.read().splitlines()
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(f"{path}, line {number}: not UTF-8 text ({exc.reason} "
                                         f"at byte {exc.start}): {raw[:40]!r}") from None
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CorruptCheckpointError(f"{path}, line {number}: {line!r} is not key=value")
        props[key.strip()] = value.strip()
    return props


def write_properties(path: str, props: Mapping[str, str]) -> None:
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y")
    body = "#\n#" + stamp + "\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    files.write_file_atomically(path, body.encode("utf-8"))


class MetaProperties:
    """``meta.properties`` (Kafka's MetaProperties, version 1)."""

    __slots__ = ("cluster_id", "node_id", "directory_id")

    def __init__(self, cluster_id: str, node_id: int, directory_id: str) -> None:
        self.cluster_id = cluster_id
        self.node_id = node_id
        self.directory_id = directory_id

    @classmethod
    def read(cls, log_dir: str) -> MetaProperties | None:
        path = os.path.join(log_dir, files.META_PROPERTIES_FILE)
        if not os.path.exists(path):
            return None
        props = read_properties(path)
        version = props.get("version")
        if version not in ("0", "1"):
            raise CorruptCheckpointError(f"{path}: unsupported version {version!r}")
        node = props.get("node.id", props.get("broker.id"))
        if node is None or "cluster.id" not in props:
            raise CorruptCheckpointError(f"{path}: missing cluster.id or node.id")
        try:
            node_id = int(node)
        except ValueError:
            raise CorruptCheckpointError(f"{path}: node.id {node!r} is not a number") from None
        return cls(props["cluster.id"], node_id, props.get("directory.id", ""))

    def write(self, log_dir: str) -> None:
        write_properties(os.path.join(log_dir, files.META_PROPERTIES_FILE), {
            "version": str(META_PROPERTIES_VERSION), "cluster.id": self.cluster_id,
            "node.id": str(self.node_id), "directory.id": self.directory_id})

    def __repr__(self) -> str:
        return (f"MetaProperties(cluster_id={self.cluster_id!r}, node_id={self.node_id}, "
                f"directory_id={self.directory_id!r})")


# ------------------------------------------------------------------ partition.metadata

def write_partition_metadata(partition_dir: str, topic_id: str, *, sync: bool = False) -> None:
    body = f"version: 0\ntopic_id: {topic_id}\n".encode("ascii")
    files.write_file_atomically(os.path.join(partition_dir, files.PARTITION_METADATA_FILE), body,
                                sync=sync)


def read_partition_metadata(partition_dir: str) -> str | None:
    """The topic id in ``partition.metadata``, or None if the file is missing or unreadable."""
    try:
        with open(os.path.join(partition_dir, files.PARTITION_METADATA_FILE), encoding="ascii") as f:
            fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    return fields.get("topic_id") if fields.get("version") == "0" else None
