"""``pylog export-to-kafka``: pylog's side of moving a topic to an Apache Kafka broker
(pylog.storage.kafka_export)."""

from __future__ import annotations

import csv
import os
import sys

import click

__all__ = ["export_to_kafka"]


@click.command("export-to-kafka",
               help="Hand a topic to a stopped Apache Kafka broker, unconverted: copies its "
                    "segment files into the broker's log dir (the topic created there first with "
                    "the same partitions, Kafka then stopped cleanly), holding the store's lock "
                    "and Kafka's for the whole copy; producer state stays behind. The pylog "
                    "store must be closed cleanly. Committed "
                    "offsets of the topic's groups go to <group>.csv files for "
                    "kafka-consumer-groups.sh --reset-offsets --from-file.")
@click.option("--log-dirs", required=True, metavar="DIR[,DIR...]", help="pylog's log dirs")
@click.option("--topic", required=True)
@click.option("--kafka-log-dir", required=True, type=click.Path(file_okay=False),
              help="the Kafka broker's log dir holding the topic's partition dirs")
@click.option("--offsets-dir", type=click.Path(file_okay=False),
              help="where to write <group>.csv committed offsets")
def export_to_kafka(log_dirs, topic, kafka_log_dir, offsets_dir) -> int:
    from pylog.coordinator.offsets import read_committed_offsets
    from pylog.errors import PylogError
    from pylog.storage.kafka_export import ExportError, check_pylog_dirs, export_topic
    from pylog.storage.reader import LogDirsReader
    try:
        reader = LogDirsReader(log_dirs)
        check_pylog_dirs(reader)
        written = []
        if offsets_dir:
            os.makedirs(offsets_dir, exist_ok=True)
            offsets = read_committed_offsets(reader)    # read-only: the store stays as it is
            for group in offsets.groups():
                rows = sorted((partition, om.offset) for (t, partition), om
                              in offsets.group(group).items() if t == topic)
                if rows:
                    path = os.path.join(offsets_dir, f"{group}.csv")
                    with open(path, "w", newline="") as f:
                        csv.writer(f).writerows((topic, p, o) for p, o in rows)
                    written.append((group, path))
        report = export_topic(log_dirs, topic, kafka_log_dir)
    except (ExportError, PylogError, OSError) as exc:
        print(f"pylog export-to-kafka: {exc}", file=sys.stderr)
        return 2
    print(f"copied {report.segments} segments ({report.bytes:,} bytes) of {report.partitions} "
          f"partitions of {topic!r} into {kafka_log_dir}; end offsets {report.end_offsets}. "
          "Start Kafka: it serves them at their offsets, with no producer state (new "
          "producers append as to a new topic).")
    for group, path in written:
        print(f"group {group}: kafka-consumer-groups.sh --bootstrap-server HOST:9092 --group "
              f"{group} --reset-offsets --from-file {path} --execute")
    return 0
