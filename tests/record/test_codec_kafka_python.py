"""Cross-checks against kafka-python's record codec, an independent implementation.

Batches that kafka-python's builders write decode identically in pylog;
pylog's batches read back in kafka-python's readers; and with the same
fields the uncompressed bytes are identical. Legacy magic 0/1 message sets
(plain and compressed wrappers) are read and up-converted as Kafka does.
"""

import struct
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylog import records
from pylog.errors import CorruptRecordError, InvalidRecordError, RecordListTooLargeError
from pylog import compression as pylog_compression
from record.codec_support import (
    ATTR_TIMESTAMP_TYPE,
    ATTRIBUTES,
    CODEC_IDS,
    CODECS,
    LEADER_EPOCH,
    MAX_TIMESTAMP,
    arrow_rows,
    decoded,
    get_field,
    legacy_message,
    set_field,
)

kafka_codec = pytest.importorskip("kafka.codec", reason="kafka-python is the oracle")
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.legacy_records import LegacyRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

# kafka-python's codecs here: every v2 codec once python-snappy is installed ([dev]).
KAFKA_CODECS = [c for c in CODECS if c in ("none", "gzip", "lz4", "zstd")
                or (c == "snappy" and kafka_codec.has_snappy())]
LEGACY_CODECS = [c for c in KAFKA_CODECS if c != "zstd"]   # zstd needs magic 2

nullable_bytes = st.one_of(st.none(), st.binary(max_size=48))
header_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
headers = st.lists(st.tuples(header_keys, nullable_bytes), max_size=3)
# kafka-python writes deltas with Python ints (no int64 wrap): keep them in range.
timestamps = st.one_of(st.just(-1), st.integers(0, 2**62))
v2_records = st.lists(st.tuples(nullable_bytes, nullable_bytes, headers, timestamps),
                      min_size=1, max_size=30)
legacy_records = st.lists(st.tuples(nullable_bytes, nullable_bytes, st.integers(0, 2**62)),
                          min_size=1, max_size=20)


def test_every_codec_is_cross_checked():
    """python-snappy and xxhash ([dev]) let kafka-python cover snappy and magic 0 lz4."""
    assert CODECS == KAFKA_CODECS
    assert kafka_codec.xxhash is not None


def kafka_v2(recs, compression="none", *, producer=(-1, -1, -1), transactional=False):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=CODEC_IDS[compression], is_transactional=transactional,
        producer_id=producer[0], producer_epoch=producer[1], base_sequence=producer[2],
        batch_size=1 << 30)
    for i, (key, value, hdrs, ts) in enumerate(recs):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=hdrs) is not None
    return bytes(builder.build())


def pylog_v2(recs, compression="none", **kw):
    return records.encode_batch([r[1] for r in recs], keys=[r[0] for r in recs],
                                headers=[r[2] for r in recs], timestamps=[r[3] for r in recs],
                                compression=compression, **kw)


def kafka_read(buffer):
    """Every record kafka-python reads from buffer, as (offset, timestamp, key, value, headers)."""
    out = []
    mr = MemoryRecords(bytes(buffer))
    while mr.has_next():
        batch = mr.next_batch()
        if hasattr(batch, "validate_crc"):
            assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value,
                        tuple(r.headers)))
    return out


