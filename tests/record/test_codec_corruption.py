"""Corrupt, truncated and random input: the codec never crashes and says where.

Every reader (iter_batches + records(), decode_arrow, scan_batches,
upconvert) either returns records, reports a torn tail (a trailing partial
batch: BatchIterator.incomplete_bytes, ScanResult.incomplete_bytes) or raises
CorruptRecordError whose message starts "batch at byte N: " and whose
``position`` is N, the batch's byte position in the caller's buffer; a
checksum failure also names the stored and computed CRC. Anything else (a
different exception, a crash) is a bug.
"""

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog import records
from pylog.errors import CorruptRecordError, InvalidRecordError
from pylog import compression as pylog_compression
from record.codec_support import (
    ATTRIBUTES,
    BASE_OFFSET,
    CRC,
    LEADER_EPOCH,
    LENGTH,
    MAGIC,
    RECORDS,
    RECORDS_COUNT,
    arrow_rows,
    crc32c,
    decoded,
    fix_crc,
    flip_bit,
    get_field,
    legacy_message,
    set_field,
    v2_batch,
)


def small_batch(compression="none", **kw):
    return records.encode_batch([b"v0", None, b"value-2"], keys=[b"k", None, b""],
                                headers=[[("h", b"1")], None, [("\u00e9", None)]],
                                timestamps=[1000, 1001, 999], compression=compression,
                                base_offset=kw.pop("base_offset", 10), **kw)


PREFIX = records.encode_batch([b"ok-1", b"ok-2"], base_offset=0, timestamps=5)
PREFIX_ROWS = [(0, 5, None, b"ok-1", ()), (1, 5, None, b"ok-2", ())]


def read_all(buffer, *, validate=True):
    """Runs every reader over buffer; returns what they agree on, or the CorruptRecordError.

    Returns ("ok", rows, incomplete_bytes) or ("corrupt", error). Any other
    exception escapes and fails the test.
    """
    outcomes = []
    try:
        it = records.iter_batches(buffer, validate=validate)
        rows = [tuple(r) for b in it for r in b.records()]
        outcomes.append(("ok", rows, it.incomplete_bytes))
    except CorruptRecordError as exc:
        outcomes.append(("corrupt", exc))
    try:
        arrow = arrow_rows(buffer, validate=validate, include_control=True)
    except CorruptRecordError as exc:
        arrow = exc
    if outcomes[0][0] == "ok":
        assert outcomes[0][1] == arrow, "records() and decode_arrow disagree"
    else:
        assert isinstance(arrow, CorruptRecordError), "records() failed but decode_arrow did not"
        assert arrow.position == outcomes[0][1].position
    if validate:
        scan = records.scan_batches(buffer)
        if outcomes[0][0] == "ok":
            assert (None, outcomes[0][2]) == (scan.error, scan.incomplete_bytes)
            assert len(buffer) - scan.incomplete_bytes == scan.valid_bytes
        elif scan.error is not None:
            # scan_batches checks headers and CRCs only, so it may stop at a batch whose
            # records fail later; if it found an error, it is the same batch.
            assert scan.error.position == outcomes[0][1].position
            assert scan.valid_bytes == scan.error.position
    return outcomes[0]


def assert_names_batch(exc, position):
    assert isinstance(exc, CorruptRecordError)
    assert position == exc.position
    assert str(exc).startswith(f"batch at byte {position}: "), str(exc)


def assert_crc_error(exc, position, stored=None, computed=None):
    assert_names_batch(exc, position)
    assert exc.stored_crc is not None and exc.computed_crc is not None
    assert exc.stored_crc != exc.computed_crc
    if stored is not None:
        assert stored == exc.stored_crc
    if computed is not None:
        assert computed == exc.computed_crc
    assert f"stored crc = 0x{exc.stored_crc:08x}" in str(exc)
    assert f"computed crc = 0x{exc.computed_crc:08x}" in str(exc)


