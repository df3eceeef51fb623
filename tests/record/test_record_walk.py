"""The C walk over a records section against a reference reader written here.

Every walk over records (an append's validation, a decode's measure pass,
records()) first tries the common record (one- or two-byte varints, no
headers, room after it in the section) without a bound check per byte, and
falls back to the full reader for anything else. This module reads the same
sections with Kafka's DefaultRecord rules in plain Python and requires the
same verdict and the same records, for real sections (shaped to sit on the
fast path's edges: varints of one, two and three bytes, headers, the last
records of a section) with bytes changed behind a valid CRC.
"""

import os
import shutil
import tempfile
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylog import records
from pylog.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from pylog.storage.log import Log
from record.codec_support import RECORDS, v2_batch

INT32 = (-(1 << 31), (1 << 31) - 1)


def ref_varint(buf, pos, end, max_bytes, int32=True):
    """Kafka's zigzag varint at pos, bounded by end: (value, next) or None."""
    u = shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            return None
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if not b & 0x80:
            v = (u >> 1) ^ -(u & 1)
            if int32 and not INT32[0] <= v <= INT32[1]:
                return None
            return v, pos
        shift += 7
    return None


def ref_bytes(buf, pos, end):
    r = ref_varint(buf, pos, end, 5)
    if r is None:
        return None
    n, pos = r
    if n < -1 or n > end - pos:
        return None
    if n < 0:
        return None, pos
    return bytes(buf[pos:pos + n]), pos + n


def ref_records(section, count):
    """[(timestamp delta, offset delta, key, value, headers)] or None (invalid)."""
    pos, end, out = 0, len(section), []
    for _ in range(count):
        if pos >= end:
            return None
        r = ref_varint(section, pos, end, 5)
        if r is None:
            return None
        length, pos = r
        if length < 1 or length > end - pos:
            return None
        rend = pos + length
        pos += 1                                    # attributes
        fields = []
        for max_bytes, int32 in ((10, False), (5, True)):
            r = ref_varint(section, pos, rend, max_bytes, int32)
            if r is None:
                return None
            fields.append(r[0])
            pos = r[1]
        kv = []
        for _ in range(2):
            r = ref_bytes(section, pos, rend)
            if r is None:
                return None
            kv.append(r[0])
            pos = r[1]
        r = ref_varint(section, pos, rend, 5)
        if r is None or r[0] < 0:
            return None
        count_h, pos = r
        headers = []
        for _ in range(count_h):
            hk = ref_bytes(section, pos, rend)
            if hk is None or hk[0] is None:
                return None
            hv = ref_bytes(section, hk[1], rend)
            if hv is None:
                return None
            headers.append((hk[0].decode("utf-8", "replace"), hv[0]))   # keys are str
            pos = hv[1]
        if pos != rend:
            return None
        out.append((fields[0], fields[1], kv[0], kv[1], headers))
    if pos != end:
        return None                                 # trailing bytes
    return out


# Records whose varints sit on the fast path's edges: lengths of 63/64 (one or
# two bytes), 8,191/8,192 (two or three), timestamp deltas of one, two and
# three bytes, headers now and then.
KEY_LENS = [None, 0, 3, 63, 64]
VALUE_LENS = [None, 0, 1, 62, 63, 64, 100, 8_180, 8_192]
TS_DELTAS = [0, 5, 63, 64, 8_191, 8_192, 100_000]


@st.composite
def sections(draw):
    n = draw(st.integers(1, 24))
    rows = draw(st.lists(st.tuples(st.sampled_from(KEY_LENS), st.sampled_from(VALUE_LENS),
                                   st.sampled_from(TS_DELTAS), st.booleans()),
                         min_size=n, max_size=n))
    if draw(st.booleans()):
        rows = [(k, v, t, False) for k, v, t, _ in rows]      # the common shape only
    keys = [None if k is None else bytes([65 + i % 26]) * k for i, (k, _, _, _) in enumerate(rows)]
    # Zeros read as varints of 0 (an empty key, no headers) when a length is cut
    # short: records that end early or late then parse, unless their end is checked.
    fill = os.urandom if draw(st.booleans()) else bytes
    values = [None if v is None else fill(v) for _, v, _, _ in rows]
    stamps = [1_700_000_000_000 + t for _, _, t, _ in rows]
    headers = [[("h", b"x")] if h else None for _, _, _, h in rows]
    batch = records.encode_batch(values, keys=keys, timestamps=stamps, headers=headers)
    section = bytearray(batch[RECORDS:])
    # Edits where the varints are: a record's first bytes (its length,
    # timestamp and offset deltas, key length) and its last (header count),
    # as a new byte or the old one moved by a little; anywhere, now and then.
    starts = record_starts(section, n)
    edits = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(-1, 11),
                                    st.integers(-3, 3), st.integers(0, 255), st.booleans()),
                          max_size=3))
    for j, at, step, byte, nudge in edits:
        pos = (starts[j + 1] - 1 if at < 0 else starts[j] + at) % len(section)
        section[pos] = (section[pos] + step) % 256 if nudge else byte
    return bytes(section), n, stamps[0]