def expected(recs):
    return [(i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(recs)]


class TestKafkaPythonWritesPylogReads:
    @pytest.mark.parametrize("compression", KAFKA_CODECS)
    @given(recs=v2_records)
    def test_decode_identically(self, compression, recs):
        """kafka-python's batches decode in pylog to the records kafka-python wrote and reads."""
        batch = kafka_v2(recs, compression)
        want = expected(recs)
        assert want == kafka_read(batch)
        assert want == decoded(batch) == arrow_rows(batch)
        (b,) = list(records.iter_batches(batch))
        stamps = [r[3] for r in recs]
        assert (0, len(recs) - 1, len(recs)) == (b.base_offset, b.last_offset_delta, b.records_count)
        assert (stamps[0], max(stamps)) == (b.base_timestamp, b.max_timestamp)
        assert 0 == b.partition_leader_epoch   # kafka-python writes 0; Java's producer writes -1

    @pytest.mark.parametrize("compression", [c for c in KAFKA_CODECS if c != "none"])
    def test_compressed_batches_really_compressed(self, compression):
        """Compressible records make kafka-python keep its codec; pylog decodes that codec."""
        recs = [(b"key-%d" % (i % 5), b"value " * 50, [("trace", b"abc")], 1000 + i)
                for i in range(200)]
        batch = kafka_v2(recs, compression)
        (b,) = list(records.iter_batches(batch))
        assert compression == b.compression
        assert expected(recs) == decoded(batch) == arrow_rows(batch)

    def test_transactional_producer_fields(self):
        """Producer id, epoch, base sequence and the transactional bit read back."""
        recs = [(None, b"v", [], 5)] * 3
        batch = kafka_v2(recs, producer=(77, 2, 1000), transactional=True)
        (b,) = list(records.iter_batches(batch))
        assert (77, 2, 1000, 1002, True) == (b.producer_id, b.producer_epoch, b.base_sequence,
                                             b.last_sequence, b.is_transactional)


class TestPylogWritesKafkaPythonReads:
    @pytest.mark.parametrize("compression", CODECS)
    @given(recs=v2_records, base_offset=st.integers(0, 2**40))
    def test_kafka_python_reads_pylog(self, compression, recs, base_offset):
        """kafka-python's reader validates pylog's CRC and reads back every field."""
        batch = pylog_v2(recs, compression, base_offset=base_offset)
        want = [(base_offset + o, ts, k, v, h) for o, ts, k, v, h in expected(recs)]
        assert want == kafka_read(batch)
        kb = DefaultRecordBatch(batch)
        assert (base_offset, len(recs) - 1, CODEC_IDS[compression], 0) == (
            kb.base_offset, kb.last_offset_delta, kb.compression_type, kb.timestamp_type)

    def test_kafka_python_reads_several_batches(self):
        """A buffer of pylog batches in every codec reads in kafka-python as one stream."""
        buf = b"".join(records.encode_batch([b"x%d" % i] * 3, base_offset=3 * i, timestamps=i,
                                            compression=c) for i, c in enumerate(CODECS))
        assert decoded(buf) == kafka_read(buf)

    @pytest.mark.parametrize("compression", ["none", "zstd"])
    def test_log_append_time(self, compression):
        """Both read a LogAppendTime batch as maxTimestamp for every record, negative or not."""
        for max_ts in (12345, -1):
            batch = records.encode_batch([b"a", b"b"], timestamps=[1, 2], compression=compression,
                                         timestamp_type="log_append")
            batch = set_field(batch, MAX_TIMESTAMP, max_ts)
            assert [max_ts, max_ts] == [r[1] for r in kafka_read(batch)]
            assert kafka_read(batch) == decoded(batch) == arrow_rows(batch)

    @pytest.mark.parametrize("marker", ["commit", "abort"])
    def test_control_batch(self, marker):
        """kafka-python reads pylog's transaction markers as control records of the right type."""
        batch = records.encode_control_batch(marker, producer_id=5, producer_epoch=1,
                                             base_offset=40, timestamp=99, coordinator_epoch=3)
        kb = DefaultRecordBatch(batch)
        assert kb.validate_crc()
        assert (True, True, 5, 1) == (kb.is_control_batch, kb.is_transactional, kb.producer_id,
                                      kb.producer_epoch)
        (rec,) = list(kb)
        assert (40, 99, 0, marker == "commit") == (rec.offset, rec.timestamp, rec.version, rec.commit)
        assert struct.pack(">hi", 0, 3) == rec.value
        (b,) = list(records.iter_batches(batch))
        assert (marker, True) == (b.control_type, b.is_control)


class TestByteIdentical:
    @given(recs=v2_records)
    def test_uncompressed_bytes_identical(self, recs):
        """With kafka-python's header choices (leader epoch 0), pylog writes the same bytes."""
        assert kafka_v2(recs) == pylog_v2(recs, partition_leader_epoch=0)

    @pytest.mark.parametrize("key_len,value_len,count,stamped", [
        (63, 63, 1, False), (64, 64, 1, True), (8191, 8191, 1, True), (8192, 8192, 1, False),
        (None, 64, 64, True), (None, 100, 1000, False), (None, 100, 1000, True),
        (3, 97, 1300, True), (0, 0, 129, False), (None, None, 65, True)])
    def test_bytes_identical_where_the_size_bound_is_tightest(self, key_len, value_len, count,
                                                              stamped):
        """Records whose lengths sit at a varint's edge, and batches either side of
        the one-pass limit (1,000 records of 100 B now fit its bound): pylog
        encodes into an output sized by pylog_records_bound, which is exact for
        one record; any byte past it would be a SystemError."""
        key = None if key_len is None else b"k" * key_len
        value = None if value_len is None else b"v" * value_len
        stamps = [1_700_000_000_000 + (i * 997 if stamped else 0) for i in range(count)]
        recs = [(key, value, [], ts) for ts in stamps]
        keys = None if key is None else [key] * count
        pylog = records.encode_batch([value] * count, keys, stamps if stamped else stamps[0],
                                     partition_leader_epoch=0)
        assert pylog == kafka_v2(recs)

    def test_identical_with_producer_state(self):
        """Producer id, epoch, sequence and the transactional bit land in the same bytes."""
        recs = [(b"k", b"v%d" % i, [("h", None)], 1_700_000_000_000 + i) for i in range(10)]
        assert kafka_v2(recs, producer=(123, 4, 56), transactional=True) == pylog_v2(
            recs, partition_leader_epoch=0, producer_id=123, producer_epoch=4, base_sequence=56,
            transactional=True)

    def test_leader_epoch_is_the_only_default_difference(self):
        """pylog's default leader epoch is -1 (as Java's producer writes); kafka-python writes 0."""
        recs = [(None, b"v", [], 7)]
        ours, theirs = pylog_v2(recs), kafka_v2(recs)
        assert (-1, 0) == (get_field(ours, LEADER_EPOCH), get_field(theirs, LEADER_EPOCH))
        assert ours[:12] == theirs[:12] and ours[16:] == theirs[16:]   # epoch is outside the CRC


def kafka_legacy(magic, compression, recs, *, offsets=None):
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=CODEC_IDS[compression],
                                       batch_size=1 << 30)
    for i, (key, value, ts) in enumerate(recs):
        off = i if offsets is None else offsets[i]
        assert builder.append(off, timestamp=ts, key=key, value=value) is not None
    return bytes(builder.build())


