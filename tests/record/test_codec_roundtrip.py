"""Record batch v2 round trips: what encode_batch writes, records() and decode_arrow read back.

Property tests run over every compression codec. The reference for each
decoded record is the input itself: offset base_offset + i (or the given
delta), the given timestamp (or maxTimestamp for LogAppendTime), key, value
and headers unchanged.
"""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pylog import records
from pylog.errors import CorruptRecordError, InvalidTimestampError, MessageTooLargeError
from record.codec_support import (
    ATTR_TIMESTAMP_TYPE,
    ATTRIBUTES,
    BASE_TIMESTAMP,
    CODEC_IDS,
    CODECS,
    MAX_TIMESTAMP,
    arrow_rows,
    decoded,
    get_field,
    set_field,
)

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

nullable_bytes = st.one_of(st.none(), st.binary(max_size=64))
# Header keys are any str that encodes to UTF-8 (no lone surrogates): non-ASCII included.
header_keys = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
header_lists = st.one_of(st.none(), st.lists(st.tuples(header_keys, nullable_bytes), max_size=4))
timestamps = st.one_of(
    st.sampled_from([-1, 0, 1, 2**31 - 1, 2**31, 2**32, 1_700_000_000_000, INT64_MAX - 1, INT64_MAX]),
    st.integers(min_value=-1, max_value=INT64_MAX),
)
record_lists = st.lists(st.tuples(nullable_bytes, nullable_bytes, header_lists, timestamps),
                        min_size=1, max_size=40)


def expected_rows(recs, base_offset=0, deltas=None):
    return [(base_offset + (i if deltas is None else deltas[i]), ts, k, v, tuple(h or ()))
            for i, (k, v, h, ts) in enumerate(recs)]


def encode(recs, **kw):
    return records.encode_batch([r[1] for r in recs], keys=[r[0] for r in recs],
                                headers=[r[2] for r in recs], timestamps=[r[3] for r in recs], **kw)


