"""pylog: a Kafka-compatible log storage engine for Python with a C core.

The public API. The layers behind it (docs/ARCHITECTURE.md): ``record``
(batch bytes), ``storage`` (logs and log dirs), ``coordinator`` (groups and
committed offsets), ``client`` (Producer, Consumer), ``store`` (``Store``, the store
``open`` returns), over the compiled core ``_core``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from . import errors
from .errors import CorruptRecordError, PylogError

if TYPE_CHECKING:
    from . import record as records
    from ._core.crc import crc32c, crc32c_implementation
    from .broker import Broker
    from .client import (AcknowledgeType, Consumer, ConsumerRecord, Producer, RecordMetadata,
                         ShareConsumer, ShareRecord)
    from .common import TopicPartition
    from .coordinator import OffsetAndMetadata
    from .storage import (AppendInfo, FileSlice, Log, LogConfig, RecoveryReport, StartupReport,
                          TimestampOffset, TopicDescription)
    from .store import Store, open  # noqa: A004 - pylog.open(...) is the friendly entry point

# The public names load on first use (PEP 562), so that `import pylog` (and every `pylog`
# command, whose `--help` needs none of them) does not pay for numpy, pyarrow, the
# storage engine, the clients, the broker or its protocol codec until a name is used.
# name -> (module, attribute in it; None: the module itself)
_LAZY = {
    "records": (".record", None),
    "crc32c": ("._core.crc", "crc32c"),
    "crc32c_implementation": ("._core.crc", "crc32c_implementation"),
    "Broker": (".broker", "Broker"),
    **{name: (".client", name) for name in ("AcknowledgeType", "Consumer", "ConsumerRecord",
                                            "Producer", "RecordMetadata", "ShareConsumer",
                                            "ShareRecord")},
    "TopicPartition": (".common", "TopicPartition"),
    "OffsetAndMetadata": (".coordinator", "OffsetAndMetadata"),
    **{name: (".storage", name) for name in ("AppendInfo", "FileSlice", "Log", "LogConfig",
                                             "RecoveryReport", "StartupReport",
                                             "TimestampOffset", "TopicDescription")},
    "Store": (".store", "Store"),
    "open": (".store", "open"),
}

__version__ = "0.1.0"


def io_engine(kind: str = "auto") -> str:
    """Which I/O engine a Log with ``pylog.io.engine=kind`` uses, and why.

    For example ``"io_uring (liburing 2.5, queue depth 64)"`` or
    ``"portable (pwritev): io_uring_queue_init failed: Operation not permitted"``.
    The ``PYLOG_IO_ENGINE`` environment variable overrides ``auto``.
    """
    from .storage import default_engine
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
    if name.startswith("__"):
        raise AttributeError(f"module 'pylog' has no attribute {name!r}")
    if name in _LAZY:
        module, attribute = _LAZY[name]
        loaded = importlib.import_module(module, __name__)
        value = loaded if attribute is None else getattr(loaded, attribute)
    else:
        # A subpackage not yet imported (pylog.storage, pylog.record, ...), as before
        # this module loaded them itself.
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'pylog' has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
