"""Handing a pylog topic to an Apache Kafka broker, unconverted (``pylog export-to-kafka``).

pylog's segment files are Kafka's (docs/FORMAT.md), so a topic moves by copying them:

1. the topic is created in Kafka with the same partition count (Kafka gives it its topic
   id and an empty partition dir per partition), and Kafka is stopped;
2. :func:`export_topic` checks both sides and copies each partition's ``.log``,
   ``.index``, ``.timeindex`` and ``.snapshot`` files over Kafka's empty ones, keeping
   Kafka's ``partition.metadata`` (its topic id) and writing pylog's log start offset
   into Kafka's ``log-start-offset-checkpoint``;
3. Kafka starts: its recovery point for the partition is 0, so it validates and
   re-indexes every copied segment, then serves every record at its original offset.

Refused, with the reason: a pylog store that is open or was not shut down cleanly (its
tail could hold a torn batch that only pylog's recovery would cut), a Kafka log dir that
is locked (Kafka running), a Kafka partition dir that is missing or already holds
records, a partition count that differs.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from pylog.errors import PylogError

from . import files
from .checkpoints import read_offset_checkpoint, write_offset_checkpoint
from .log_dir import lock_holder
from .reader import LogDirsReader

__all__ = ["ExportError", "ExportReport", "export_topic"]

_SEGMENT_SUFFIXES = (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX,
                     files.SNAPSHOT_SUFFIX)


class ExportError(PylogError):
    """The export cannot go ahead; the message says why and what to do."""


@dataclass
class ExportReport:
    topic: str
    partitions: int = 0
    segments: int = 0
    bytes: int = 0
    end_offsets: dict[int, int] = field(default_factory=dict)


def check_pylog_dirs(reader: LogDirsReader) -> None:
    for d in reader.paths:
        holder = lock_holder(d)
        if holder is not None:
            raise ExportError(f"pylog log dir {d} is open in another process (its .lock is held "
                              f"by {holder}): close the store or stop pylog serve first")
        if not os.path.exists(os.path.join(d, files.CLEAN_SHUTDOWN_FILE)):
            raise ExportError(
                f"pylog log dir {d} was not shut down cleanly (no {files.CLEAN_SHUTDOWN_FILE}): "
                "open and close it with pylog once (recovery cuts any torn tail), then export")


def export_topic(log_dirs, topic: str, kafka_log_dir: str) -> ExportReport:
    """Copies `topic`'s segments from pylog's log dirs into a stopped Kafka broker's log dir
    where the topic was created with the same partition count."""
    reader = LogDirsReader(log_dirs)
    check_pylog_dirs(reader)
    partitions = reader.topics().get(topic)
    if partitions is None:
        raise ExportError(f"topic {topic!r} does not exist in {','.join(reader.paths)}")
    kafka_log_dir = os.path.abspath(kafka_log_dir)
    if not os.path.isfile(os.path.join(kafka_log_dir, files.META_PROPERTIES_FILE)):
        raise ExportError(f"{kafka_log_dir} is not a Kafka log dir (no meta.properties)")
    holder = lock_holder(kafka_log_dir)
    if holder is not None:
        raise ExportError(f"Kafka log dir {kafka_log_dir} is locked (by {holder}): stop the Kafka "
                          "broker first")
    targets = []
    for p in range(partitions):
        target = os.path.join(kafka_log_dir, files.partition_dir_name(topic, p))
        if not os.path.isfile(os.path.join(target, files.PARTITION_METADATA_FILE)):
            raise ExportError(
                f"{target} is missing (or has no partition.metadata): create the topic in Kafka "
                f"first with the same {partitions} partitions, e.g. kafka-topics.sh --create "
                f"--topic {topic} --partitions {partitions}, then stop Kafka")
        for name in os.listdir(target):
            if name.endswith(files.LOG_SUFFIX) and os.path.getsize(os.path.join(target, name)):
                raise ExportError(f"{target} already holds records ({name}): export only into "
                                  "a topic Kafka has just created")
        targets.append(target)
    extra = os.path.join(kafka_log_dir, files.partition_dir_name(topic, partitions))
    if os.path.isdir(extra):
        raise ExportError(f"Kafka's {topic!r} has more than the {partitions} partitions pylog's has")

    report = ExportReport(topic)
    starts = {}
    for p, target in enumerate(targets):
        source = reader.partition(topic, p)
        for name in os.listdir(target):           # Kafka's empty segment 0 and its indexes
            if name != files.PARTITION_METADATA_FILE:
                os.unlink(os.path.join(target, name))
        for name in sorted(os.listdir(source.directory)):
            if name.endswith(_SEGMENT_SUFFIXES):
                src = os.path.join(source.directory, name)
                shutil.copy2(src, os.path.join(target, name))
                report.bytes += os.path.getsize(src)
                report.segments += name.endswith(files.LOG_SUFFIX)
        files.fsync_dir(target)
        starts[(topic, p)] = source.log_start_offset()
        report.end_offsets[p] = source.log_end_offset()
        report.partitions += 1
    checkpoint = os.path.join(kafka_log_dir, files.LOG_START_OFFSET_CHECKPOINT_FILE)
    entries = read_offset_checkpoint(checkpoint)
    entries.update(starts)
    write_offset_checkpoint(checkpoint, entries)
    return report