class TestRoundTrip:
    @pytest.mark.parametrize("compression", CODECS)
    @given(recs=record_lists, base_offset=st.integers(0, 2**62))
    def test_records_and_arrow_equal_input(self, compression, recs, base_offset):
        """records() and decode_arrow() both return exactly the input, for every codec."""
        batch = encode(recs, compression=compression, base_offset=base_offset)
        want = expected_rows(recs, base_offset)
        assert want == decoded(batch)
        assert want == arrow_rows(batch)

    @pytest.mark.parametrize("compression", CODECS)
    @given(recs=record_lists)
    def test_header_fields(self, compression, recs):
        """The batch header carries Kafka's derived fields: counts, deltas, timestamps, codec."""
        batch = encode(recs, compression=compression, base_offset=7, producer_id=42,
                       producer_epoch=3, base_sequence=11, partition_leader_epoch=5)
        (b,) = list(records.iter_batches(batch))
        stamps = [r[3] for r in recs]
        assert (7, 7 + len(recs) - 1, len(recs) - 1) == (b.base_offset, b.last_offset,
                                                         b.last_offset_delta)
        assert len(recs) == b.records_count == len(b)
        assert (stamps[0], max(stamps)) == (b.base_timestamp, b.max_timestamp)
        assert (compression, CODEC_IDS[compression]) == (b.compression, b.compression_type)
        assert (42, 3, 11, 5) == (b.producer_id, b.producer_epoch, b.base_sequence,
                                  b.partition_leader_epoch)
        assert (11 + len(recs) - 1) & 0x7FFFFFFF == b.last_sequence
        assert (2, "create", False, False) == (b.magic, b.timestamp_type, b.is_transactional,
                                               b.is_control)
        assert len(batch) == b.size_in_bytes == b.length + records.LOG_OVERHEAD
        assert bytes(b.raw) == batch
        assert b.is_valid()

    @pytest.mark.parametrize("compression", CODECS)
    def test_nulls_and_empties(self, compression):
        """Null and empty keys, values and header values stay distinct."""
        values = [None, b"", b"x", None, b""]
        keys = [b"", None, None, b"k", b""]
        headers = [None, [], [("", None)], [("a", b"")], [("é✓😀", None), ("a", b"1"), ("a", b"2")]]
        batch = records.encode_batch(values, keys=keys, headers=headers, timestamps=9,
                                     compression=compression)
        want = [(i, 9, keys[i], values[i], tuple(headers[i] or ())) for i in range(5)]
        assert want == decoded(batch) == arrow_rows(batch)

    @pytest.mark.parametrize("ts", [-1, 0, 1, INT64_MAX])
    @pytest.mark.parametrize("other", [-1, 0, INT64_MAX])
    def test_timestamp_extremes(self, ts, other):
        """Timestamp deltas between extremes wrap as Java's long arithmetic does and read back."""
        batch = records.encode_batch([b"a", b"b", b"c"], timestamps=[ts, other, ts])
        assert [ts, other, ts] == [r[1] for r in decoded(batch)] == [r[1] for r in arrow_rows(batch)]

    @pytest.mark.parametrize("compression", CODECS)
    def test_huge_batch(self, compression):
        """100,000 records in one batch: records(), decode_arrow and the header agree."""
        n = 100_000
        values = [i.to_bytes(4, "big") * (i % 7) for i in range(n)]
        keys = [None if i % 3 == 0 else b"k%d" % i for i in range(n)]
        stamps = np.arange(1_700_000_000_000, 1_700_000_000_000 + n, dtype=np.int64)
        batch = records.encode_batch(values, keys=keys, timestamps=stamps, compression=compression)
        (b,) = list(records.iter_batches(batch))
        assert (n, n - 1, int(stamps[-1])) == (b.records_count, b.last_offset_delta, b.max_timestamp)
        recs = b.records()
        assert n == len(recs)
        assert values == [r.value for r in recs]
        assert keys == [r.key for r in recs]
        table = records.decode_arrow(batch)
        assert values == table.column("value").to_pylist()
        assert stamps.tolist() == table.column("timestamp").cast(pa.int64()).to_pylist()
        assert list(range(n)) == table.column("offset").to_pylist()

    def test_several_batches_concatenated(self):
        """iter_batches and decode_arrow walk every batch of a buffer, in order."""
        parts = [records.encode_batch([b"v%d" % i] * (i + 1), base_offset=10 * i, timestamps=i,
                                      compression=c) for i, c in enumerate(CODECS)]
        buf = b"".join(parts)
        want = [(10 * i + j, i, None, b"v%d" % i, ()) for i in range(5) for j in range(i + 1)]
        assert want == decoded(buf) == arrow_rows(buf)
        it = records.iter_batches(buf)
        assert [sum(map(len, parts[:i])) for i in range(5)] == [b.position for b in it]
        assert (len(buf), 0) == (it.position, it.incomplete_bytes)

    @given(deltas=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=20, unique=True))
    def test_offset_deltas(self, deltas):
        """Explicit offset deltas (compacted data) read back as base_offset + delta."""
        deltas.sort()
        batch = records.encode_batch([b"x"] * len(deltas), base_offset=100, offset_deltas=deltas,
                                     timestamps=1)
        assert [100 + d for d in deltas] == [r[0] for r in decoded(batch)]
        assert [100 + d for d in deltas] == [r[0] for r in arrow_rows(batch)]
        assert deltas[-1] == next(iter(records.iter_batches(batch))).last_offset_delta

    def test_offset_deltas_must_increase(self):
        """Offset deltas that do not strictly increase are refused."""
        with pytest.raises(ValueError, match="strictly increase"):
            records.encode_batch([b"a", b"b"], offset_deltas=[1, 1])
        with pytest.raises(ValueError, match="negative"):
            records.encode_batch([b"a"], offset_deltas=[-1])