class TestTruncation:
    @pytest.mark.parametrize("compression", ["none", "gzip", "zstd"])
    def test_truncated_at_every_byte(self, compression):
        """Cut anywhere, the complete batches before the cut are read and the rest is a torn tail."""
        second = small_batch(compression)
        buf = PREFIX + second
        want_second = decoded(second)
        for cut in range(len(buf) + 1):
            data = buf[:cut]
            kind, *rest = read_all(data)
            assert "ok" == kind, (cut, rest)
            rows, incomplete = rest
            if cut < len(PREFIX):
                assert ([], cut) == (rows, incomplete)
            elif cut < len(buf):
                assert (PREFIX_ROWS, cut - len(PREFIX)) == (rows, incomplete)
            else:
                assert (PREFIX_ROWS + want_second, 0) == (rows, incomplete)
            it = records.iter_batches(data)
            list(it)
            assert it.position == (len(PREFIX) if len(PREFIX) <= cut < len(buf) else
                                   0 if cut < len(PREFIX) else len(buf))

    def test_truncated_legacy_message_set(self):
        """Legacy messages cut anywhere are torn tails too."""
        buf = legacy_message(1, 0, b"k", b"v", timestamp=3) + legacy_message(0, 1, None, b"w")
        first = len(legacy_message(1, 0, b"k", b"v", timestamp=3))
        for cut in range(len(buf)):
            kind, rows, incomplete = read_all(buf[:cut])
            assert "ok" == kind
            assert (cut - first if cut >= first else cut) == incomplete
            assert ([(0, 3, b"k", b"v", ())] if cut >= first else []) == rows

    def test_upconvert_of_truncated_buffer(self):
        """upconvert leaves a torn tail out rather than failing."""
        buf = legacy_message(1, 0, b"k", b"v", timestamp=3)
        for cut in range(len(buf)):
            assert b"" == records.upconvert(buf[:cut])


class TestBitFlips:
    @pytest.mark.parametrize("compression", ["none", "gzip", "lz4"])
    def test_every_bit_of_a_small_batch(self, compression):
        """Each single-bit flip is caught by the CRC, or lands outside it (offset, leader epoch)."""
        batch = small_batch(compression)
        crc = get_field(batch, CRC)
        want = decoded(batch)
        n = len(PREFIX)
        for bit in range(len(batch) * 8):
            byte = bit // 8
            flipped = flip_bit(batch, bit)
            outcome = read_all(PREFIX + flipped)
            if BASE_OFFSET <= byte < LENGTH:          # not covered by the CRC: still valid
                base = get_field(flipped, BASE_OFFSET)
                assert ("ok", PREFIX_ROWS + [((base + r[0] - 10 + 2**63) % 2**64 - 2**63,) + r[1:]
                                             for r in want], 0) == outcome
            elif LEADER_EPOCH <= byte < MAGIC:        # not covered either: only the epoch changes
                assert ("ok", PREFIX_ROWS + want, 0) == outcome
                (_, b) = records.iter_batches(PREFIX + flipped)
                assert get_field(flipped, LEADER_EPOCH) == b.partition_leader_epoch
            elif LENGTH <= byte < LEADER_EPOCH:       # a longer length is a torn tail
                if outcome[0] == "ok":
                    assert (PREFIX_ROWS, len(flipped)) == outcome[1:]
                    assert get_field(flipped, LENGTH) > get_field(batch, LENGTH)
                else:
                    assert_names_batch(outcome[1], n)
            elif byte == MAGIC:
                assert "corrupt" == outcome[0]
                assert_names_batch(outcome[1], n)
            elif CRC <= byte < ATTRIBUTES:
                assert "corrupt" == outcome[0]
                assert_crc_error(outcome[1], n, stored=get_field(flipped, CRC), computed=crc)
            else:
                assert "corrupt" == outcome[0]
                assert_crc_error(outcome[1], n, stored=crc)

    @pytest.mark.parametrize("compression", ["none", "snappy", "zstd"])
    def test_random_bits_of_a_large_batch(self, compression):
        """Flips at random positions of a 100 KB batch are all caught by the CRC."""
        batch = records.encode_batch([bytes([i % 251]) * 100 for i in range(1000)],
                                     timestamps=1, compression=compression)
        crc = get_field(batch, CRC)
        rng = random.Random(f"large-{compression}")
        for _ in range(200):
            bit = rng.randrange(ATTRIBUTES * 8, len(batch) * 8)
            kind, exc = read_all(flip_bit(batch, bit))
            assert_crc_error(exc, 0, stored=crc)

    @pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
    def test_every_bit_without_crc_check(self, compression):
        """With validate=False the flipped bytes reach the parsers: still never a crash."""
        batch = small_batch(compression)
        for bit in range(ATTRIBUTES * 8, len(batch) * 8):
            kind, *rest = read_all(PREFIX + flip_bit(batch, bit), validate=False)
            if kind == "corrupt":
                assert_names_batch(rest[0], len(PREFIX))

    def test_every_bit_of_a_control_batch(self):
        """Transaction markers are protected like any batch."""
        batch = records.encode_control_batch("commit", producer_id=3, producer_epoch=0,
                                             timestamp=7)
        crc = get_field(batch, CRC)
        for bit in range(ATTRIBUTES * 8, len(batch) * 8):
            kind, exc = read_all(flip_bit(batch, bit))
            assert_crc_error(exc, 0, stored=crc)
        for bit in range(ATTRIBUTES * 8, len(batch) * 8):
            read_all(flip_bit(batch, bit), validate=False)

    def test_every_bit_of_legacy_messages(self):
        """Magic 0/1 messages, plain and compressed, are protected by their CRC-32."""
        wrapper = legacy_message(1, 1, None, pylog_compression.compress(
            1, legacy_message(1, 0, b"a", b"b", timestamp=5) + legacy_message(1, 1, None, b"c")),
            attributes=1, timestamp=6)
        for msg in (legacy_message(0, 4, b"key", b"value"), wrapper):
            for bit in range(16 * 8, len(msg) * 8):
                kind, *rest = read_all(PREFIX + flip_bit(msg, bit))
                assert "corrupt" == kind
                assert_names_batch(rest[0], len(PREFIX))


