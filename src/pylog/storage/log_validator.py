"""Validating an append: Kafka's LogValidator, in front of the C append path.

``validate_append`` turns the bytes handed to ``Log.append`` into a
PreparedAppend (offsets assigned, headers patched), applying the topic's
rules by origin:

- ``"client"``: everything Kafka's broker checks of a produce request:
  framing, CRC, size, record count, every record (inside compressed batches
  too, after decompression), offset deltas, each record's timestamp against
  ``message.timestamp.before/after.max.ms``, the true ``maxTimestamp``, keys on
  a compacted topic, and the topic's ``compression.type`` (a batch in another
  codec is recompressed);
- ``"producer"``: pylog's own producer, whose batches its encoder just built:
  header and CRC only, unless the codec must change or the topic is compacted;
- ``"coordinator"``: pylog's internal records (``__consumer_offsets``, control
  batches): header and CRC.

Magic 0/1 message sets are up-converted first, as Kafka does. docs/FORMAT.md,
section 10, lists every rule and its error.
"""

from __future__ import annotations

from pylog._core.storage import (LegacyBatchError, PreparedAppend, convert_client_batches,
                                 prepare_append)
from pylog.compression import CODECS, NONE

from .config import LONG_MAX, LogConfig

__all__ = ["TARGET_CODECS", "validate_append"]

# compression.type -> the codec every stored batch must have (-1: the producer's).
TARGET_CODECS = {"producer": -1, "uncompressed": NONE,
                 **{name: codec for name, codec in CODECS.items() if codec != NONE}}


def validate_append(batches, config: LogConfig, next_offset: int, leader_epoch: int, now: int,
                    origin: str, *, converted: bool = False) -> PreparedAppend:
    """Validates `batches` for a log whose next offset is `next_offset` (see the module doc).
    Raises the errors of prepare_append and convert_client_batches; writes nothing.
    `converted`: convert_client_batches has run on `batches` already (Log.append runs
    it before taking the log's lock)."""
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    min_ts = now - before if before < LONG_MAX and now - before > -LONG_MAX else -LONG_MAX - 1
    max_ts = now + after if after < LONG_MAX - now else LONG_MAX
    lat = now if config.message_timestamp_type == "LogAppendTime" else -1
    require_keys = "compact" in config.cleanup_policy and origin != "coordinator"

    try:
        return _prepare(batches, config, next_offset, leader_epoch, origin, min_ts, max_ts, lat,
                        require_keys, config.pylog_validate_records and origin != "producer",
                        converted)
    except LegacyBatchError:
        pass                    # magic 0/1: up-converted below
    from pylog.record import upconvert
    batches = upconvert(batches, max_inner_bytes=config.max_message_bytes)
    return _prepare(batches, config, next_offset, leader_epoch, origin, min_ts, max_ts,
                    lat, require_keys, config.pylog_validate_records)


def _prepare(data, config: LogConfig, next_offset: int, leader_epoch: int, origin: str,
             min_ts: int, max_ts: int, lat: int, require_keys: bool,
             validate_records: bool, converted: bool = False) -> PreparedAppend:
    if origin != "coordinator" and not converted:
        data = convert_client_batches(
            data, TARGET_CODECS[config.compression_type], require_keys=require_keys,
            min_timestamp=min_ts, max_timestamp=max_ts, validate=validate_records,
            max_message_bytes=config.max_message_bytes)
    return prepare_append(data, next_offset, leader_epoch=leader_epoch, log_append_time=lat,
                          max_batch_size=config.max_message_bytes, min_timestamp=min_ts,
                          max_timestamp=max_ts, allow_control=origin == "coordinator",
                          validate_records=validate_records, require_keys=require_keys)
