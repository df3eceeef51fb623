"""Exceptions of the store, as Kafka error codes for responses."""

from __future__ import annotations

import logging

from pylog.errors import ErrorCode, KafkaError, RequestError

__all__ = ["NONE", "RequestError", "error_code", "codes"]

log = logging.getLogger(__name__)

NONE = ErrorCode.NONE
#: The name the broker's modules knew Kafka's codes by: the one table, ErrorCode.
codes = ErrorCode


def error_code(exc: BaseException) -> tuple[int, str]:
    """(Kafka error code, message) for an exception raised by the store."""
    if isinstance(exc, RequestError):
        return exc.code, str(exc)
    if isinstance(exc, KafkaError) and exc.code is not None and exc.code >= 0:
        return exc.code, str(exc)
    if isinstance(exc, ValueError):
        return ErrorCode.INVALID_REQUEST, str(exc)
    log.error("unexpected error in a request handler", exc_info=exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"
