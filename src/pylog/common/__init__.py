"""Names every layer shares: TopicPartition and the config-definition machinery.

Imports nothing of pylog but :mod:`pylog.errors` (Kafka's ``common`` package).
"""

from .config import ConfigDef, ConfigMapping
from .topic_partition import TopicPartition

__all__ = ["ConfigDef", "ConfigMapping", "TopicPartition"]