class TestInputShapes:
    arrow_types = [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()]

    @pytest.mark.parametrize("typ", arrow_types)
    @pytest.mark.parametrize("compression", ["none", "zstd"])
    @given(items=st.lists(nullable_bytes, min_size=1, max_size=30), start=st.integers(0, 5))
    def test_arrow_arrays(self, typ, compression, items, start):
        """pyarrow binary/large_binary/string/large_string arrays (with nulls, sliced) encode as lists do."""
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            items = [None if x is None else x.hex().encode() for x in items]
            arr = pa.array([None if x is None else x.decode() for x in items], type=typ)
        else:
            arr = pa.array(items, type=typ)
        assume(start < len(items))
        arr, items = arr.slice(start), items[start:]
        from_arrow = records.encode_batch(arr, keys=arr, timestamps=5, compression=compression)
        from_list = records.encode_batch(items, keys=items, timestamps=5, compression=compression)
        assert decoded(from_list) == decoded(from_arrow)
        if compression == "none":
            assert from_list == from_arrow
        assert [(i, 5, x, x, ()) for i, x in enumerate(items)] == arrow_rows(from_arrow)

    def test_chunked_and_view_arrays(self):
        """Chunked arrays and binary_view arrays are accepted too."""
        chunked = pa.chunked_array([[b"a", None], [b"ccc"]], type=pa.binary())
        want = [(0, 1, b"a", b"a", ()), (1, 1, None, None, ()), (2, 1, b"ccc", b"ccc", ())]
        assert want == decoded(records.encode_batch(chunked, keys=chunked, timestamps=1))
        if hasattr(pa, "binary_view"):
            view = pa.array([b"a", None, b"ccc"], type=pa.binary_view())
            assert want == decoded(records.encode_batch(view, keys=view, timestamps=1))

    def test_arrow_wrong_type_or_length(self):
        """An Arrow array of the wrong type or length is refused with a clear error."""
        with pytest.raises(TypeError, match="int64"):
            records.encode_batch(pa.array([1, 2]))
        with pytest.raises(ValueError, match="2 entries but there are 3"):
            records.encode_batch([b"a"] * 3, keys=pa.array([b"a", b"b"]))

    def test_bytes_like_values(self):
        """bytearray, memoryview and numpy buffers are read as bytes."""
        vals = [bytearray(b"ab"), memoryview(b"cd"), np.frombuffer(b"ef", dtype=np.uint8)]
        assert [b"ab", b"cd", b"ef"] == [r[3] for r in decoded(records.encode_batch(vals, timestamps=1))]

    def test_str_values_refused(self):
        """A str value is an error that says to encode it (Kafka values are bytes)."""
        with pytest.raises(TypeError, match="encode the string"):
            records.encode_batch(["text"])
        with pytest.raises(TypeError, match="not bytes-like"):
            records.encode_batch([12])

    @pytest.mark.parametrize("make", [
        lambda ts: np.asarray(ts, dtype=np.int64),
        lambda ts: np.asarray(ts, dtype=np.int32),
        lambda ts: list(ts),
        lambda ts: tuple(ts),
        lambda ts: pa.array(ts, type=pa.int64()).to_numpy(),
    ])
    def test_timestamp_sequences(self, make):
        """Timestamps as numpy int64/int32 arrays, lists or tuples."""
        ts = [5, -1, 2**31 - 1]
        assert ts == [r[1] for r in decoded(records.encode_batch([b"a"] * 3, timestamps=make(ts)))]

    def test_numpy_scalar_timestamp(self):
        """A numpy int64 scalar is one timestamp for every record, like an int."""
        batch = records.encode_batch([b"a", b"b"], timestamps=np.int64(1234))
        assert [1234, 1234] == [r[1] for r in decoded(batch)]

    def test_default_timestamp_is_now(self):
        """Without timestamps, every record gets the current time in ms."""
        import time

        before = time.time_ns() // 1_000_000
        batch = records.encode_batch([b"a", b"b"])
        after = time.time_ns() // 1_000_000
        stamps = {r[1] for r in decoded(batch)}
        assert 1 == len(stamps) and before <= stamps.pop() <= after

    def test_column_length_mismatch(self):
        """keys, headers and timestamps must have one entry per value."""
        with pytest.raises(ValueError, match="keys has 1 entries"):
            records.encode_batch([b"a", b"b"], keys=[b"k"])
        with pytest.raises(ValueError, match="headers has 1 entries"):
            records.encode_batch([b"a", b"b"], headers=[None])
        with pytest.raises(ValueError, match="timestamps has shape"):
            records.encode_batch([b"a", b"b"], timestamps=[1])

    def test_bad_headers(self):
        """Header keys must be str and entries (key, value) pairs."""
        with pytest.raises(TypeError, match="header keys are str"):
            records.encode_batch([b"a"], headers=[[(b"k", b"v")]])
        with pytest.raises(ValueError, match="not a \\(key, value\\) pair"):
            records.encode_batch([b"a"], headers=[[("k", b"v", b"w")]])
        with pytest.raises(UnicodeEncodeError):
            records.encode_batch([b"a"], headers=[[("\ud800", b"v")]])

    def test_unknown_compression(self):
        """An unknown codec name is refused, naming the choices."""
        from pylog.errors import UnsupportedCompressionTypeError

        with pytest.raises(UnsupportedCompressionTypeError, match="gzip"):
            records.encode_batch([b"a"], compression="brotli")


