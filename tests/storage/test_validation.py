"""What a client appends is validated as Kafka's LogValidator does (issue 12,
item 11): the records inside compressed batches, offset deltas, the true
maxTimestamp, each record's timestamp, the topic's compression.type, and keys
on compacted topics. Before, compressed batches were stored with only their
CRC checked, and one with a garbage payload broke every later poll."""

import struct

import pytest

from kafka.record.default_records import DefaultRecordBatch
from pylog import crc32c, records
from pylog.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from pylog.storage.log import Log
from pylog._core.storage import convert_client_batches

CODECS = ["gzip", "snappy", "lz4", "zstd"]
T = 1_700_000_000_000


def with_header(batch: bytes, **fields) -> bytes:
    """`batch` with header fields replaced and the length and CRC made right again."""
    out = bytearray(batch)
    layout = {"last_offset_delta": (23, ">i"), "max_timestamp": (35, ">q"), "records_count": (57, ">i")}
    for name, value in fields.items():
        pos, fmt = layout[name]
        struct.pack_into(fmt, out, pos, value)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def replace_records(batch: bytes, section: bytes) -> bytes:
    return with_header(batch[:61] + section)


@pytest.fixture
def log(log_dir):
    with Log(log_dir) as lg:
        lg.append(records.encode_batch([b"before"], timestamps=[T]))
        yield lg


@pytest.mark.parametrize("codec", CODECS)
def test_a_garbage_compressed_payload_with_a_valid_crc_is_refused(log, codec):
    bad = replace_records(records.encode_batch([b"a", b"b"], compression=codec), b"\x00garbage\xff" * 8)
    with pytest.raises(CorruptRecordError, match="record batch at byte 0: .*does not decompress"):
        log.append(bad)
    assert log.log_end_offset == 1
    assert [r.value for r in log.read(0).records()] == [b"before"]   # every poll still works


@pytest.mark.parametrize("codec", CODECS)
def test_the_record_count_of_a_compressed_batch_is_checked(log, codec):
    from pylog import compression
    plain = records.encode_batch([b"a", b"b"], timestamps=[T, T])
    section = compression.compress(compression.codec_id(codec), plain[61:])
    batch = records.encode_batch([b"a", b"b", b"c"], compression=codec, timestamps=[T] * 3)
    with pytest.raises(CorruptRecordError, match="records count"):
        log.append(replace_records(batch, section))          # says 3, holds 2
    assert log.log_end_offset == 1


@pytest.mark.parametrize("codec", ["none"] + CODECS)
def test_offset_deltas_must_count_from_zero(log, codec):
    batch = records.encode_batch([b"a", b"b"], timestamps=[T, T], compression=codec,
                                 offset_deltas=[0, 2])
    with pytest.raises(InvalidRecordError, match="offset delta 2, expected 1"):
        log.append(with_header(batch, last_offset_delta=1))
    assert log.log_end_offset == 1


@pytest.mark.parametrize("codec", ["none"] + CODECS)
def test_max_timestamp_is_the_records_maximum(log, codec):
    batch = records.encode_batch([b"a", b"b", b"c"], timestamps=[T, T + 500, T + 200], compression=codec)
    lying = with_header(batch, max_timestamp=T)
    info = log.append(lying)
    assert info.max_timestamp == T + 500
    stored = log.read(info.first_offset).batches()[-1]
    assert stored.max_timestamp == T + 500
    assert log.offset_for_timestamp(T + 400).offset == info.first_offset + 1


@pytest.mark.parametrize("codec", ["none"] + CODECS)
def test_every_records_timestamp_is_checked(log_dir, codec):
    with Log(log_dir, {"message.timestamp.before.max.ms": 3_600_000}) as log:
        now = log.clock()
        batch = records.encode_batch([b"old", b"new"], timestamps=[now - 7_200_000, now],
                                     compression=codec)
        with pytest.raises(InvalidTimestampError, match=f"timestamp {now - 7_200_000}"):
            log.append(batch)
        assert log.log_end_offset == 0


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("sent", ["none", "gzip", "zstd"])
def test_the_topics_compression_type_is_enforced(log_dir, target, sent):
    values = [b"value-%d" % i * 20 for i in range(50)]
    keys = [b"k%d" % i for i in range(50)]
    with Log(log_dir, {"compression.type": target}) as log:
        batch = records.encode_batch(values, keys, timestamps=[T] * 50, compression=sent,
                                     producer_id=9, producer_epoch=0, base_sequence=0,
                                     headers=[[("h", b"x")]] * 50)
        info = log.append(batch)
        raw = log.read(info.first_offset).read()
    (stored,) = records.iter_batches(raw)
    assert stored.compression == ("none" if target == "uncompressed" else target)
    assert (stored.producer_id, stored.base_sequence) == (9, 0)
    assert [(r.key, r.value, r.headers) for r in stored.records()] == \
        [(k, v, (("h", b"x"),)) for k, v in zip(keys, values)]
    oracle = DefaultRecordBatch(raw)                    # kafka-python reads what was stored
    assert [bytes(r.value) for r in oracle] == values


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_a_compacted_topic_refuses_records_without_a_key(log_dir, codec):
    with Log(log_dir, {"cleanup.policy": "compact"}) as log:
        with pytest.raises(InvalidRecordError, match="record 1 .*has no key; a compacted topic"):
            log.append(records.encode_batch([b"a", b"b"], [b"k", None], compression=codec))
        assert log.log_end_offset == 0
        log.append(records.encode_batch([b"a", b"b"], [b"k", b"j"], compression=codec))
        with pytest.raises(InvalidRecordError, match="no key"):
            log.append(records.encode_batch([b"c"], compression=codec), origin="producer")
        assert log.log_end_offset == 2


def test_the_uncompressed_fast_path_is_untouched():
    batch = records.encode_batch([b"a"] * 10) * 3
    assert convert_client_batches(batch, -1) is batch
    zstd = records.encode_batch([b"a"] * 10, compression="zstd")
    assert convert_client_batches(zstd, -1) is zstd          # checked, already right
    assert convert_client_batches(zstd, 4) is zstd
