"""The storage layer: Kafka's log, segments, indexes and log dirs.

Knows bytes, files, partitions and topics; never imports the client or
coordinator packages (docs/ARCHITECTURE.md, "What may import what"). The
layers above use these names only.
"""

from .config import BROKER_CONFIGS, TOPIC_CONFIG_PREFIXES, TOPIC_CONFIGS, BrokerConfig, LogConfig, topic_config_def
from .dynamic_config import (
    CLUSTER_DEFAULT,
    DYNAMIC_BROKER_CONFIGS,
    PER_BROKER,
    broker_config_def,
    broker_config_synonyms,
)
from .file_slice import FileSlice
from .files import SHARE_GROUPS_DIR, SPARK_DIR, TABLES_DIR, fsync_dir, make_dirs, write_file_atomically
from .info import AppendInfo, RecoveryReport, SegmentRecovery, TimestampOffset
from .log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
    default_engine,
)
from .manager import LogManager
from .reader import LogDirsReader, NotALogDirError, PartitionReader
from .startup import StartupReport
from .topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    PartitionDescription,
    TopicDescription,
    validate_topic_name,
)

__all__ = [
    "AppendInfo",
    "BROKER_CONFIGS",
    "BrokerConfig",
    "CLUSTER_DEFAULT",
    "DYNAMIC_BROKER_CONFIGS",
    "EARLIEST_TIMESTAMP",
    "FileSlice",
    "INTERNAL_TOPICS",
    "LATEST_TIMESTAMP",
    "Log",
    "LogConfig",
    "LogDirsReader",
    "LogManager",
    "MAX_TIMESTAMP",
    "NotALogDirError",
    "OFFSETS_TOPIC",
    "PER_BROKER",
    "PartitionReader",
    "PartitionDescription",
    "RecoveryReport",
    "SHARE_GROUPS_DIR",
    "SPARK_DIR",
    "TABLES_DIR",
    "SegmentRecovery",
    "StartupReport",
    "TOPIC_CONFIGS",
    "TOPIC_CONFIG_PREFIXES",
    "topic_config_def",
    "TimestampOffset",
    "TopicDescription",
    "broker_config_def",
    "broker_config_synonyms",
    "default_engine",
    "fsync_dir",
    "make_dirs",
    "validate_topic_name",
    "write_file_atomically",
]