class TestEncodeValidation:
    """encode_batch refuses what Kafka would refuse to write (issue 2, fix d)."""

    def test_empty_input_refused(self):
        """No records is an error: Kafka never writes an empty batch of records."""
        for values in ([], (), pa.array([], type=pa.binary())):
            with pytest.raises(ValueError, match="at least one record"):
                records.encode_batch(values)

    @pytest.mark.parametrize("bad", [-2, -1000, INT64_MIN])
    def test_timestamp_below_minus_one_refused(self, bad):
        """A timestamp below -1 (NO_TIMESTAMP) is an InvalidTimestampError naming it, in every input form."""
        for ts in (bad, [0, bad], np.array([0, bad], dtype=np.int64), np.int64(bad)):
            n = 1 if np.ndim(ts) == 0 else 2
            with pytest.raises(InvalidTimestampError, match=str(bad)) as info:
                records.encode_batch([b"a"] * n, timestamps=ts)
            assert isinstance(info.value, ValueError)
        with pytest.raises(InvalidTimestampError, match=r"timestamps\[1\]"):
            records.encode_batch([b"a", b"b"], timestamps=[0, bad])

    def test_transactional_needs_producer_id(self):
        """transactional=True without a producer id is refused, naming the problem."""
        with pytest.raises(ValueError, match="transactional batch needs a producer id"):
            records.encode_batch([b"a"], transactional=True)
        batch = records.encode_batch([b"a"], transactional=True, producer_id=7, producer_epoch=0,
                                     base_sequence=0)
        (b,) = list(records.iter_batches(batch))
        assert (True, 7) == (b.is_transactional, b.producer_id)

    def test_control_batch_needs_producer_id(self):
        """A transaction marker without a producer id is refused."""
        with pytest.raises(ValueError, match="control batch needs a producer id"):
            records.encode_control_batch("commit", producer_id=-1, producer_epoch=0)
        with pytest.raises(InvalidTimestampError):
            records.encode_control_batch("commit", producer_id=1, producer_epoch=0, timestamp=-2)

    def test_producer_epoch_range(self):
        """producer_epoch must fit Kafka's int16."""
        with pytest.raises(ValueError, match="int16"):
            records.encode_batch([b"a"], producer_epoch=40000)

    def test_record_too_large_is_refused_not_truncated(self):
        """Too many records for one batch is a MessageTooLargeError, not a wrapped count."""
        class Huge:
            def __len__(self):
                return 2**31

        with pytest.raises(MessageTooLargeError):
            records.encode_batch(Huge())


class TestLogAppendTime:
    """With LogAppendTime every record's timestamp is the batch maxTimestamp (issue 2, fix c)."""

    @pytest.mark.parametrize("compression", CODECS)
    def test_records_take_max_timestamp(self, compression):
        """Per-record timestamps are ignored: every record reads maxTimestamp."""
        batch = records.encode_batch([b"a", b"b", b"c"], timestamps=[10, 30, 20],
                                     timestamp_type="log_append", compression=compression)
        (b,) = list(records.iter_batches(batch))
        assert ("log_append", 30) == (b.timestamp_type, b.max_timestamp)
        assert [30, 30, 30] == [r[1] for r in decoded(batch)] == [r[1] for r in arrow_rows(batch)]

    @pytest.mark.parametrize("max_ts", [-1, -5, INT64_MIN, 0])
    @pytest.mark.parametrize("compression", ["none", "gzip"])
    def test_negative_max_timestamp(self, max_ts, compression):
        """A LogAppendTime batch whose maxTimestamp is negative still gives every record maxTimestamp."""
        batch = records.encode_batch([b"a", b"b"], timestamps=[100, 200], compression=compression)
        batch = set_field(batch, ATTRIBUTES, get_field(batch, ATTRIBUTES) | ATTR_TIMESTAMP_TYPE)
        batch = set_field(batch, MAX_TIMESTAMP, max_ts)
        assert 100 == get_field(batch, BASE_TIMESTAMP)
        assert [max_ts, max_ts] == [r[1] for r in decoded(batch)]
        assert [max_ts, max_ts] == [r[1] for r in arrow_rows(batch)]

    def test_create_time_uses_deltas(self):
        """CreateTime batches read base timestamp + delta, whatever maxTimestamp says."""
        batch = records.encode_batch([b"a", b"b"], timestamps=[100, 200])
        batch = set_field(batch, MAX_TIMESTAMP, -1)
        assert [100, 200] == [r[1] for r in decoded(batch)] == [r[1] for r in arrow_rows(batch)]


class TestRecordObject:
    def test_record_behaves_like_a_tuple(self):
        """Record unpacks, compares, hashes and pickles by value."""
        import pickle

        r = records.Record(1, 2, b"k", b"v", [("h", None)])
        assert (1, 2, b"k", b"v", (("h", None),)) == tuple(r)
        assert r == pickle.loads(pickle.dumps(r))
        assert hash(r) == hash(records.Record(1, 2, b"k", b"v", (("h", None),)))
        assert r != records.Record(1, 2, b"k", b"w")

    def test_record_batch_not_constructible(self):
        """RecordBatch comes from iter_batches only."""
        with pytest.raises(TypeError):
            records.RecordBatch()


