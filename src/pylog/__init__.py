"""pylog: a Kafka-compatible log storage engine for Python with a C core."""

from . import errors, records
from ._core.crc import crc32c, crc32c_implementation
from .config import LogConfig
from .consumer import Consumer, ConsumerRecord
from .errors import CorruptRecordError, PylogError
from .file_slice import FileSlice
from .info import AppendInfo, RecoveryReport, TimestampOffset
from .log import Log, default_engine
from .manager import LogManager, StartupReport
from .manager import open  # noqa: A004 - pylog.open(...) is the friendly entry point
from .offsets import OffsetAndMetadata
from .producer import Producer, RecordMetadata
from .topic_partition import TopicPartition
from .topics import TopicDescription

__version__ = "0.1.0"


def io_engine(kind: str = "auto") -> str:
    """Which I/O engine a Log with ``pylog.io.engine=kind`` uses, and why.

    For example ``"io_uring (liburing 2.5, queue depth 64)"`` or
    ``"portable (pwritev): io_uring_queue_init failed: Operation not permitted"``.
    The ``PYLOG_IO_ENGINE`` environment variable overrides ``auto``.
    """
    return default_engine(kind).why


__all__ = [
    "AppendInfo",
    "Consumer",
    "ConsumerRecord",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "CorruptRecordError",
    "FileSlice",
    "Log",
    "LogConfig",
    "LogManager",
    "OffsetAndMetadata",
    "PylogError",
    "RecoveryReport",
    "StartupReport",
    "TimestampOffset",
    "TopicDescription",
    "__version__",
    "crc32c",
    "crc32c_implementation",
    "errors",
    "io_engine",
    "open",
    "records",
]
