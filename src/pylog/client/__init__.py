"""Kafka's client API over an in-process store: Producer, Consumer and ShareConsumer.

Uses the storage layer (logs, topics, producer ids) and the coordinator
(groups, committed offsets) through their public names.
"""

from .consumer import Consumer, ConsumerRecord
from .producer import Producer, RecordMetadata
from .share_consumer import AcknowledgeType, ShareConsumer, ShareRecord

__all__ = ["AcknowledgeType", "Consumer", "ConsumerRecord", "Producer", "RecordMetadata",
           "ShareConsumer", "ShareRecord"]