def wrapped_section(section: bytes, count: int, codec: int = 0) -> bytes:
    """A batch with a CRC-valid but arbitrary records section (compressed with codec)."""
    body = pylog_compression.compress(codec, section) if codec else section
    return v2_batch(body, count=count, attributes=codec)


class TestGarbage:
    @given(data=st.binary(max_size=400))
    def test_random_buffers(self, data):
        """Random bytes: records, a torn tail or CorruptRecordError, from every reader."""
        read_all(data)
        read_all(data, validate=False)
        try:
            records.upconvert(data)
        except (CorruptRecordError, InvalidRecordError):
            pass

    @given(section=st.binary(max_size=200), count=st.integers(-2, 6),
           codec=st.sampled_from([0, 0, 1, 2, 3, 4]))
    def test_random_records_section_behind_a_valid_crc(self, section, count, codec):
        """Garbage records sections with a correct CRC reach the record parser: never a crash."""
        kind, *rest = read_all(PREFIX + wrapped_section(section, count, codec))
        if kind == "corrupt":
            assert_names_batch(rest[0], len(PREFIX))

    @settings(max_examples=150)
    @given(edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                          min_size=1, max_size=4),
           codec=st.sampled_from([0, 1, 2, 3, 4]))
    def test_mutated_records_behind_a_valid_crc(self, edits, codec):
        """A real records section with a few bytes changed, re-checksummed: parsed or refused."""
        good = small_batch()[RECORDS:]
        section = bytearray(good)
        for pos, value in edits:
            section[pos % len(section)] = value
        kind, *rest = read_all(PREFIX + wrapped_section(bytes(section), 3, codec))
        if kind == "corrupt":
            assert_names_batch(rest[0], len(PREFIX))

    @given(attributes=st.integers(0, 255), key=st.one_of(st.none(), st.binary(max_size=30)),
           value=st.one_of(st.none(), st.binary(max_size=60)), magic=st.sampled_from([0, 1]),
           timestamp=st.integers(-(2**63), 2**63 - 1), offset=st.integers(-(2**63), 2**63 - 1))
    def test_random_legacy_messages(self, attributes, key, value, magic, timestamp, offset):
        """CRC-valid legacy messages with arbitrary attributes and payloads: never a crash."""
        msg = legacy_message(magic, offset, key, value, attributes=attributes, timestamp=timestamp)
        for data in (msg, PREFIX + msg):
            kind, *rest = read_all(data)
            if kind == "corrupt":
                assert_names_batch(rest[0], len(data) - len(msg))
            try:
                records.upconvert(data)
            except CorruptRecordError as exc:
                assert_names_batch(exc, len(data) - len(msg))
            except InvalidRecordError as exc:   # readable, but not as one v2 batch
                assert str(exc).startswith(f"batch at byte {len(data) - len(msg)}: ")
                assert "cannot up-convert" in str(exc)

    @given(inner=st.binary(max_size=120), codec=st.sampled_from([1, 2, 3]), magic=st.sampled_from([0, 1]),
           wrapper_offset=st.integers(-5, 50))
    def test_random_compressed_wrappers(self, inner, codec, magic, wrapper_offset):
        """A wrapper whose decompressed value is garbage (or nearly valid) is refused cleanly."""
        value = pylog_compression.compress(codec, inner)
        msg = legacy_message(magic, wrapper_offset, None, value, attributes=codec, timestamp=1)
        kind, *rest = read_all(PREFIX + msg)
        if kind == "corrupt":
            assert_names_batch(rest[0], len(PREFIX))


