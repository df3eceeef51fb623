"""Names every layer shares: TopicPartition and the config-definition machinery.

Imports nothing of pylog but :mod:`pylog.errors` (Kafka's ``common`` package).
"""

from .config import ConfigDef, ConfigMapping
from .topic_partition import TopicPartition, as_offset

__all__ = ["ConfigDef", "ConfigMapping", "TopicPartition", "as_offset"]
