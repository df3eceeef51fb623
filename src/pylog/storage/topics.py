"""Topics: name rules, metadata, and the persisted topic table (docs/FORMAT.md, section 11).

A topic is a name, a Kafka topic id, a partition count and its config
overrides. The table of all topics is kept in ``pylog-topics.json``, one
identical copy at the root of every log dir, each written atomically; the
copy with the highest ``epoch`` wins at startup, so a dir that was offline
while topics changed is brought up to date. Broker-level defaults are not
stored: a topic keeps only what was set for it, and follows the defaults
otherwise, as in Kafka.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pylog.errors import CorruptCheckpointError, InvalidTopicError

from . import files
from .config import topic_config_def

__all__ = ["MAX_NAME_LENGTH", "validate_topic_name", "Topic", "TopicTable",
           "PartitionDescription", "TopicDescription", "OFFSETS_TOPIC", "INTERNAL_TOPICS",
           "config_to_strings"]

#: Kafka's limit (``Topic.MAX_NAME_LENGTH``): room for ``-<partition>`` and Kafka's
#: ``.<uuid>-delete`` suffixes within a 255-byte file name.
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")

OFFSETS_TOPIC = "__consumer_offsets"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state"})

TABLE_VERSION = 1


def validate_topic_name(name: Any) -> str:
    """Returns `name` if Kafka would accept it, else raises InvalidTopicError saying why.

    Kafka's rules (``org.apache.kafka.common.internals.Topic.validate``): 1-249
    characters from ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``. These rules
    also keep every name inside its log dir: no ``/``, no NUL, no ``..``.
    """
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} "
                                f"characters; it has {len(name)}: {name[:20]!r}...")
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not re.match(r"[a-zA-Z0-9._-]", c)})
        raise InvalidTopicError(f"topic name {name!r} is illegal: it contains {''.join(bad)!r}; "
                                f"legal characters are ASCII letters, digits, '.', '_' and '-'")
    return name


def collision_key(name: str) -> str:
    """Kafka warns that '.' and '_' collide in metric names; topics that differ
    only there are refused (``Topic.hasCollision``)."""
    return name.replace(".", "_")


def config_to_strings(config: Mapping[str, Any]) -> dict[str, str]:
    """Parsed config values as the strings a Kafka properties file holds."""
    out: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, tuple | list):
            out[key] = ",".join(value)
        else:
            out[key] = str(value)
    return out


@dataclass(slots=True)
class Topic:
    """One row of the topic table."""

    name: str
    topic_id: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)   # overrides only, as strings

    def to_json(self) -> dict[str, Any]:
        return {"topic_id": self.topic_id, "partitions": self.partitions, "config": self.config}


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    log_dir: str | None              # None: its dir is offline or unknown
    online: bool
    log_start_offset: int | None
    log_end_offset: int | None
    size: int | None                 # bytes of all segments
    segments: int | None
    leader_epoch: int = 0            # the epoch its batches are stamped with (leader_epochs.py)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    internal: bool
    partitions: tuple[PartitionDescription, ...]
    config: dict[str, Any]           # effective config (defaults + overrides)
    overrides: dict[str, str]        # what was set for this topic


class TopicTable:
    """The topic table in memory, and its copies in the log dirs.

    Not thread-safe: the LogManager serialises changes under its lock.
    """

    def __init__(self) -> None:
        self.topics: dict[str, Topic] = {}
        self.epoch = 0

    @staticmethod
    def path(log_dir: str) -> str:
        return os.path.join(log_dir, files.TOPICS_FILE)

    def encode(self) -> bytes:
        body = {"version": TABLE_VERSION, "epoch": self.epoch,
                "topics": {name: t.to_json() for name, t in sorted(self.topics.items())}}
        return (json.dumps(body, indent=1, sort_keys=False) + "\n").encode("utf-8")

    @classmethod
    def read(cls, log_dir: str) -> TopicTable | None:
        """The copy in `log_dir`; None if it has none. Raises CorruptCheckpointError."""
        path = cls.path(log_dir)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            body = json.loads(raw)
            if body.get("version") != TABLE_VERSION:
                raise CorruptCheckpointError(f"{path}: unsupported version {body.get('version')!r}")
            table = cls()
            table.epoch = int(body["epoch"])
            for name, row in body["topics"].items():
                validate_topic_name(name)
                config = {str(k): str(v) for k, v in row.get("config", {}).items()}
                unknown = [k for k in config if topic_config_def(k) is None]
                if unknown:
                    raise CorruptCheckpointError(f"{path}: topic {name!r} has unknown config "
                                                 f"keys {unknown}")
                table.topics[name] = Topic(name, str(row["topic_id"]), int(row["partitions"]), config)
            return table
        except CorruptCheckpointError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CorruptCheckpointError(f"{path} is not a valid topic table: {exc!r}") from None

    def write(self, log_dir: str) -> None:
        files.write_file_atomically(self.path(log_dir), self.encode())
