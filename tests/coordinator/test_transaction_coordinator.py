"""The transaction coordinator over a real store (no broker): its state survives a
reopen from __transaction_state, epochs are bumped and fence, ids expire, and requests
out of order get Kafka's errors."""

from __future__ import annotations

import pytest

import pylog
from pylog.coordinator.transaction_state import TxnState
from pylog.errors import (
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
)


def test_state_survives_a_reopen_and_epochs_bump(tmp_path):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 2)
        txn = store.transactions
        pid, epoch = txn.init_producer_id("app", 60_000)
        assert epoch == 0
        txn.add_partitions("app", pid, epoch, [("t", 0), ("t", 1)])
        assert txn.describe("app").state == TxnState.ONGOING
    with pylog.open(str(tmp_path)) as store:
        meta = store.transactions.describe("app")
        assert (meta.producer_id, meta.producer_epoch, meta.state, meta.partitions) == \
            (pid, 0, TxnState.ONGOING, {("t", 0), ("t", 1)})
        # A new producer of the id: the open transaction is aborted, the epoch bumped
        # twice (fence, then the new producer's), as Kafka's coordinator does.
        assert store.transactions.init_producer_id("app", 60_000) == (pid, 2)
        assert store.transactions.describe("app").state == TxnState.EMPTY
        with pytest.raises(ProducerFencedError):
            store.transactions.add_partitions("app", pid, 0, [("t", 0)])
        for part in range(2):
            lg = store.log("t", part)
            assert lg.log_end_offset == 1        # the abort's marker (an empty transaction)


def test_requests_out_of_order_get_kafkas_errors(tmp_path):
    with pylog.open(str(tmp_path), transaction_max_timeout_ms=10_000) as store:
        store.create_topic("t", 1)
        txn = store.transactions
        with pytest.raises(InvalidTransactionTimeoutError, match="transaction.max.timeout.ms"):
            txn.init_producer_id("app", 20_000)
        with pytest.raises(ValueError, match="must not be empty"):
            txn.init_producer_id("", 1_000)
        pid, epoch = txn.init_producer_id("app", 1_000)
        with pytest.raises(InvalidTxnStateError, match="Empty"):
            txn.end_txn("app", pid, epoch, True)
        with pytest.raises(InvalidProducerIdMappingError):
            txn.add_partitions("app", pid + 1, epoch, [("t", 0)])
        with pytest.raises(pylog.errors.UnknownTopicOrPartitionError, match="t-5"):
            txn.add_partitions("app", pid, epoch, [("t", 5)])
        txn.add_partitions("app", pid, epoch, [("t", 0)])
        txn.end_txn("app", pid, epoch, True)
        txn.end_txn("app", pid, epoch, True)            # a retry: answered the same
        with pytest.raises(InvalidTxnStateError, match="CompleteCommit"):
            txn.end_txn("app", pid, epoch, False)


def test_a_timed_out_transaction_is_aborted_and_ids_expire(tmp_path):
    with pylog.open(str(tmp_path), transactional_id_expiration_ms=1_000) as store:
        store.create_topic("t", 1)
        txn = store.transactions
        pid, epoch = txn.init_producer_id("app", 1_000)
        txn.add_partitions("app", pid, epoch, [("t", 0)])
        started = txn.describe("app").txn_start_ms
        txn.abort_timed_out(now=started + 999)
        assert txn.describe("app").state == TxnState.ONGOING
        txn.abort_timed_out(now=started + 1_000)
        meta = txn.describe("app")
        assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)
        # The fenced producer's abort is answered (Kafka: the coordinator did it).
        txn.end_txn("app", pid, epoch, False)
        txn.remove_expired(now=meta.last_update_ms + 999)
        assert txn.describe("app") is not None
        txn.remove_expired(now=meta.last_update_ms + 1_000)
        assert txn.describe("app") is None
    with pylog.open(str(tmp_path)) as store:
        assert store.transactions.describe("app") is None      # the tombstone was replayed
        pid2, epoch2 = store.transactions.init_producer_id("app", 1_000)
        assert epoch2 == 0 and pid2 != pid


def test_add_partitions_answers_before_its_fsync_and_the_first_data_waits_for_it(tmp_path):
    """AddPartitionsToTxn (v1) answers once its Ongoing record is appended; the first
    append of the transaction (verify_partition) returns only once that record is
    durable. A gate held on the state log's fsyncs shows both."""
    import threading
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 1)
        txn = store.transactions
        pid, epoch = txn.init_producer_id("app", 60_000)
        state = txn._state_log("app")
        gate = threading.Event()
        real_flush = state.flush

        def gated_flush(offset=None):
            gate.wait(60)
            real_flush(offset)
        state.flush = gated_flush
        try:
            txn.add_partitions("app", pid, epoch, [("t", 0)])     # the gate is shut: no fsync
            end = state.log_end_offset
            assert state.recovery_point < end
            verified = threading.Thread(target=txn.verify_partition,
                                        args=("app", pid, epoch, "t", 0))
            verified.start()
            verified.join(0.5)
            assert verified.is_alive(), "the first data did not wait for the Ongoing fsync"
            gate.set()
            verified.join(60)
            assert not verified.is_alive()
            assert state.recovery_point >= end
        finally:
            gate.set()
            state.flush = real_flush