@st.composite
def uniform_sections(draw):
    """Many records of one shape (a producer's typical batch: one key and value
    size, small timestamp deltas), past the offset delta's one-byte edge at 64,
    with a record of another shape now and then and edits in any record's
    framing: the append's walk checks such records against the shape of the
    one before (records_validate.c, record_shape)."""
    n = draw(st.integers(2, 140))
    klen = draw(st.sampled_from([None, 0, 3, 63, 64]))
    vlen = draw(st.sampled_from([0, 1, 62, 63, 64, 100, 300]))
    # Mostly one-byte timestamp deltas (the shape's), now and then two-byte ones.
    deltas = [0, 1, 5, 63] if draw(st.integers(0, 3)) else [0, 1, 5, 63, 64, 200]
    ts = draw(st.lists(st.sampled_from(deltas), min_size=n, max_size=n))
    odd = draw(st.sets(st.integers(0, n - 1), max_size=2))     # other value sizes
    keys = [None if klen is None else b"k" * klen for _ in range(n)]
    fill = os.urandom if draw(st.booleans()) else bytes
    values = [fill(vlen + (7 if i in odd else 0)) for i in range(n)]
    stamps = [1_700_000_000_000 + t for t in ts]
    batch = records.encode_batch(values, keys=keys, timestamps=stamps)
    section = bytearray(batch[RECORDS:])
    starts = record_starts(section, n)
    edits = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(-1, 9),
                                    st.integers(-2, 2), st.integers(0, 255), st.booleans()),
                          max_size=2))
    for j, at, step, byte, nudge in edits:
        pos = (starts[j + 1] - 1 if at < 0 else starts[j] + at) % len(section)
        section[pos] = (section[pos] + step) % 256 if nudge else byte
    return bytes(section), n, stamps[0]


def record_starts(section, count):
    """Each record's first byte in a valid section, and the section's end."""
    starts, pos = [], 0
    for _ in range(count):
        starts.append(pos)
        length, pos = ref_varint(section, pos, len(section), 5)
        pos += length
    return starts + [pos]


def c_records(section, count, base_ts):
    batch = v2_batch(section, count=count, base_timestamp=base_ts, max_timestamp=base_ts)
    try:
        out = []
        for b in records.iter_batches(batch):
            for r in b.records():
                out.append((r.timestamp - base_ts, r.offset, r.key, r.value,
                            [tuple(h) for h in r.headers]))
        return out
    except CorruptRecordError:
        return None


@settings(max_examples=400, deadline=None)
@given(case=sections())
def test_records_read_as_the_reference_reads_them(case):
    section, count, base_ts = case
    want = ref_records(section, count)
    got = c_records(section, count, base_ts)
    if want is None:
        assert got is None
    else:
        assert got == [(t, o, k, v, h) for t, o, k, v, h in want]


@pytest.fixture(scope="module")
def log():
    root = tempfile.mkdtemp(prefix="pylog-walk-")
    lg = Log(os.path.join(root, "walk-0"), {"segment.bytes": 1 << 30})
    yield lg
    lg.close()
    shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=300, deadline=None)
@given(case=sections())
def test_an_append_accepts_what_the_reference_accepts(log, case):
    """The append path's walk (validation): valid records with offset deltas
    0..n-1 are appended, anything else refused, and the log is unchanged."""
    section, count, _ = case
    base_ts = int(time.time() * 1000)
    want = ref_records(section, count)
    ok = want is not None and [r[1] for r in want] == list(range(count))
    batch = v2_batch(section, count=count, base_timestamp=base_ts, max_timestamp=base_ts)
    end = log.log_end_offset
    try:
        log.append(batch)
        appended = True
    except (CorruptRecordError, InvalidRecordError):
        appended = False
    assert appended == ok
    assert log.log_end_offset == end + (count if ok else 0)


