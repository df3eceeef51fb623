"""pylog: a Kafka-compatible log storage engine for Python with a C core."""

from . import errors, records
from ._core.crc import crc32c, crc32c_implementation
from .errors import CorruptRecordError, PylogError

__version__ = "0.1.0"

__all__ = [
    "CorruptRecordError",
    "PylogError",
    "__version__",
    "crc32c",
    "crc32c_implementation",
    "errors",
    "records",
]
