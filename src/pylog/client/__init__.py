"""Kafka's client API over an in-process store: Producer and Consumer.

Uses the storage layer (logs, topics, producer ids) and the coordinator
(groups, committed offsets) through their public names.
"""

from .consumer import Consumer, ConsumerRecord
from .producer import Producer, RecordMetadata

__all__ = ["Consumer", "ConsumerRecord", "Producer", "RecordMetadata"]