class TestDecodeArrowChecksCrcsInOnePass:
    """decode_arrow checks the CRCs of uncompressed batches after walking their
    headers, in one GIL-free pass; the error is still the earliest bad batch."""

    def bad_crc(self, batch):
        """The batch with its stored CRC off by one bit (its records intact)."""
        return set_field(batch, CRC, get_field(batch, CRC) ^ 1, recrc=False)

    def test_a_bad_crc_before_a_later_framing_error_is_the_error(self):
        good, bad = small_batch(), self.bad_crc(small_batch())
        broken = bytearray(small_batch())
        broken[MAGIC] = 7
        buffer = PREFIX + good + bad + good + bytes(broken)
        with pytest.raises(CorruptRecordError) as info:
            records.decode_arrow(buffer)
        assert_crc_error(info.value, len(PREFIX) + len(good))

    def test_a_bad_crc_before_a_compressed_batch_that_does_not_inflate_is_the_error(self):
        bad = self.bad_crc(small_batch())
        zstd = bytearray(small_batch("zstd"))
        zstd[RECORDS + 2] ^= 0xFF                  # garbage in the frame, CRC fixed
        buffer = PREFIX + bad + fix_crc(bytes(zstd))
        with pytest.raises(CorruptRecordError) as info:
            records.decode_arrow(buffer)
        assert_crc_error(info.value, len(PREFIX))

    def test_the_first_of_several_bad_crcs_is_the_error(self):
        good, bad = small_batch(), self.bad_crc(small_batch())
        buffer = good * 3 + bad + good + bad
        with pytest.raises(CorruptRecordError) as info:
            records.decode_arrow(buffer)
        assert_crc_error(info.value, 3 * len(good))

    def test_many_small_batches_decode_as_one_checked_pass(self):
        batches = [records.encode_batch([b"v%d" % i] * 3, base_offset=3 * i) for i in range(2000)]
        rb = records.decode_arrow(b"".join(batches))
        assert list(range(6000)) == rb.column("offset").to_pylist()
        flipped = batches[:1500] + [self.bad_crc(batches[1500])] + batches[1501:]
        with pytest.raises(CorruptRecordError) as info:
            records.decode_arrow(b"".join(flipped))
        assert_crc_error(info.value, sum(len(b) for b in batches[:1500]))
        assert 6000 == records.decode_arrow(b"".join(flipped), validate=False).num_rows


