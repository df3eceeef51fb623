"""pylog's exception hierarchy.

Every pylog exception derives from :class:`PylogError`. Errors that Kafka
also has carry Kafka's numeric ``code`` (as in the wire protocol's
``ErrorCode`` field) and its ``retriable`` flag, so the same condition has the
same number whether it surfaces in-process or over the Kafka protocol. Errors
that only exist inside pylog (a corrupt index file, a bad config value) have
``code = None``. Where the meaning matches a builtin, the class also derives
from it (``CorruptRecordError`` is a ``ValueError``), so generic handlers keep
working.

:func:`error_for_code` maps a Kafka error code back to its class; the
registry rejects two classes claiming one code.
"""

from __future__ import annotations

__all__ = [
    "PylogError",
    "InvalidRequestError",
    "KafkaError",
    "error_for_code",
    "UnknownServerError",
    "OffsetOutOfRangeError",
    "CorruptRecordError",
    "MissingOffsetsError",
    "UnknownTopicOrPartitionError",
    "KafkaTimeoutError",
    "MessageTooLargeError",
    "InvalidTopicError",
    "RecordListTooLargeError",
    "InvalidRequiredAcksError",
    "InvalidTimestampError",
    "TopicAlreadyExistsError",
    "InvalidPartitionsError",
    "InvalidReplicationFactorError",
    "InvalidConfigError",
    "PolicyViolationError",
    "OutOfOrderSequenceError",
    "DuplicateSequenceError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "TransactionCoordinatorFencedError",
    "NotLeaderOrFollowerError",
    "LogDirNotFoundError",
    "KafkaStorageError",
    "InvalidProducerIdMappingError",
    "InvalidTransactionTimeoutError",
    "ConcurrentTransactionsError",
    "ProducerFencedError",
    "UnsupportedCompressionTypeError",
    "InvalidRecordError",
    "UnsupportedSaslMechanismError",
    "IllegalSaslStateError",
    "SaslAuthenticationError",
    "ResourceNotFoundError",
    "DuplicateResourceError",
    "UnacceptableCredentialError",
    "CorruptIndexError",
    "ConfigError",
    "LogDirLockedError",
    "CorruptCheckpointError",
]

_BY_CODE: dict[int, type[KafkaError]] = {}


class PylogError(Exception):
    """Base class of every error pylog raises."""

    code: int | None = None
    retriable: bool = False


class KafkaError(PylogError):
    """An error Kafka defines too; ``code`` is Kafka's error code."""

    code: int = -1

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("code")
        if code is None:
            return
        if code in _BY_CODE:
            raise TypeError(
                f"Kafka error code {code} is claimed by both {_BY_CODE[code].__name__} and {cls.__name__}"
            )
        _BY_CODE[code] = cls


def error_for_code(code: int) -> type[KafkaError]:
    """Returns the exception class for a Kafka error code (UnknownServerError if unknown)."""
    return _BY_CODE.get(code, UnknownServerError)


class UnknownServerError(KafkaError):
    """An unexpected error (Kafka UNKNOWN_SERVER_ERROR)."""

    code = -1


