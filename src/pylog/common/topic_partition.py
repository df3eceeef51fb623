"""TopicPartition: the (topic, partition) pair every client API speaks, and
``as_offset``, the check of an offset given to one."""

from __future__ import annotations

import operator
from typing import NamedTuple

__all__ = ["TopicPartition", "as_offset"]


class TopicPartition(NamedTuple):
    """A partition of a topic. A plain tuple, so ``("t", 0)`` works wherever one is expected."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def as_offset(value, what: str = "offset") -> int:
    """`value` as an offset: an int (or any integer type, numpy's included, but not a
    bool); anything else is a TypeError naming it (a str compared with the log's
    offsets said only "'<' not supported"). Callers on hot paths take the common
    case first (``type(offset) is int``) and call this for the rest."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__} {value!r}") from None