class TestEmptyBatch:
    def test_header_only_batch_reads_as_empty(self):
        """A batch with no records (as Kafka's log cleaner keeps for producer state) reads as empty."""
        from record.codec_support import v2_batch

        empty = v2_batch(b"", count=0, base_offset=50, last_offset_delta=3, producer_id=9,
                         producer_epoch=1, base_sequence=4)
        (b,) = list(records.iter_batches(empty))
        assert ([], 53, 9) == (b.records(), b.last_offset, b.producer_id)
        assert 0 == records.decode_arrow(empty).num_rows
        scan = records.scan_batches(empty)
        assert (len(empty), 1, 0, None) == (scan.valid_bytes, scan.batches, scan.records, scan.error)

    def test_empty_buffer(self):
        """An empty buffer holds no batches and no torn tail."""
        it = records.iter_batches(b"")
        assert [] == list(it)
        assert 0 == it.incomplete_bytes
        assert 0 == records.decode_arrow(b"").num_rows
        assert records.ARROW_SCHEMA == records.decode_arrow(b"").schema


@settings(max_examples=15)
@given(recs=record_lists, compression=st.sampled_from(CODECS))
def test_decode_arrow_schema_is_stable(recs, compression):
    """decode_arrow always returns ARROW_SCHEMA for batches under 2 GiB."""
    assert records.ARROW_SCHEMA == records.decode_arrow(encode(recs, compression=compression)).schema


def test_corrupt_record_error_is_value_error():
    """CorruptRecordError is a ValueError with Kafka's code 2."""
    assert issubclass(CorruptRecordError, ValueError)
    assert 2 == CorruptRecordError.code


@pytest.mark.parametrize("compression", CODECS)
@given(values=st.lists(nullable_bytes, min_size=1, max_size=60), keyed=st.booleans(),
       data=st.data())
def test_encode_groups_writes_encode_batchs_bytes_for_each_group(compression, values, keyed, data):
    """encode_groups (send_batch's encoder for the small batches of one call) gives,
    for each group of rows, exactly the batch encode_batch gives for those rows:
    in any order, with nulls, bytes-likes, keys or none, sequences or none."""
    n = len(values)
    keys = data.draw(st.lists(nullable_bytes, min_size=n, max_size=n)) if keyed else None
    values = [bytearray(v) if v is not None and i % 7 == 3 else v for i, v in enumerate(values)]
    rows = data.draw(st.permutations(range(n)))
    cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=4))) if n > 1 else []
    groups = [np.array(rows[a:b], dtype=np.int64) for a, b in zip([0] + cuts, cuts + [n])]
    sequences = data.draw(st.one_of(st.none(), st.lists(st.integers(0, 2**31 - 1),
                                                        min_size=len(groups), max_size=len(groups))))
    ids = {} if sequences is None else {"producer_id": 77, "producer_epoch": 3}
    out = records.encode_groups(values, keys, 1_700_000_000_000, groups, compression=compression,
                                base_sequences=sequences, **ids)
    assert len(out) == len(groups)
    for g, (group, batch) in enumerate(zip(groups, out)):
        expected = records.encode_batch(
            [values[i] for i in group], None if keys is None else [keys[i] for i in group],
            1_700_000_000_000, compression=compression,
            base_sequence=-1 if sequences is None else sequences[g], **ids)
        assert batch == expected


@pytest.mark.parametrize("compression", ["none", "lz4"])
@given(sizes=st.lists(st.one_of(st.none(), st.integers(0, 20_000)), min_size=1, max_size=300),
       keyed=st.booleans(), ts=timestamps, data=st.data())