class TestErrorPositions:
    """Every CorruptRecordError names the batch's absolute position the same way (fix e)."""

    N = len(PREFIX)

    def corrupt(self, buffer, reader):
        with pytest.raises(CorruptRecordError) as info:
            reader(buffer)
        assert_names_batch(info.value, self.N)
        return str(info.value)

    readers = [decoded, arrow_rows]

    @pytest.mark.parametrize("reader", readers)
    def test_crc(self, reader):
        """A checksum failure names both CRCs."""
        batch = small_batch()
        bad = batch[:-1] + bytes([batch[-1] ^ 1])
        msg = self.corrupt(PREFIX + bad, reader)
        assert f"stored crc = 0x{get_field(batch, CRC):08x}" in msg
        assert f"computed crc = 0x{crc32c(bad[ATTRIBUTES:]):08x}" in msg
        scan = records.scan_batches(PREFIX + bad + PREFIX)
        assert (self.N, 1) == (scan.valid_bytes, scan.batches)
        assert_crc_error(scan.error, self.N, stored=get_field(batch, CRC))

    @pytest.mark.parametrize("reader", readers)
    @pytest.mark.parametrize(("length", "words"), [(-1, "length -1"), (5, "length 5"), (30, "below the minimum 49")])
    def test_bad_length(self, reader, length, words):
        """A length too small for any batch is corruption, naming the length field's byte."""
        bad = set_field(small_batch(), LENGTH, length, recrc=False)
        msg = self.corrupt(PREFIX + bad, reader)
        assert words in msg and f"at byte {self.N + LENGTH}" in msg

    @pytest.mark.parametrize("reader", readers)
    def test_bad_magic(self, reader):
        """An unknown magic byte names its byte."""
        bad = bytearray(small_batch())
        bad[MAGIC] = 7
        msg = self.corrupt(PREFIX + bytes(bad), reader)
        assert f"unknown magic 7 at byte {self.N + MAGIC}" in msg

    @pytest.mark.parametrize("reader", readers)
    def test_negative_records_count(self, reader):
        """A negative records count (with a valid CRC) names its field."""
        msg = self.corrupt(PREFIX + set_field(small_batch(), RECORDS_COUNT, -3), reader)
        assert f"records count -3 at byte {self.N + RECORDS_COUNT}" in msg

    @pytest.mark.parametrize("reader", readers)
    @pytest.mark.parametrize("count", [2, 4])
    def test_count_mismatch(self, reader, count):
        """More bytes than records, or fewer records than declared, is corruption."""
        msg = self.corrupt(PREFIX + set_field(small_batch(), RECORDS_COUNT, count), reader)
        assert ("left after" if count == 2 else "declares 4 records") in msg

    @pytest.mark.parametrize("reader", readers)
    @pytest.mark.parametrize("compression", ["none", "gzip"])
    def test_malformed_record(self, reader, compression):
        """A bad record names its byte: absolute when uncompressed, in the decompressed section otherwise."""
        section = bytearray(small_batch()[RECORDS:])
        section[0] = 0x7F          # first record's length varint: far past the section
        codec = 0 if compression == "none" else 1
        msg = self.corrupt(PREFIX + wrapped_section(bytes(section), 3, codec), reader)
        if codec:
            assert "malformed record at byte 0 of the decompressed records section" in msg
        else:
            assert f"malformed record at byte {self.N + RECORDS}: bad record length" in msg

    @pytest.mark.parametrize("reader", readers)
    @pytest.mark.parametrize("codec", [1, 2, 3, 4])
    def test_section_that_does_not_decompress(self, reader, codec):
        """A compressed section that does not decompress names the batch and the codec."""
        bad = v2_batch(b"\x00not compressed data\xff" * 3, count=1, attributes=codec)
        msg = self.corrupt(PREFIX + bad, reader)
        assert pylog_compression.codec_name(codec) in msg

    @pytest.mark.parametrize("reader", readers)
    @pytest.mark.parametrize("codec", [5, 6, 7])
    def test_unknown_codec(self, reader, codec):
        """Codec ids 5-7 in stored data are corruption, not a crash."""
        bad = v2_batch(b"\x00" * 8, count=1, attributes=codec)
        msg = self.corrupt(PREFIX + bad, reader)
        assert f"codec id {codec}" in msg

    @pytest.mark.parametrize("reader", readers + [records.upconvert])
    def test_legacy_errors(self, reader):
        """Legacy CRC-32, field and inner-message errors name the top-level message."""
        good = legacy_message(1, 0, b"k", b"v", timestamp=1)
        self.corrupt(PREFIX + good[:-1] + b"\x00", reader)                     # CRC-32
        bad_key = bytearray(good)
        struct.pack_into(">i", bad_key, 26, 1000)
        msg = self.corrupt(PREFIX + fix_legacy(bytes(bad_key)), reader)
        assert f"invalid key length 1000 at byte {self.N + 26}" in msg
        inner = legacy_message(1, 0, b"k", b"v", timestamp=1)[:-2]             # truncated inner
        wrapper = legacy_message(1, 0, None, pylog_compression.compress(1, inner), attributes=1)
        msg = self.corrupt(PREFIX + wrapper, reader)
        assert "truncated inner message at byte 0 of its decompressed value" in msg
        inner = bytearray(legacy_message(1, 0, b"k", b"v", timestamp=1))
        inner[20] ^= 1                                                         # inner CRC-32
        wrapper = legacy_message(1, 0, None, pylog_compression.compress(1, bytes(inner)), attributes=1)
        msg = self.corrupt(PREFIX + wrapper, reader)
        assert "of the decompressed value" in msg

    def test_records_from_iterated_batch(self):
        """Errors raised by RecordBatch.records() use the batch's position in the iterated buffer."""
        section = bytearray(small_batch()[RECORDS:])
        section[0] = 0x7F
        buf = PREFIX + wrapped_section(bytes(section), 3)
        first, second = records.iter_batches(buf)
        assert self.N == second.position
        with pytest.raises(CorruptRecordError) as info:
            second.records()
        assert_names_batch(info.value, self.N)

    def test_control_batch_without_control_record(self):
        """A control batch whose record key is not a control key is corrupt when asked its type."""
        bad = v2_batch(records.encode_batch([b"v"], keys=[b"\x00"], timestamps=1)[RECORDS:], count=1,
                       attributes=0x30, producer_id=1, producer_epoch=0)
        (_, b) = records.iter_batches(PREFIX + bad)
        with pytest.raises(CorruptRecordError) as info:
            b.control_type
        assert_names_batch(info.value, self.N)


