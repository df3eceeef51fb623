"""TopicPartition: the (topic, partition) pair every client API speaks."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    """A partition of a topic. A plain tuple, so ``("t", 0)`` works wherever one is expected."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