def test_plain_lists_take_the_general_encoders_bytes(compression, sizes, keyed, ts, data):
    """Lists of bytes with one timestamp and no headers take a loop of their own
    (records_encode.c, encode_plain), also when that timestamp comes as an int64 array
    of one value; explicit offset deltas 0..n-1 take the general one. All write
    the same batch, byte for byte: lengths of one to three varint bytes, over 64
    and over 8,192 offset deltas, nulls, no keys."""
    values = [None if n is None else bytes([n % 251]) * n for n in sizes]
    keys = data.draw(st.lists(nullable_bytes, min_size=len(values), max_size=len(values))) \
        if keyed else None
    plain = records.encode_batch(values, keys, ts, compression=compression)
    constant_array = records.encode_batch(values, keys, np.full(len(values), ts, dtype=np.int64),
                                          compression=compression)
    general = records.encode_batch(values, keys, ts, compression=compression,
                                   offset_deltas=np.arange(len(values), dtype=np.int32))
    assert plain == constant_array == general
    if len(values) > 1 and ts < INT64_MAX:
        # One timestamp apart: not constant, the timed plain loop, its own delta.
        stamps = np.full(len(values), ts, dtype=np.int64)
        stamps[-1] = ts + 1
        mixed = records.encode_batch(values, keys, stamps, compression=compression)
        assert mixed == records.encode_batch(values, keys, stamps, compression=compression,
                                             offset_deltas=np.arange(len(values), dtype=np.int32))
        assert [r[1] for r in decoded(mixed)] == stamps.tolist()
    assert [(i, ts, None if keys is None else keys[i], v, ()) for i, v in enumerate(values)] == \
        decoded(plain)




@pytest.mark.parametrize("count,key_len,value_len", [
    (1300, 8, 100),                     # send_batch's 10,000-record calls: 8 chunks like this
    (1300, None, 100),
    (1300, 63, 64),                     # a key of one varint byte, a value of two
    (1300, None, range(64, 128)),       # lengths that differ, all of two varint bytes
    (2300, None, 57),                   # records of 63 B, then 64 from offset 64: straddle
    (2000, None, range(60, 70)),        # value lengths straddle 64
    (9000, 6, 8),                       # offset deltas of one, two and three bytes
    (17, 8192, 8192),
    (200, 1000, None),                  # null values
])
def test_big_plain_batches_are_sized_as_the_general_loop_sizes_them(count, key_len, value_len):
    """A batch bigger than the one-pass limit (128 KiB) is sized before it is
    written. Columns whose lengths share one varint size are sized in closed
    form (records_encode.c, size_uniform); columns that straddle one are sized record
    by record. Either way the batch is the general loop's, byte for byte: a
    size one byte off would be a SystemError or a wrong batch length."""
    def lengths(spec):
        return [spec[i % len(spec)] for i in range(count)] if isinstance(spec, range) else \
            [spec] * count
    values = [None if n is None else bytes([i % 251]) * n for i, n in enumerate(lengths(value_len))]
    keys = None if key_len is None else [b"k" * n for n in lengths(key_len)]
    plain = records.encode_batch(values, keys, 1_700_000_000_000)
    assert len(plain) > 128 << 10
    assert plain == records.encode_batch(values, keys, 1_700_000_000_000,
                                         offset_deltas=np.arange(count, dtype=np.int32))
    assert [(i, None if keys is None else keys[i], v) for i, v in enumerate(values)] == \
        [(r[0], r[2], r[3]) for r in decoded(plain)]


@pytest.mark.parametrize("compression", ["none", "zstd"])
@given(stamps=st.lists(st.one_of(st.integers(-1, INT64_MAX), st.sampled_from([-1, 0, INT64_MAX]),
                                 st.integers(1_700_000_000_000, 1_700_000_100_000)),
                       min_size=1, max_size=200),
       keyed=st.booleans(), data=st.data())
def test_plain_lists_with_a_timestamp_each_take_the_general_encoders_bytes(
        compression, stamps, keyed, data):
    """Lists of bytes with a timestamp array of several values (send()'s batches
    whose records span milliseconds) take the timed plain loop: the same batch
    as the general loop (forced by explicit offset deltas), byte for byte, with
    deltas of one to ten varint bytes, negative ones and ones that wrap int64;
    the batch's base and max timestamps as Kafka's builder sets them."""
    n = len(stamps)
    values = data.draw(st.lists(nullable_bytes, min_size=n, max_size=n))
    keys = data.draw(st.lists(nullable_bytes, min_size=n, max_size=n)) if keyed else None
    array = np.array(stamps, dtype=np.int64)
    timed = records.encode_batch(values, keys, array, compression=compression)
    general = records.encode_batch(values, keys, array, compression=compression,
                                   offset_deltas=np.arange(n, dtype=np.int32))
    assert timed == general
    assert timed == records.encode_batch(values, keys, stamps, compression=compression)
    assert [r[1] for r in decoded(timed)] == stamps
    (b,) = list(records.iter_batches(timed))
    assert (b.base_timestamp, b.max_timestamp) == (stamps[0], max(stamps))

