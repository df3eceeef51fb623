"""Replaying an internal topic (__consumer_offsets, __transaction_state) at open.

A coordinator's state is the last record of each key of its topic: it reads every batch
of every online partition once, in offset order, and applies the records itself.
"""

from __future__ import annotations

from collections.abc import Iterator

from pylog.errors import KafkaStorageError

__all__ = ["internal_batches"]

#: Bytes asked of one read while replaying.
_READ_BYTES = 1 << 20


def internal_batches(store, topic: str) -> Iterator[tuple[object, int]]:
    """(batch, start) for every batch of `topic`'s online partitions, in offset order;
    `start` is the offset the replay has reached, so records of the batch below it (a
    batch a read began inside) were applied already. Partitions whose dir is offline
    are skipped: the storage layer reports them."""
    for p in range(store.partition_count(topic) or 0):
        try:
            lg = store.log(topic, p)
        except KafkaStorageError:
            continue
        offset = lg.log_start_offset
        while offset < lg.log_end_offset:
            batches = lg.read(offset, _READ_BYTES).batches()
            if not batches:
                break
            for batch in batches:
                yield batch, offset
                offset = batch.last_offset + 1