@settings(max_examples=300, deadline=None)
@given(case=uniform_sections())
def test_an_append_of_records_of_one_shape_accepts_what_the_reference_accepts(log, case):
    """The same for batches of one shape, whose records the walk checks against
    the shape of the record before; the records read back are the reference's."""
    section, count, _ = case
    base_ts = int(time.time() * 1000)
    want = ref_records(section, count)
    ok = want is not None and [r[1] for r in want] == list(range(count))
    batch = v2_batch(section, count=count, base_timestamp=base_ts, max_timestamp=base_ts)
    end = log.log_end_offset
    try:
        info = log.append(batch)
        appended = True
    except (CorruptRecordError, InvalidRecordError):
        appended = False
    assert appended == ok
    assert log.log_end_offset == end + (count if ok else 0)
    if ok:
        # The batch's maxTimestamp is its records' true maximum (the walk's min/max).
        assert info.max_timestamp == base_ts + max(r[0] for r in want)


@pytest.mark.parametrize("klen", [None, 3])
def test_every_framing_byte_of_a_shaped_record_edited(log, klen):
    """Each byte of the framing of records 5 and 70 (one- and two-byte offset
    deltas) in a batch of one shape, changed four ways: the append's verdict is
    the reference's, so no check of the shaped walk can be skipped unnoticed."""
    n = 100
    batch = records.encode_batch([b"v" * 100] * n, keys=None if klen is None else [b"k" * klen] * n,
                                 timestamps=[1_700_000_000_000 + i % 60 for i in range(n)])
    section = bytes(batch[RECORDS:])
    starts = record_starts(section, n)
    for j in (5, 70):
        framing = list(range(starts[j], starts[j] + 12)) + [starts[j + 1] - 1]
        for pos in framing:
            for edit in (lambda b: b ^ 0x01, lambda b: b ^ 0x80, lambda b: (b + 1) % 256,
                         lambda b: (b - 1) % 256):
                edited = bytearray(section)
                edited[pos] = edit(edited[pos])
                want = ref_records(bytes(edited), n)
                ok = want is not None and [r[1] for r in want] == list(range(n))
                base_ts = int(time.time() * 1000)
                end = log.log_end_offset
                try:
                    log.append(v2_batch(bytes(edited), count=n, base_timestamp=base_ts,
                                        max_timestamp=base_ts))
                    appended = True
                except (CorruptRecordError, InvalidRecordError):
                    appended = False
                assert appended == ok, (j, pos - starts[j], section[pos], edited[pos])
                assert log.log_end_offset == end + (n if ok else 0)


@pytest.mark.parametrize("others", ["one timestamp", "runs of 10", "every record its own"])
@pytest.mark.parametrize("at", [0, 5, 63, 64, 70, 99])
@pytest.mark.parametrize("klen", [None, 3])
def test_a_shaped_batch_s_least_and_greatest_timestamps_meet_the_bounds(tmp_path, at, klen, others):
    """The shaped walk joins the records' timestamp deltas and adds the base
    once: the least (record `at`, 5 ms before the base) and the greatest (record
    `at`, 7 ms after) meet message.timestamp.before/after.max.ms exactly as each
    record's own timestamp would, one millisecond either side of the bound. The
    other records share one timestamp, come in runs, or each have their own
    (the walk's comparing and reading loops)."""
    now = base = 1_800_000_000_000
    n = 100
    keys = None if klen is None else [b"k" * klen] * n
    for delta, key in ((-5, "message.timestamp.before.max.ms"), (7, "message.timestamp.after.max.ms")):
        other = {"one timestamp": lambda i: 0, "runs of 10": lambda i: i // 10 % 3,
                 "every record its own": lambda i: i % 3}[others]
        stamps = [base + (delta if i == at else other(i)) for i in range(n)]
        section = records.encode_batch([b"v" * 100] * n, keys=keys, timestamps=stamps)[RECORDS:]
        batch = v2_batch(bytes(section), count=n, base_timestamp=stamps[0], max_timestamp=stamps[0])
        bound = abs(delta)          # how far the extreme record is from now
        for limit, ok in ((bound, True), (bound - 1, False)):
            with Log(str(tmp_path / f"t{delta}-{limit}"), {key: limit}, clock=lambda: now) as lg:
                if ok:
                    info = lg.append(batch)
                    assert info.max_timestamp == max(stamps)
                else:
                    with pytest.raises(InvalidTimestampError, match="outside the accepted range"):
                        lg.append(batch)
                    assert lg.log_end_offset == 0
