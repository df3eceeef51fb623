"""pylog: a Kafka-compatible log storage engine for Python with a C core.

The public API. The layers behind it (docs/ARCHITECTURE.md): ``record``
(batch bytes), ``storage`` (logs and log dirs), ``coordinator`` (groups and
committed offsets), ``client`` (Producer, Consumer), ``store`` (``Store``, the store
``open`` returns), over the compiled core ``_core``.
"""

from . import errors
from . import record as records
from ._core.crc import crc32c, crc32c_implementation
from .client import (AcknowledgeType, Consumer, ConsumerRecord, Producer, RecordMetadata,
                     ShareConsumer, ShareRecord)
from .common import TopicPartition
from .coordinator import OffsetAndMetadata
from .errors import CorruptRecordError, PylogError
from .storage import (
    AppendInfo,
    FileSlice,
    Log,
    LogConfig,
    RecoveryReport,
    StartupReport,
    TimestampOffset,
    TopicDescription,
    default_engine,
)
from .store import (
    Store,
    open,  # noqa: A004 - pylog.open(...) is the friendly entry point
)

__version__ = "0.1.0"


def io_engine(kind: str = "auto") -> str:
    """Which I/O engine a Log with ``pylog.io.engine=kind`` uses, and why.

    For example ``"io_uring (liburing 2.5, queue depth 64)"`` or
    ``"portable (pwritev): io_uring_queue_init failed: Operation not permitted"``.
    The ``PYLOG_IO_ENGINE`` environment variable overrides ``auto``.
    """
    return default_engine(kind).why


def tls_engine(ktls: bool = True) -> str:
    """Which record layer the broker's TLS listeners use, and why: kernel TLS, which
    keeps Fetch zero-copy (``"kTLS (kernel TLS (the tls module) with OpenSSL 3.0.x):
    ..."``), or OpenSSL in user space, copying (``"user space (OpenSSL 3.0.x): no kTLS:
    the kernel has no TLS upper layer: ..."``). ``ktls``: the broker's
    ``pylog.ssl.ktls.enable``."""
    from .broker.tls import tls_engine as engine
    return engine(ktls)


def __getattr__(name: str):
    # The broker (and its generated protocol codec) loads on first use only.
    if name == "Broker":
        from .broker import Broker
        return Broker
    raise AttributeError(f"module 'pylog' has no attribute {name!r}")


__all__ = [
    "AcknowledgeType",
    "ShareConsumer",
    "ShareRecord",
    "AppendInfo",
    "Broker",
    "Consumer",
    "ConsumerRecord",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "CorruptRecordError",
    "FileSlice",
    "Log",
    "LogConfig",
    "OffsetAndMetadata",
    "PylogError",
    "RecoveryReport",
    "StartupReport",
    "Store",
    "TimestampOffset",
    "TopicDescription",
    "__version__",
    "crc32c",
    "crc32c_implementation",
    "errors",
    "io_engine",
    "tls_engine",
    "open",
    "records",
]