class OffsetOutOfRangeError(KafkaError, IndexError):
    """The requested offset is outside the log's range [log_start_offset, log_end_offset].

    Messages start with the partition (``topic-partition: ...``) and give the valid
    range; ``topic_partition`` holds the (topic, partition) pair where it is known."""

    code = 1

    def __init__(self, message: str, *, offset: int | None = None,
                 log_start_offset: int | None = None, log_end_offset: int | None = None,
                 topic_partition: tuple[str, int] | None = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.topic_partition = topic_partition


class CorruptRecordError(KafkaError, ValueError):
    """Bytes that should hold record batches do not: bad length, magic, CRC or record.

    The codec's messages all start ``"batch at byte N: "`` and ``position`` is
    N, the byte position of the batch (or legacy message) holding the problem
    within the buffer or file that was read: where a log would be truncated.
    The message names the exact byte of the problem where it is known (within
    the decompressed data, for a compressed batch). For a checksum failure
    ``stored_crc`` and ``computed_crc`` hold both values.
    """

    code = 2
    retriable = True

    def __init__(self, message: str, *, position: int | None = None,
                 stored_crc: int | None = None, computed_crc: int | None = None) -> None:
        super().__init__(message)
        self.position = position
        self.stored_crc = stored_crc
        self.computed_crc = computed_crc


class MissingOffsetsError(CorruptRecordError):
    """Offsets below the log end that no segment holds: a hole left by a segment
    whose .log was removed, emptied or cut below the recovery point (never by
    retention, which moves the log start offset, nor by compaction, whose gaps
    reads skip as Kafka's do). ``first_missing`` .. ``next_offset - 1`` are gone;
    reading goes on from ``next_offset``. On the wire: CORRUPT_MESSAGE, as for
    any damaged data (a Java consumer's poll raises; seek past it to read on)."""

    retriable = False

    def __init__(self, message: str, *, offset: int, first_missing: int,
                 next_offset: int) -> None:
        super().__init__(message)
        self.offset = offset
        self.first_missing = first_missing
        self.next_offset = next_offset


class UnknownTopicOrPartitionError(KafkaError, KeyError):
    """The topic or partition does not exist."""

    code = 3
    retriable = True

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not complete in time (Kafka REQUEST_TIMED_OUT)."""

    code = 7
    retriable = True


class MessageTooLargeError(KafkaError, ValueError):
    """A record batch is larger than ``max.message.bytes`` (or the producer's ``max.request.size``)."""

    code = 10


class InvalidTopicError(KafkaError, ValueError):
    """The topic name is not legal (characters, length, reserved names)."""

    code = 17


class RecordListTooLargeError(KafkaError, ValueError):
    """A set of batches is larger than the segment size allows."""

    code = 18


class InvalidRequiredAcksError(KafkaError, ValueError):
    """``acks`` must be -1 (all), 0 or 1."""

    code = 21


class InvalidTimestampError(KafkaError, ValueError):
    """A timestamp is outside the accepted range."""

    code = 32


class TopicAlreadyExistsError(KafkaError):
    """A topic with this name exists already."""

    code = 36


class InvalidPartitionsError(KafkaError, ValueError):
    """The number of partitions is invalid (must be positive, and can only grow)."""

    code = 37


class InvalidReplicationFactorError(KafkaError, ValueError):
    """pylog is a single node: the replication factor must be 1."""

    code = 38


class InvalidConfigError(KafkaError, ValueError):
    """A configuration key or value is invalid (Kafka INVALID_CONFIG)."""

    code = 40


class PolicyViolationError(KafkaError, ValueError):
    """A request breaks a bound the broker is configured with (Kafka POLICY_VIOLATION):
    too many partitions in one request or in all, or more than the process's open
    files and memory maps can hold. The message names the bound and its config."""

    code = 44


class OutOfOrderSequenceError(KafkaError):
    """An idempotent producer's batch does not continue its sequence."""

    code = 45


class DuplicateSequenceError(KafkaError):
    """An idempotent producer re-sent a batch that is already in the log."""

    code = 46


class InvalidProducerEpochError(KafkaError):
    """The producer's epoch is older than the one the log has seen (a fenced producer)."""

    code = 47


class InvalidTxnStateError(KafkaError):
    """A batch does not fit its producer's transaction state at the partition: a
    non-transactional batch while its transaction is open, or a transactional batch
    that starts a transaction the coordinator did not verify (Kafka INVALID_TXN_STATE)."""

    code = 48


class TransactionCoordinatorFencedError(KafkaError):
    """A transaction marker carries an older coordinator epoch than the partition has
    seen: a zombie coordinator (Kafka TRANSACTION_COORDINATOR_FENCED)."""

    code = 52


class InvalidProducerIdMappingError(KafkaError):
    """The producer id a transactional request names is not the one the coordinator
    holds for its transactional id (Kafka INVALID_PRODUCER_ID_MAPPING)."""

    code = 49


class InvalidTransactionTimeoutError(KafkaError, ValueError):
    """transaction.timeout.ms is not in (0, transaction.max.timeout.ms] (Kafka
    INVALID_TRANSACTION_TIMEOUT)."""

    code = 50


class ConcurrentTransactionsError(KafkaError):
    """The transaction is completing (markers being written): retry (Kafka
    CONCURRENT_TRANSACTIONS)."""

    code = 51
    retriable = True


class ProducerFencedError(KafkaError):
    """A newer producer with the same transactional id has been initialized: this one
    is a zombie (Kafka PRODUCER_FENCED)."""

    code = 90


class NotLeaderOrFollowerError(KafkaError):
    """This broker does not (or no longer) hold the partition's replica that was asked
    for; pylog raises it when a partition moved to another log dir under a caller
    holding its old Log (the client retries, as for a leader change)."""

    code = 6
    retriable = True


class LogDirNotFoundError(KafkaError, ValueError):
    """The log dir named is not one of the broker's log dirs."""

    code = 57


class KafkaStorageError(KafkaError, OSError):
    """The log directory holding this partition failed (I/O error) and is offline."""

    code = 56
    retriable = True


class UnsupportedCompressionTypeError(KafkaError, ValueError):
    """The compression type is unknown or its codec is unavailable."""

    code = 76


class InvalidRecordError(KafkaError, ValueError):
    """A record batch is well formed but breaks a rule (offsets, counts, control records)."""

    code = 87


class UnsupportedSaslMechanismError(KafkaError, ValueError):
    """A SASL (or SCRAM) mechanism the broker does not have enabled or does not know."""

    code = 33


class IllegalSaslStateError(KafkaError):
    """A request that the connection's SASL exchange does not expect now."""

    code = 34


class SaslAuthenticationError(KafkaError):
    """Authentication failed: bad credentials, or a SASL message that does not parse."""

    code = 58


class ResourceNotFoundError(KafkaError, KeyError):
    """The resource (a user's SCRAM credential) does not exist."""

    code = 91

    def __str__(self) -> str:       # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateResourceError(KafkaError, ValueError):
    """One request names the same resource (a user) twice."""

    code = 92


class UnacceptableCredentialError(KafkaError, ValueError):
    """A credential the broker refuses to store (iterations out of range, no user name)."""

    code = 93


class InvalidRequestError(KafkaError, ValueError):
    """A request Kafka refuses as malformed in meaning (an ACL with an unknown operation,
    a quota entity that cannot exist)."""

    code = 42


# --- errors with no Kafka code ------------------------------------------------


class ConfigError(InvalidConfigError):
    """A bad config key or value; the message names the key and the allowed range."""


class CorruptIndexError(PylogError):
    """An .index or .timeindex file fails its sanity check; it is rebuilt from the .log."""


class LogDirLockedError(PylogError):
    """Another process holds the lock on a log directory."""


class NoOffsetForPartitionError(PylogError):
    """A consumer has no position for a partition and ``auto.offset.reset`` is
    ``none`` (Kafka's client-side NoOffsetForPartitionException)."""


class CorruptCheckpointError(PylogError, ValueError):
    """A checkpoint or metadata file in a log dir cannot be parsed; the message
    names the file and the line."""
