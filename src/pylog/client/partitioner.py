"""Choosing a partition for a record, compatible with Kafka's Java producer.

- A record with a key goes to ``(murmur2(key) & 0x7fffffff) % num_partitions``:
  Kafka's hash, seed and constants (``_core/murmur2.h``), so a key lands on the
  same partition as with Kafka's own clients.
- A record without a key is *sticky* (KIP-480, refined by KIP-794): all
  null-key records of a topic go to one partition until a batch's worth of
  bytes (``batch.size``) went there, then the next partition is picked at
  random (``TopicState.produced`` in ``_core/producer.pyx``). Batches fill up
  instead of every partition getting a trickle.

A custom partitioner is any object with ``partition(topic, key, value,
num_partitions) -> int`` (or a plain callable with that signature);
returning None defers to the default rule for that record.
"""

from __future__ import annotations

from typing import Protocol

from pylog._core.producer import key_partition, murmur2, partition_keys

__all__ = ["Partitioner", "DefaultPartitioner", "RoundRobinPartitioner", "key_partition",
           "murmur2", "partition_keys"]


class Partitioner(Protocol):
    def partition(self, topic: str, key: bytes | None, value: bytes | None,
                  num_partitions: int) -> int | None: ...


class DefaultPartitioner:
    """Kafka's built-in partitioner: murmur2 for keys, sticky for null keys."""

    def partition(self, topic: str, key: bytes | None, value: bytes | None,
                  num_partitions: int) -> int | None:
        return None if key is None else key_partition(key, num_partitions)


class RoundRobinPartitioner:
    """Kafka's RoundRobinPartitioner: every record, keyed or not, to the next partition."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, value: bytes | None,
                  num_partitions: int) -> int:
        n = self._next.get(topic, 0)
        self._next[topic] = n + 1
        return n % num_partitions
