"""Exceptions of the store, as Kafka error codes for responses."""

from __future__ import annotations

import logging

from pylog.errors import KafkaError

__all__ = ["NONE", "RequestError", "error_code", "codes"]

log = logging.getLogger(__name__)

NONE = 0


class codes:  # noqa: N801 - Kafka's Errors the broker sets itself (the group ones: classic_group.errors)
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    INVALID_TOPIC_EXCEPTION = 17
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    INVALID_PRODUCER_EPOCH = 47
    INVALID_REQUEST = 42
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_CONFIG = 40
    INVALID_PARTITIONS = 37
    TOPIC_ALREADY_EXISTS = 36
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    UNSUPPORTED_VERSION = 35
    KAFKA_STORAGE_ERROR = 56
    UNSUPPORTED_COMPRESSION_TYPE = 76
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 76
    INVALID_RECORD = 87
    UNKNOWN_TOPIC_ID = 100


class RequestError(Exception):
    """A request the broker refuses with a given Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def error_code(exc: BaseException) -> tuple[int, str]:
    """(Kafka error code, message) for an exception raised by the store."""
    if isinstance(exc, RequestError):
        return exc.code, str(exc)
    if isinstance(exc, KafkaError) and exc.code is not None and exc.code >= 0:
        return exc.code, str(exc)
    if isinstance(exc, ValueError):
        return codes.INVALID_REQUEST, str(exc)
    log.error("unexpected error in a request handler", exc_info=exc)
    return codes.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"
