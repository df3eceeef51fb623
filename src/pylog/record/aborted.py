"""Which batches of a read belong to aborted transactions: the read_committed filter
of pylog's Consumer and of a share group with ``share.isolation.level=read_committed``."""

from __future__ import annotations

__all__ = ["AbortedBatches"]


class AbortedBatches:
    """read_committed over one read of one partition, batch by batch (Kafka's
    CompletedFetch): ``self(batch)`` is True for a batch of an aborted transaction.
    `aborted` is what ``Log.aborted_transactions`` answers for the read (first offset and
    producer id of each).
    From an aborted transaction's first offset on, its producer's transactional
    batches are skipped until its ABORT marker. (poll_arrow does this in C.)"""

    __slots__ = ("queue", "next", "open")

    def __init__(self, aborted) -> None:
        self.queue = sorted((t.first_offset, t.producer_id) for t in aborted)
        self.next = 0
        self.open: set[int] = set()

    def __call__(self, batch) -> bool:
        pid = batch.producer_id
        if pid < 0:
            return False
        queue, last = self.queue, batch.last_offset
        while self.next < len(queue) and queue[self.next][0] <= last:
            self.open.add(queue[self.next][1])
            self.next += 1
        if batch.is_control:
            if batch.control_type == "abort":
                self.open.discard(pid)
            return False
        return batch.is_transactional and pid in self.open