def test_plain_lists_of_many_records_count_offset_deltas_in_three_varint_bytes():
    """Offset deltas past 8,191 take three varint bytes in the plain loop too."""
    values = [b"v%d" % i for i in range(20_000)]
    plain = records.encode_batch(values, None, 7)
    assert plain == records.encode_batch(values, None, 7,
                                         offset_deltas=np.arange(20_000, dtype=np.int32))
    assert [r[3] for r in decoded(plain)] == values


@given(stamps=st.lists(st.integers(-1, INT64_MAX), min_size=1, max_size=50))
def test_a_list_of_timestamps_encodes_as_the_same_int64_array(stamps):
    """A list of int timestamps (the producer's batches) is read in a C loop; it
    writes the batch an int64 array of the same values writes."""
    values = [b"v%d" % i for i in range(len(stamps))]
    assert records.encode_batch(values, None, stamps) == \
        records.encode_batch(values, None, np.array(stamps, dtype=np.int64))


def test_a_list_of_timestamps_names_what_is_wrong():
    values = [b"a", b"b", b"c"]
    with pytest.raises(InvalidTimestampError, match=r"timestamps\[1\] = -2 is invalid"):
        records.encode_batch(values, None, [5, -2, 7])
    with pytest.raises(InvalidTimestampError, match=rf"timestamps\[1\] = {2**63} is invalid"):
        records.encode_batch(values, None, [5, 2**63, 7])         # was a bare OverflowError
    # Items that are not ints take numpy's conversion: numpy ints and bools are taken.
    assert records.encode_batch(values, None, [np.int64(5), 6, True]) == \
        records.encode_batch(values, None, np.array([5, 6, 1], dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        records.encode_batch(values, None, [5, 6])


def test_encode_groups_names_what_is_wrong():
    values = [b"a", b"b", "text", None]
    ok = [np.array([0, 1], dtype=np.int64)]
    with pytest.raises(TypeError, match=r"values\[2\] is a str, not bytes-like or None "
                                        r"\(encode the string first\)"):
        records.encode_groups(values, None, 0, [np.array([0, 2], dtype=np.int64)])
    with pytest.raises(IndexError, match="row 9 is outside the 4 records"):
        records.encode_groups(values, None, 0, [np.array([9], dtype=np.int64)])
    for rows in (np.array([0], dtype=np.int32), np.arange(4, dtype=np.int64)[::2], [0, 1]):
        with pytest.raises(TypeError, match="contiguous one-dimensional int64 array"):
            records.encode_groups(values, None, 0, [rows])
    with pytest.raises(ValueError, match="group 0 is empty"):
        records.encode_groups(values, None, 0, [np.array([], dtype=np.int64)])
    with pytest.raises(ValueError, match="keys must be None or a list as long as values"):
        records.encode_groups(values, [b"k"], 0, ok)
    with pytest.raises(InvalidTimestampError, match="timestamp -2 is invalid"):
        records.encode_groups(values, None, -2, ok)
    with pytest.raises(ValueError, match="2 base sequences for 1 groups"):
        records.encode_groups(values, None, 0, ok, base_sequences=[0, 1])


class TestArrowMemory:
    """decode_arrow's columns live in one block from Arrow's memory pool, handed to
    Arrow through the C Data Interface: Arrow accounts for it, and it is freed when
    the last array that uses it goes, whichever thread drops it."""

    def batch(self):
        return records.encode_batch([b"v" * 1000] * 500, keys=[b"k"] * 500,
                                    headers=[[("h", b"x")]] * 500)

    def test_the_block_is_arrows_and_goes_with_the_last_array(self):
        import gc

        data = self.batch()
        gc.collect()
        before = pa.total_allocated_bytes()
        rb = records.decode_arrow(data)
        held = pa.total_allocated_bytes() - before
        assert held >= 500 * 1000          # the values, at least
        value = rb.column("value").slice(10, 5)     # a slice keeps the block
        del rb
        assert pa.total_allocated_bytes() - before == held
        assert [b"v" * 1000] * 5 == value.to_pylist()
        del value
        assert pa.total_allocated_bytes() == before

    def test_a_batch_dropped_in_another_thread_frees_its_block(self):
        import threading

        data = self.batch()
        before = pa.total_allocated_bytes()
        batches = [records.decode_arrow(data, timestamp_type=True) for _ in range(20)]
        assert pa.total_allocated_bytes() > before

        def drop():
            for rb in batches:
                assert 500 == rb.num_rows
            batches.clear()
        t = threading.Thread(target=drop)
        t.start()
        t.join()
        assert pa.total_allocated_bytes() == before

    def test_every_column_kind_is_valid_arrow(self):
        """Nulls and no nulls in each nullable column, headers and none, both
        timestamp types: Arrow's full validation passes, the columns read back."""
        rows = [(None, b"a", [], 5), (b"k", None, [("x", None), ("y", b"")], 6),
                (b"", b"", [("z", b"1")], 7)]
        for recs in (rows, rows[2:], [(b"k", b"v", [], 1)]):
            data = encode(recs)
            rb = records.decode_arrow(data, timestamp_type=True)
            rb.validate(full=True)
            assert expected_rows(recs) == arrow_rows(data)
            assert [0] * len(recs) == rb.column("timestamp_type").to_pylist()
        empty = records.decode_arrow(b"", timestamp_type=True)
        empty.validate(full=True)
        assert (0, 6) == (empty.num_rows, empty.num_columns)


@pytest.mark.parametrize("make", [
    lambda ts: np.asarray(ts, dtype=">i8"),                    # big-endian: converted
    lambda ts: np.repeat(np.asarray(ts, dtype=np.int64), 2)[::2],   # strided: copied
    lambda ts: np.asarray(ts, dtype=np.uint64),
    lambda ts: np.asarray(ts, dtype=np.float64),
    lambda ts: np.asarray(ts, dtype=np.int64).reshape(1, -1)[0],
])
def test_every_numpy_timestamp_array_encodes_as_a_native_int64_array(make):
    """A contiguous native int64 ndarray is read through its buffer; any other
    array (byte order, stride, dtype) is converted first: the same bytes."""
    stamps = [1_700_000_000_000, 5, 1_700_000_000_007, 0]
    values = [b"a", b"b", b"c", b"d"]
    want = records.encode_batch(values, None, list(stamps))
    arr = make(stamps)
    assert records.encode_batch(values, None, arr) == want
    readonly = np.asarray(stamps, dtype=np.int64)
    readonly.flags.writeable = False
    assert records.encode_batch(values, None, readonly) == want


def test_a_native_int64_array_names_a_bad_timestamp_and_its_length():
    values = [b"a", b"b", b"c"]
    with pytest.raises(InvalidTimestampError, match=r"timestamps\[2\] = -5 is invalid"):
        records.encode_batch(values, None, np.array([1, 2, -5], dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        records.encode_batch(values, None, np.array([1, 2], dtype=np.int64))
    with pytest.raises(ValueError, match="shape"):
        records.encode_batch(values, None, np.zeros((3, 1), dtype=np.int64))


def test_a_list_column_is_kept_alive_and_released_whatever_its_items():
    """A list is copied into a tuple and gathered in one pass: bytes-likes after
    the first non-bytes item are still gathered, and every reference taken is
    given back."""
    import sys

    items = [b"x" * 10, None, bytearray(b"yy"), b"z", memoryview(b"w" * 3)]
    counts = [sys.getrefcount(i) for i in items if i is not None]    # None's moves anyway
    batch = records.encode_batch(items, items[::-1], 9)
    assert [sys.getrefcount(i) for i in items if i is not None] == counts
    assert [(r[2], r[3]) for r in decoded(batch)] == [
        (None if k is None else bytes(k), None if v is None else bytes(v))
        for k, v in zip(items[::-1], items)]
    with pytest.raises(TypeError, match=r"values\[2\] is a int"):
        records.encode_batch([b"a", b"b", 3, b"c"])
    with pytest.raises(ValueError, match="keys has 2 entries but there are 3 records"):
        records.encode_batch([b"a", b"b", b"c"], [b"k", b"k"])


def test_encode_groups_gathers_any_bytes_like_after_bytes_and_gives_every_reference_back():
    """Each group's bytes and None are gathered in one C loop that stops at the
    first other item; the rest of the group is read item by item: the same
    batches as encode_batch of the rows, and no reference kept."""
    import sys

    values = [b"a" * 5, None, bytearray(b"bb"), b"c", memoryview(b"ddd"), b"e"]
    keys = [b"k%d" % i for i in range(len(values))]
    groups = [np.array([0, 1, 2, 3], dtype=np.int64), np.array([5, 4, 0], dtype=np.int64)]
    def counts():       # None's count moves with everything else in the process
        return [sys.getrefcount(v) for v in values if v is not None]

    before = counts()
    out = records.encode_groups(values, keys, 7, groups)
    assert counts() == before
    for batch, rows in zip(out, groups):
        assert batch == records.encode_batch([values[r] for r in rows], [keys[r] for r in rows], 7)
    with pytest.raises(IndexError, match="row -1 is outside the 6 records"):
        records.encode_groups(values, None, 0, [np.array([0, -1], dtype=np.int64)])
    assert counts() == before