def legacy_recrc(msg: bytes) -> bytes:
    """Recomputes a legacy message's CRC-32 (magic..end) after an edit."""
    b = bytearray(msg)
    struct.pack_into(">I", b, 12, zlib.crc32(bytes(b[16:])))
    return bytes(b)


def set_wrapper_offset(msg: bytes, offset: int) -> bytes:
    """The offset is outside a legacy message's CRC: the broker rewrites it in place."""
    return struct.pack(">q", offset) + msg[8:]


class TestLegacy:
    @pytest.mark.parametrize("magic", [0, 1])
    @pytest.mark.parametrize("compression", LEGACY_CODECS)
    @given(recs=legacy_records)
    def test_read_like_kafka_python(self, magic, compression, recs):
        """Magic 0/1 message sets (plain or wrapped) decode as kafka-python reads them."""
        buf = kafka_legacy(magic, compression, recs)
        want = [(i, ts if magic == 1 else -1, k, v, ()) for i, (k, v, ts) in enumerate(recs)]
        assert want == kafka_read(buf)
        assert want == decoded(buf)
        assert want == arrow_rows(buf)
        batches = list(records.iter_batches(buf))
        assert {magic} == {b.magic for b in batches}
        assert (len(recs) if compression == "none" else 1) == len(batches)

    @pytest.mark.parametrize("magic", [0, 1])
    @pytest.mark.parametrize("compression", LEGACY_CODECS)
    @given(recs=legacy_records, codec=st.sampled_from([None, "none", "zstd"]))
    def test_upconvert(self, magic, compression, recs, codec):
        """upconvert gives v2 batches holding the same records; wrappers keep their codec."""
        buf = kafka_legacy(magic, compression, recs)
        out = records.upconvert(buf, compression=codec)
        batches = list(records.iter_batches(out))
        assert {2} == {b.magic for b in batches}
        assert 1 == len(batches)   # one wrapper, or one run of increasing plain messages
        want_codec = compression if codec is None or compression == "none" else codec
        assert want_codec == batches[0].compression
        assert decoded(buf) == decoded(out) == arrow_rows(out) == kafka_read(out)

    def test_magic1_wrapper_offset_zero_keeps_inner_offsets(self):
        """A magic 1 wrapper with offset 0 (old producers) leaves inner offsets as written (fix a)."""
        recs = [(None, b"v%d" % i, 1000 + i) for i in range(4)]
        buf = kafka_legacy(1, "gzip", recs)
        assert 0 == struct.unpack_from(">q", buf)[0]
        assert [0, 1, 2, 3] == [r[0] for r in decoded(buf)] == [r[0] for r in arrow_rows(buf)]
        assert [0, 1, 2, 3] == [r[0] for r in kafka_read(buf)]
        assert [0, 1, 2, 3] == [r[0] for r in decoded(records.upconvert(buf))]
        (b,) = list(records.iter_batches(buf))
        assert 0 == b.base_offset

    @pytest.mark.parametrize("compression", LEGACY_CODECS[1:])
    def test_magic1_wrapper_offset_is_last_absolute(self, compression):
        """A broker-written magic 1 wrapper carries the last absolute offset; inner ones are relative."""
        recs = [(None, b"v%d" % i, 1000 + i) for i in range(4)]
        buf = set_wrapper_offset(kafka_legacy(1, compression, recs), 103)
        assert [100, 101, 102, 103] == [r[0] for r in decoded(buf)]
        assert decoded(buf) == kafka_read(buf) == arrow_rows(buf)
        (b,) = list(records.iter_batches(buf))
        assert (100, 103) == (b.base_offset, b.last_offset)

    @pytest.mark.parametrize("wrapper", [1, 2, -5])
    def test_magic1_wrapper_offset_below_last_inner_refused(self, wrapper):
        """A non-zero wrapper offset below the last inner offset is corrupt, as in Kafka."""
        recs = [(None, b"v%d" % i, 1000 + i) for i in range(4)]
        buf = set_wrapper_offset(kafka_legacy(1, "gzip", recs), wrapper)
        for read in (decoded, arrow_rows, records.upconvert):
            with pytest.raises(CorruptRecordError, match=f"wrapper offset {wrapper}.*last inner offset 3"):
                read(buf)

    def test_magic0_wrapper_offsets_are_absolute(self):
        """Magic 0 inner offsets are absolute whatever the wrapper offset says."""
        recs = [(None, b"v%d" % i, 0) for i in range(3)]
        buf = set_wrapper_offset(kafka_legacy(0, "gzip", recs, offsets=[50, 51, 52]), 52)
        assert [50, 51, 52] == [r[0] for r in decoded(buf)] == [r[0] for r in kafka_read(buf)]

    def test_magic1_log_append_time_wrapper(self):
        """A LogAppendTime magic 1 wrapper gives every inner message the wrapper's timestamp."""
        recs = [(None, b"v%d" % i, 1000 + i) for i in range(3)]
        wrapper = bytearray(set_wrapper_offset(kafka_legacy(1, "gzip", recs), 2))
        wrapper[17] |= ATTR_TIMESTAMP_TYPE
        struct.pack_into(">q", wrapper, 18, 5555)
        buf = legacy_recrc(bytes(wrapper))
        assert [5555] * 3 == [r[1] for r in decoded(buf)] == [r[1] for r in kafka_read(buf)]
        (b,) = list(records.iter_batches(records.upconvert(buf)))
        assert ("log_append", [5555] * 3) == (b.timestamp_type, [r.timestamp for r in b.records()])

    @pytest.mark.parametrize("magic", [0, 1])
    def test_empty_wrapper_refused(self, magic):
        """A compressed wrapper holding no inner messages is corrupt, as in Kafka (fix b)."""
        buf = legacy_message(magic, 0, None, pylog_compression.compress(1, b""), attributes=1)
        for read in (decoded, arrow_rows, records.upconvert):
            with pytest.raises(CorruptRecordError, match="batch at byte 0: .*no inner messages"):
                read(buf)

    @pytest.mark.parametrize("magic", [0, 1])
    def test_zstd_legacy_wrapper_refused(self, magic):
        """zstd inside magic 0/1 is corrupt: Kafka allows zstd only from magic 2 (fix b)."""
        inner = legacy_message(magic, 0, b"k", b"v", timestamp=1)
        buf = legacy_message(magic, 0, None, pylog_compression.compress(4, inner), attributes=4)
        for read in (decoded, arrow_rows, records.upconvert):
            with pytest.raises(CorruptRecordError, match="zstd.*needs magic 2"):
                read(buf)

    def test_null_wrapper_value_refused(self):
        """A compressed wrapper with a null value is corrupt."""
        buf = legacy_message(1, 0, None, None, attributes=1)
        with pytest.raises(CorruptRecordError, match="null value"):
            decoded(buf)

    @pytest.mark.parametrize("nested", ["compressed", "v2"])
    def test_nested_wrappers_refused(self, nested):
        """Inner messages must be plain legacy messages: no second compression, no v2 batch."""
        if nested == "compressed":
            inner = legacy_message(1, 0, None, pylog_compression.compress(
                1, legacy_message(1, 0, None, b"x")), attributes=1)
        else:
            inner = records.encode_batch([b"x"], timestamps=1)
        buf = legacy_message(1, 0, None, pylog_compression.compress(1, inner), attributes=1)
        with pytest.raises(CorruptRecordError, match="nests a"):
            decoded(buf)

    def test_upconvert_runs_split_on_offset_or_type_change(self):
        """Plain messages join one v2 batch while offsets increase and the timestamp type holds."""
        msgs = [legacy_message(1, 0, None, b"a", timestamp=1),
                legacy_message(1, 1, None, b"b", timestamp=2),
                legacy_message(1, 1, None, b"c", timestamp=3),          # offset does not increase
                legacy_message(1, 2, None, b"d", timestamp=4, attributes=ATTR_TIMESTAMP_TYPE)]
        v2 = records.encode_batch([b"e"], base_offset=3, timestamps=5)
        out = records.upconvert(b"".join(msgs) + v2)
        batches = list(records.iter_batches(out))
        assert [2, 1, 1, 1] == [b.records_count for b in batches]
        assert ["create", "create", "log_append", "create"] == [b.timestamp_type for b in batches]
        assert v2 == bytes(batches[-1].raw)

    def test_upconvert_max_bytes(self):
        """upconvert(max_bytes=) caps the output with RecordListTooLargeError (fix f)."""
        recs = [(None, b"v" * 1000, 1000 + i) for i in range(100)]
        buf = kafka_legacy(1, "gzip", recs)
        full = records.upconvert(buf)
        assert full == records.upconvert(buf, max_bytes=len(full))
        with pytest.raises(RecordListTooLargeError, match=f"max_bytes = {len(full) - 1}"):
            records.upconvert(buf, max_bytes=len(full) - 1)
        with pytest.raises(RecordListTooLargeError):
            records.upconvert(buf + buf, max_bytes=len(full) + 10)

    def test_upconvert_drops_torn_tail(self):
        """A trailing partial message is not converted (the next read returns it whole)."""
        buf = legacy_message(1, 0, None, b"a", timestamp=1) + legacy_message(1, 1, None, b"b")[:20]
        assert [(0, 1, None, b"a", ())] == decoded(records.upconvert(buf))

    def test_legacy_batch_header_view(self):
        """Legacy messages appear as batches with Kafka's 'no producer' defaults."""
        (b,) = list(records.iter_batches(legacy_message(0, 7, b"k", b"v")))
        assert (0, 7, 7, -1, -1, -1, None, False, 1) == (
            b.magic, b.base_offset, b.last_offset, b.producer_id, b.partition_leader_epoch,
            b.max_timestamp, b.timestamp_type, b.is_control, b.records_count)


