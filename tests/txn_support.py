"""Transactional producers against a Log through the storage API (the coordinator's side
is another helper's work): what a transaction coordinator and a transactional producer
would do to one partition, step by step."""

from __future__ import annotations

from pylog.record import encode_batch


def txn_batch(pid: int, epoch: int, seq: int, values, keys=None, *, transactional: bool = True,
              timestamp=None, compression: str = "none") -> bytes:
    """One batch of a transactional (or, with transactional=False, idempotent) producer."""
    return encode_batch(list(values), keys, timestamp, producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, transactional=transactional, compression=compression)


class TxnProducer:
    """A transactional producer's writes to one partition: verification before the first
    batch of each transaction, sequences, and the coordinator's markers."""

    def __init__(self, log, pid: int, epoch: int = 0, coordinator_epoch: int = 0) -> None:
        self.log = log
        self.pid = pid
        self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.seq = 0
        self.open = False

    def send(self, values, keys=None, **kw):
        guard = None
        if not self.open:
            guard = self.log.maybe_start_transaction_verification(self.pid, self.seq, self.epoch)
        info = self.log.append(txn_batch(self.pid, self.epoch, self.seq, values, keys, **kw),
                               verification_guard=guard)
        self.seq += len(values)
        self.open = True
        return info

    def end(self, committed: bool, bump: bool = False):
        """The coordinator's marker; `bump` is transactions v2 (KIP-890): the marker
        carries the next epoch, and the producer goes on with it from sequence 0."""
        if bump:
            self.epoch += 1
            self.seq = 0
        info = self.log.write_txn_marker(self.pid, self.epoch, self.coordinator_epoch, committed)
        self.open = False
        return info

    def commit(self, **kw):
        return self.end(True, **kw)

    def abort(self, **kw):
        return self.end(False, **kw)