def fix_legacy(msg: bytes) -> bytes:
    import zlib

    b = bytearray(msg)
    struct.pack_into(">I", b, 12, zlib.crc32(bytes(b[16:])))
    return bytes(b)


class TestControlBatches:
    @pytest.mark.parametrize("marker", ["commit", "abort"])
    def test_control_batch_roundtrip(self, marker):
        """Markers read back with their type; decode_arrow skips them unless asked."""
        batch = records.encode_control_batch(marker, producer_id=9, producer_epoch=2, base_offset=5,
                                             timestamp=8, coordinator_epoch=4)
        (b,) = list(records.iter_batches(batch))
        assert (True, True, marker, 9, 2, -1) == (b.is_control, b.is_transactional, b.control_type,
                                                  b.producer_id, b.producer_epoch, b.base_sequence)
        key = struct.pack(">hh", 0, 1 if marker == "commit" else 0)
        assert [(5, 8, key, struct.pack(">hi", 0, 4), ())] == decoded(batch)
        assert 0 == records.decode_arrow(batch).num_rows
        assert decoded(batch) == arrow_rows(batch, include_control=True)

    def test_unknown_control_type(self):
        """An unknown control type is returned as its number."""
        rec = records.encode_batch([b"\x00\x00\x00\x00\x00\x00"], keys=[struct.pack(">hh", 0, 7)],
                                   timestamps=1)[RECORDS:]
        batch = v2_batch(rec, count=1, attributes=0x30, producer_id=1, producer_epoch=0)
        (b,) = list(records.iter_batches(batch))
        assert 7 == b.control_type

    def test_data_batch_has_no_control_type(self):
        """control_type is None for ordinary batches."""
        (b,) = list(records.iter_batches(small_batch()))
        assert b.control_type is None


def test_is_valid_detects_flips_without_raising():
    """RecordBatch.is_valid() recomputes the CRC of a batch read with validate=False."""
    batch = small_batch()
    (b,) = list(records.iter_batches(flip_bit(batch, 8 * (len(batch) - 1)), validate=False))
    assert not b.is_valid()
    (b,) = list(records.iter_batches(batch))
    assert b.is_valid()


def test_fix_crc_helper_matches_pylog():
    """The tests' independent CRC-32C agrees with what pylog writes."""
    batch = small_batch("zstd")
    assert batch == fix_crc(batch)
    assert get_field(batch, CRC) == crc32c(batch[ATTRIBUTES:])


CHANGING_PAIRS = {
    "keys": (records.encode_batch([b"v" * 100] * 10, timestamps=[0] * 10),
             records.encode_batch([b"w" * 99] * 10, [b"k"] * 10, timestamps=[0] * 10)),
    # The fill reads headers from the buffer again (keys and values it copies by
    # the positions the first pass read): header sizes that change in between.
    "headers": (records.encode_batch([b"v" * 50] * 10, headers=[[("h", b"x" * 40)]] * 10,
                                     timestamps=[0] * 10),
                records.encode_batch([b"v" * 50] * 10, headers=[[("hhhh", b"y" * 37)]] * 10,
                                     timestamps=[0] * 10)),
}


@pytest.mark.parametrize("changing", sorted(CHANGING_PAIRS))
def test_decode_arrow_of_a_buffer_changed_while_decoding_never_overruns(changing):
    """decode_arrow measures the records, allocates, then fills without the GIL; a
    buffer changed in between could make the fill write past what was allocated
    (issue 12, item 13). Now every write is bounded by the first pass: each call
    either raises or returns a well-formed batch (its bytes may mix the two
    encodings: a buffer changed during a decode has no single content)."""
    import threading
    import time

    from pylog.errors import CorruptRecordError

    a, b = CHANGING_PAIRS[changing]
    assert len(a) == len(b)
    buf = bytearray(a)
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            buf[:] = b
            buf[:] = a
    flipper = threading.Thread(target=flip)
    flipper.start()
    outcomes = set()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                got = records.decode_arrow(buf)
            except (BufferError, CorruptRecordError) as exc:
                outcomes.add(type(exc).__name__)
                continue
            got.validate(full=True)                     # offsets inside their buffers
            assert got.num_rows == 10
            outcomes.add("decoded")
    finally:
        stop.set()
        flipper.join()
    assert "decoded" in outcomes