def test_v2_log_append_flag_roundtrip_kafka_python():
    """kafka-python reports timestamp type 1 for a pylog LogAppendTime batch."""
    batch = records.encode_batch([b"a"], timestamps=5, timestamp_type="log_append")
    assert get_field(batch, ATTRIBUTES) & ATTR_TIMESTAMP_TYPE
    assert 1 == DefaultRecordBatch(batch).timestamp_type


class TestLegacyOddities:
    """Stored legacy data Kafka's v2 builder would refuse: read as it is; upconvert raises
    InvalidRecordError (the data is readable, not corrupt, but no v2 batch can hold it)."""

    def test_timestamp_below_minus_one(self):
        """records() and decode_arrow return a magic 1 timestamp of -2; upconvert refuses it."""
        for attributes in (0, ATTR_TIMESTAMP_TYPE):
            buf = legacy_message(1, 0, None, b"v", timestamp=-2, attributes=attributes)
            assert [(0, -2, None, b"v", ())] == decoded(buf) == arrow_rows(buf)
            with pytest.raises(InvalidRecordError, match="batch at byte 0: .*invalid timestamp -2; cannot up-convert"):
                records.upconvert(buf)

    def test_inner_offsets_not_increasing(self):
        """A magic 0 wrapper whose inner offsets go back reads as written; upconvert refuses it."""
        inner = b"".join(legacy_message(0, off, None, b"v%d" % off) for off in (5, 3, 4))
        buf = legacy_message(0, 4, None, pylog_compression.compress(1, inner), attributes=1)
        want = [(off, -1, None, b"v%d" % off, ()) for off in (5, 3, 4)]
        assert want == decoded(buf) == arrow_rows(buf) == kafka_read(buf)
        with pytest.raises(InvalidRecordError, match="batch at byte 0: .*do not increase"):
            records.upconvert(buf)

    def test_inner_offsets_spanning_more_than_int32(self):
        """Inner offsets further apart than int32 read as written; upconvert refuses them."""
        inner = b"".join(legacy_message(0, off, None, b"v") for off in (0, 2**40))
        buf = legacy_message(0, 0, None, pylog_compression.compress(1, inner), attributes=1)
        assert [0, 2**40] == [r[0] for r in decoded(buf)] == [r[0] for r in arrow_rows(buf)]
        with pytest.raises(InvalidRecordError, match="span more than int32"):
            records.upconvert(buf)
