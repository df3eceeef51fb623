"""Transactions' metadata and its records in ``__transaction_state`` (Kafka's
TransactionMetadata, TransactionState and TransactionLog; docs/FORMAT.md, section 11).

One record per change of a transactional id, in the partition Kafka's coordinator uses
(``abs(javaHashCode(transactional_id)) % transaction.state.log.num.partitions``) of the
compacted internal topic ``__transaction_state``:

- key, ``TransactionLogKey`` version 0: ``int16 version=0 | string transactional_id``;
- value, ``TransactionLogValue`` version 0: ``int16 version=0 | int64 producer_id |
  int16 producer_epoch | int32 transaction_timeout_ms | int8 state |
  [string topic | [int32 partition]] partitions | int64 last_update_timestamp_ms |
  int64 transaction_start_timestamp_ms`` (arrays: an int32 count, -1 for null);
- a null value (tombstone) forgets the id (transactional.id.expiration.ms).

``string`` is an int16 length then UTF-8 bytes (Kafka's non-flexible STRING), so
Kafka's ``kafka-dump-log.sh --transaction-log-decoder`` reads these records.

A transaction of transactions v2 (KIP-890 part 2) is written as a version 1 value, Kafka
4's flexible one: compact arrays and strings (uvarint length + 1) and tagged fields
after the start timestamp: 0 ``PreviousProducerId``, 1 ``NextProducerId`` (the id an
EndTxn hands out when the epoch runs out), 2 ``ClientTransactionVersion`` (int16), each
written only when not its default (-1, -1, 0). Both versions are read.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from pylog.errors import CorruptRecordError
from pylog.common.varint import uvarint_bytes

from .offsets import _Reader, _string, partition_for_group

__all__ = ["TxnState", "TransactionMetadata", "encode_txn_key", "decode_txn_key",
           "encode_txn_value", "decode_txn_value", "partition_for_transactional_id",
           "TRANSACTION_STATE_TOPIC"]

TRANSACTION_STATE_TOPIC = "__transaction_state"


class TxnState(enum.IntEnum):
    """Kafka's TransactionState, with its ids (the value's int8 state)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's DescribeTransactions/ListTransactions answer (TransactionState.name)."""
        return {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
                4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead",
                7: "PrepareEpochFence"}[int(self)]


#: The states a transaction leaves only by its markers being written.
PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
#: The states with no transaction open: a new one may begin, the id may expire.
IDLE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata). `last_producer_id`
    and `last_producer_epoch` remember the identity before the latest bump, so a retried
    InitProducerId (KIP-360) or EndTxn is recognised; they live in memory only, as in
    Kafka's version 0 records."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    txn_start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = -1
    last_producer_epoch: int = -1
    #: Kafka's ClientTransactionVersion: 2 once a transaction of transactions v2 (Produce
    #: v12 adding partitions, EndTxn v5 bumping the epoch) began or ended; 0 otherwise.
    client_tv: int = 0
    #: The producer id an EndTxn of transactions v2 moves to once its markers are
    #: written, when the epoch ran out (-1: none).
    next_producer_id: int = -1

    def record_value(self) -> bytes:
        return encode_txn_value(self)


def partition_for_transactional_id(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode()) % transactionTopicPartitionCount``."""
    return partition_for_group(transactional_id, partitions)


def encode_txn_key(transactional_id: str) -> bytes:
    return struct.pack(">h", 0) + _string(transactional_id)


def decode_txn_key(data: bytes) -> str:
    r = _Reader(data, "__transaction_state key")
    version = r.int16()
    if version != 0:
        raise CorruptRecordError(f"__transaction_state key has unknown version {version}")
    return r.string()


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return uvarint_bytes(len(data) + 1) + data


def encode_txn_value(meta: TransactionMetadata) -> bytes:
    """Version 0, or version 1 for a transaction of transactions v2 (as Kafka 4 writes)."""
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        topics.setdefault(topic, []).append(partition)
    flexible = meta.client_tv >= 2
    parts = [struct.pack(">hqhib", 1 if flexible else 0, meta.producer_id, meta.producer_epoch,
                         meta.timeout_ms, int(meta.state))]
    parts.append(uvarint_bytes(len(topics) + 1) if flexible else struct.pack(">i", len(topics)))
    for topic, ids in topics.items():
        if flexible:
            parts.append(_compact_string(topic) + uvarint_bytes(len(ids) + 1)
                         + struct.pack(f">{len(ids)}i", *ids) + b"\x00")
        else:
            parts.append(_string(topic) + struct.pack(f">i{len(ids)}i", len(ids), *ids))
    parts.append(struct.pack(">qq", meta.last_update_ms, meta.txn_start_ms))
    if flexible:
        tags = [(tag, data) for tag, data, default in (
            (0, struct.pack(">q", meta.last_producer_id), meta.last_producer_id == -1),
            (1, struct.pack(">q", meta.next_producer_id), meta.next_producer_id == -1),
            (2, struct.pack(">h", meta.client_tv), meta.client_tv == 0)) if not default]
        parts.append(uvarint_bytes(len(tags)))
        parts += [uvarint_bytes(tag) + uvarint_bytes(len(data)) + data for tag, data in tags]
    return b"".join(parts)


def decode_txn_value(transactional_id: str, data: bytes) -> TransactionMetadata:
    r = _Reader(data, f"__transaction_state value of {transactional_id!r}")
    version = r.int16()
    if version not in (0, 1):
        raise CorruptRecordError(f"__transaction_state value has unknown version {version}")
    flexible = version >= 1
    pid, epoch, timeout = r.int64(), r.int16(), r.int32()
    try:
        state = TxnState(r.take(1)[0])
    except ValueError as exc:
        raise CorruptRecordError(f"__transaction_state value of {transactional_id!r}: {exc}") from None
    count = (r.uvarint() - 1) if flexible else r.int32()
    partitions: set[tuple[str, int]] = set()
    for _ in range(max(count, 0)):
        topic = r.compact_string() if flexible else r.string()
        n = (r.uvarint() - 1) if flexible else r.int32()
        for _ in range(max(n, 0)):
            partitions.add((topic, r.int32()))
        if flexible:
            r.skip_tagged_fields()
    last_update, start = r.int64(), r.int64()
    meta = TransactionMetadata(transactional_id, pid, epoch, timeout, state, partitions,
                               start, last_update)
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            data = r.take(size)
            if tag == 0 and size == 8:
                meta.last_producer_id = struct.unpack(">q", data)[0]
            elif tag == 1 and size == 8:
                meta.next_producer_id = struct.unpack(">q", data)[0]
            elif tag == 2 and size == 2:
                meta.client_tv = struct.unpack(">h", data)[0]
    return meta
