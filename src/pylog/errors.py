"""pylog's exception hierarchy.

Every pylog exception derives from :class:`PylogError`. Errors that Kafka
also has carry Kafka's numeric ``code`` (an :class:`~pylog.error_codes.ErrorCode`,
as in the wire protocol's ``ErrorCode`` field) and Kafka's ``retriable`` flag
for it, so the same condition has the same number whether it surfaces
in-process or over the Kafka protocol. Errors
that only exist inside pylog (a corrupt index file, a bad config value) have
``code = None``. Where the meaning matches a builtin, the class also derives
from it (``CorruptRecordError`` is a ``ValueError``), so generic handlers keep
working.

:func:`error_for_code` maps a Kafka error code back to its class; the
registry rejects two classes claiming one code.
"""

from __future__ import annotations

from .error_codes import ERROR_INFO, ErrorCode

__all__ = [
    "PylogError",
    "ErrorCode",
    "RequestError",
    "ProtocolError",
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
    """An error Kafka defines too; ``code`` is Kafka's error code, ``retriable`` Kafka's
    flag for it unless the class says otherwise."""

    code: int = ErrorCode.UNKNOWN_SERVER_ERROR

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
        if "retriable" not in cls.__dict__:
            cls.retriable = ERROR_INFO[ErrorCode(code)].retriable


def error_for_code(code: int) -> type[KafkaError]:
    """Returns the exception class for a Kafka error code (UnknownServerError if unknown)."""
    return _BY_CODE.get(code, UnknownServerError)


class UnknownServerError(KafkaError):
    """An unexpected error (Kafka UNKNOWN_SERVER_ERROR)."""

    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(KafkaError, IndexError):
    """The requested offset is outside the log's range [log_start_offset, log_end_offset].

    Messages start with the partition (``topic-partition: ...``) and give the valid
    range; ``topic_partition`` holds the (topic, partition) pair where it is known."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE

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

    code = ErrorCode.CORRUPT_MESSAGE

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

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """An operation did not complete in time (Kafka REQUEST_TIMED_OUT)."""

    code = ErrorCode.REQUEST_TIMED_OUT


class MessageTooLargeError(KafkaError, ValueError):
    """A record batch is larger than ``max.message.bytes`` (or the producer's ``max.request.size``)."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class InvalidTopicError(KafkaError, ValueError):
    """The topic name is not legal (characters, length, reserved names)."""

    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class RecordListTooLargeError(KafkaError, ValueError):
    """A set of batches is larger than the segment size allows."""

    code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidRequiredAcksError(KafkaError, ValueError):
    """``acks`` must be -1 (all), 0 or 1."""

    code = ErrorCode.INVALID_REQUIRED_ACKS


class InvalidTimestampError(KafkaError, ValueError):
    """A timestamp is outside the accepted range."""

    code = ErrorCode.INVALID_TIMESTAMP


class TopicAlreadyExistsError(KafkaError):
    """A topic with this name exists already."""

    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(KafkaError, ValueError):
    """The number of partitions is invalid (must be positive, and can only grow)."""

    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(KafkaError, ValueError):
    """pylog is a single node: the replication factor must be 1."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidConfigError(KafkaError, ValueError):
    """A configuration key or value is invalid (Kafka INVALID_CONFIG)."""

    code = ErrorCode.INVALID_CONFIG


class PolicyViolationError(KafkaError, ValueError):
    """A request breaks a bound the broker is configured with (Kafka POLICY_VIOLATION):
    too many partitions in one request or in all, or more than the process's open
    files and memory maps can hold. The message names the bound and its config."""

    code = ErrorCode.POLICY_VIOLATION


class OutOfOrderSequenceError(KafkaError):
    """An idempotent producer's batch does not continue its sequence."""

    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceError(KafkaError):
    """An idempotent producer re-sent a batch that is already in the log."""

    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    """The producer's epoch is older than the one the log has seen (a fenced producer)."""

    code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(KafkaError):
    """A batch does not fit its producer's transaction state at the partition: a
    non-transactional batch while its transaction is open, or a transactional batch
    that starts a transaction the coordinator did not verify (Kafka INVALID_TXN_STATE)."""

    code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(KafkaError):
    """A transaction marker carries an older coordinator epoch than the partition has
    seen: a zombie coordinator (Kafka TRANSACTION_COORDINATOR_FENCED)."""

    code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class InvalidProducerIdMappingError(KafkaError):
    """The producer id a transactional request names is not the one the coordinator
    holds for its transactional id (Kafka INVALID_PRODUCER_ID_MAPPING)."""

    code = ErrorCode.INVALID_PRODUCER_ID_MAPPING


class InvalidTransactionTimeoutError(KafkaError, ValueError):
    """transaction.timeout.ms is not in (0, transaction.max.timeout.ms] (Kafka
    INVALID_TRANSACTION_TIMEOUT)."""

    code = ErrorCode.INVALID_TRANSACTION_TIMEOUT


class ConcurrentTransactionsError(KafkaError):
    """The transaction is completing (markers being written): retry (Kafka
    CONCURRENT_TRANSACTIONS)."""

    code = ErrorCode.CONCURRENT_TRANSACTIONS


class ProducerFencedError(KafkaError):
    """A newer producer with the same transactional id has been initialized: this one
    is a zombie (Kafka PRODUCER_FENCED)."""

    code = ErrorCode.PRODUCER_FENCED


class NotLeaderOrFollowerError(KafkaError):
    """This broker does not (or no longer) hold the partition's replica that was asked
    for; pylog raises it when a partition moved to another log dir under a caller
    holding its old Log (the client retries, as for a leader change)."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class LogDirNotFoundError(KafkaError, ValueError):
    """The log dir named is not one of the broker's log dirs."""

    code = ErrorCode.LOG_DIR_NOT_FOUND


class KafkaStorageError(KafkaError, OSError):
    """The log directory holding this partition failed (I/O error) and is offline."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class UnsupportedCompressionTypeError(KafkaError, ValueError):
    """The compression type is unknown or its codec is unavailable."""

    code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(KafkaError, ValueError):
    """A record batch is well formed but breaks a rule (offsets, counts, control records)."""

    code = ErrorCode.INVALID_RECORD


class UnsupportedSaslMechanismError(KafkaError, ValueError):
    """A SASL (or SCRAM) mechanism the broker does not have enabled or does not know."""

    code = ErrorCode.UNSUPPORTED_SASL_MECHANISM


class IllegalSaslStateError(KafkaError):
    """A request that the connection's SASL exchange does not expect now."""

    code = ErrorCode.ILLEGAL_SASL_STATE


class SaslAuthenticationError(KafkaError):
    """Authentication failed: bad credentials, or a SASL message that does not parse."""

    code = ErrorCode.SASL_AUTHENTICATION_FAILED


class ResourceNotFoundError(KafkaError, KeyError):
    """The resource (a user's SCRAM credential) does not exist."""

    code = ErrorCode.RESOURCE_NOT_FOUND

    def __str__(self) -> str:       # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicateResourceError(KafkaError, ValueError):
    """One request names the same resource (a user) twice."""

    code = ErrorCode.DUPLICATE_RESOURCE


class UnacceptableCredentialError(KafkaError, ValueError):
    """A credential the broker refuses to store (iterations out of range, no user name)."""

    code = ErrorCode.UNACCEPTABLE_CREDENTIAL


class InvalidRequestError(KafkaError, ValueError):
    """A request Kafka refuses as malformed in meaning (an ACL with an unknown operation,
    a quota entity that cannot exist)."""

    code = ErrorCode.INVALID_REQUEST


# --- a Kafka error code carried as a value -------------------------------------


class RequestError(PylogError):
    """A request the broker refuses with a given Kafka error code (``code``)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class ProtocolError(PylogError):
    """A response carried a Kafka error code (``code``; the message names it as Kafka does)."""

    def __init__(self, code: int, message: str) -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:              # a code newer than pylog's table
            name = None
        super().__init__(f"{message}: {name} (Kafka error {code})" if name
                         else f"{message} (Kafka error {code})")
        self.code = code


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
