"""A compressed batch is validated as it is decompressed, a bounded piece at a time
(issue "A broker that survives its clients", item 1): the records a piece cuts
are carried into the next, a record larger than max.message.bytes is refused as
soon as its length is read, the walk stops at the header's record count, and a
batch recompressed to the topic's codec is written piece by piece, bounded by
max.message.bytes. Pieces are made tiny here (compression.PIECE_BYTES) so that
records straddle them at every byte."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bomb_support import T, batch, huge_record_head, plain_records, snappy_claims
from pylog import records
from pylog._core.storage import convert_client_batches
from pylog.errors import CorruptRecordError, InvalidRecordError, MessageTooLargeError
from pylog import compression
from pylog.storage.log import Log

CODECS = ["gzip", "snappy", "lz4", "zstd"]
PIECES = [1, 2, 3, 5, 7, 64, 1000]


@contextlib.contextmanager
def pieces_of(size: int):
    was = compression.PIECE_BYTES
    compression.PIECE_BYTES = size
    try:
        yield
    finally:
        compression.PIECE_BYTES = was


def compressed(codec: str, section: bytes, count: int) -> bytes:
    return batch(codec, compression.compress(compression.codec_id(codec), section), count)


def verdict(fn):
    """What fn() did: ("ok", its result) or (the error's type, its message without
    the word that tells a decompressed section from an uncompressed one)."""
    try:
        return "ok", fn()
    except (CorruptRecordError, InvalidRecordError, MessageTooLargeError) as exc:
        return type(exc).__name__, str(exc).replace(" (decompressed)", "")


def streamed(codec: str, section: bytes, count: int, piece: int, **kw):
    with pieces_of(piece):
        return verdict(lambda: convert_client_batches(compressed(codec, section, count), -1, **kw))


def walked_whole(section: bytes, count: int):
    """The walk of the whole section at once (pylog_records_validate, as before):
    an uncompressed batch converted to gzip is walked in place."""
    return verdict(lambda: convert_client_batches(batch("none", section, count), 1))


# ------------------------------------------------------- the walk across pieces

record_lists = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.binary(max_size=300),
              st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=10)), max_size=2)),
    min_size=1, max_size=12)
damage = st.one_of(
    st.none(),
    st.tuples(st.just("count"), st.sampled_from([-1, 1, 5])),
    st.tuples(st.just("cut"), st.integers(1, 40)),
    st.tuples(st.just("extra"), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
)


@settings(max_examples=60)
@given(record_lists, damage, st.sampled_from(CODECS), st.sampled_from(PIECES))
def test_walking_in_pieces_judges_every_section_as_walking_it_whole(recs, harm, codec, piece):
    section = records.encode_batch([v for _, v, _ in recs], [k for k, _, _ in recs],
                                   timestamps=[T] * len(recs), headers=[h for _, _, h in recs])[61:]
    count = len(recs)
    if harm is not None:
        if harm[0] == "count":
            count = max(1, count + harm[1])
        elif harm[0] == "cut":
            section = section[:-min(harm[1], len(section) - 1)]
        elif harm[0] == "extra":
            section += harm[1]
        else:
            at = harm[1] % len(section)
            section = section[:at] + bytes([section[at] ^ harm[2]]) + section[at + 1:]
    whole = walked_whole(section, count)
    got = streamed(codec, section, count, piece)
    assert got[0] == whole[0] and (got[0] == "ok" or got[1] == whole[1]), (got, whole)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("piece", PIECES)
def test_records_straddling_pieces_are_accepted_unchanged(codec, piece):
    # Records of 1..~200 bytes, so that piece boundaries fall at every place in them
    # (snappy's pieces are its 32 KiB blocks: 40 KiB of records straddle one).
    values = [b"v" * (i * 37 % 200) for i in range(400 if codec == "snappy" else 60)]
    sent = records.encode_batch(values, [b"k%d" % i for i in range(len(values))],
                                timestamps=[T + i for i in range(len(values))], compression=codec)
    with pieces_of(piece):
        assert convert_client_batches(sent, -1) is sent


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("piece", [1, 7, 1000])
@pytest.mark.parametrize("declared", [2, 4], ids=["more records than declared", "fewer"])
def test_a_record_count_that_disagrees_is_refused_both_ways(codec, piece, declared):
    section = plain_records([b"a", b"b", b"c"])
    kind, message = streamed(codec, section, declared, piece)
    assert kind == "CorruptRecordError" and "records count" in message, message
    if declared == 2:
        assert "bytes left after its 2 records" in message


@pytest.mark.parametrize("piece", [3, 1000, 1 << 18])
def test_every_zstd_frame_is_walked(piece):
    # A zstd section of two frames, each stating its size: the records span both.
    section = plain_records([b"a" * 50, b"b" * 50, b"c" * 50])
    frames = compression.compress(4, section[:70]) + compression.compress(4, section[70:])
    with pieces_of(piece):
        sent = batch("zstd", frames, 3)
        assert convert_client_batches(sent, -1) is sent
        kind, message = verdict(lambda: convert_client_batches(
            batch("zstd", frames + compression.compress(4, b"\0"), 3), -1))
        assert kind == "CorruptRecordError" and "bytes left after its 3 records" in message


# ------------------------------------------------------ max.message.bytes bounds

def one_record_of(size: int) -> bytes:
    """A records section of one record taking exactly `size` bytes, length varint included."""
    for value_len in range(size, 0, -1):
        section = plain_records([b"x" * value_len])
        if len(section) == size:
            return section
    raise AssertionError(size)


@pytest.mark.parametrize("codec", CODECS)
def test_a_record_of_exactly_max_message_bytes_passes_and_one_byte_more_does_not(log_dir, codec):
    limit = 4000
    with Log(log_dir, {"max.message.bytes": limit}) as log, pieces_of(512):
        info = log.append(compressed(codec, one_record_of(limit), 1))
        assert len(log.read(info.first_offset).records()[0].value) > limit - 10
        with pytest.raises(MessageTooLargeError, match=f"takes {limit + 1} bytes, more than "
                                                       f"max.message.bytes \\({limit}\\)"):
            log.append(compressed(codec, one_record_of(limit + 1), 1))
        assert log.log_end_offset == 1


@pytest.mark.parametrize("codec", CODECS)
def test_a_record_claiming_more_than_max_message_bytes_is_refused_before_its_bytes(codec):
    # Its length says 1 GiB; the section holds 10 bytes of it. No piece waits for the rest.
    section = huge_record_head(1 << 30) + b"\0" * 10
    kind, message = streamed(codec, section, 1, 1000, max_message_bytes=1 << 20)
    assert kind == "MessageTooLargeError" and "takes 1073741829 bytes" in message, message


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_decompressing_to_far_more_than_max_message_bytes_is_accepted(log_dir, codec):
    # A producer's batch of compressible records: 18x max.message.bytes once
    # decompressed (snappy expands at most ~21x).
    limit = 160 * 1024
    values = [b"x" * 999 + b"%d" % (i % 10) for i in range(3000)]
    sent = records.encode_batch(values, timestamps=[T] * len(values), compression=codec)
    assert len(sent) < limit and len(plain_records(values)) > 18 * limit
    with Log(log_dir, {"max.message.bytes": limit}) as log:
        info = log.append(sent)
        assert info.records == 3000
        assert log.read(0).read()[16:] == sent[16:]               # stored as sent
        assert [r.value for r in log.read(2990).records()][-1] == values[-1]


# ------------------------------------------------------------------ recompression

@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("sent", CODECS)
def test_recompression_piece_by_piece_writes_the_topics_codec(log_dir, sent, target):
    values = [b"value-%d " % i * 7 for i in range(3000)]               # ~170 KB of records
    batch_ = records.encode_batch(values, [b"k%d" % i for i in range(3000)],
                                  timestamps=[T] * 3000, compression=sent)
    with Log(log_dir, {"compression.type": target}) as log, pieces_of(4096):
        info = log.append(batch_)
        (stored,) = log.read(info.first_offset).batches()
    assert stored.compression == ("none" if target == "uncompressed" else target)
    assert [r.value for r in stored.records()] == values


@pytest.mark.parametrize("target", ["uncompressed", "lz4"])
def test_recompression_beyond_max_message_bytes_stops_at_the_limit(log_dir, target):
    limit = 64 * 1024
    # 2 MB of records: one random 4 KiB value again and again. zstd's window holds it
    # once; LZ4's independent 64 KiB blocks hold it once each (> 64 KiB in all).
    values = [__import__("os").urandom(4096)] * 500
    sent = records.encode_batch(values, timestamps=[T] * len(values), compression="zstd")
    assert len(sent) < limit
    with Log(log_dir, {"compression.type": target, "max.message.bytes": limit}) as log:
        with pytest.raises(MessageTooLargeError, match=f"recompressed to "
                                                       f"{'none' if target == 'uncompressed' else target}"
                                                       f", its records take more than"):
            log.append(sent)
        assert log.log_end_offset == 0


# ------------------------------------------------------------ claims of snappy

def test_a_snappy_block_claiming_more_than_its_bytes_can_hold_is_refused():
    xerial = snappy_claims(plain_records([b"v"]), (1 << 32) - 1, 20)   # 20 blocks of 5 bytes
    raw = b"\xff\xff\xff\xff\x0f" + b"\0" * 20                        # one raw block
    for section in (xerial, raw):
        kind, message = verdict(lambda: convert_client_batches(batch("snappy", section), -1))
        assert kind == "CorruptRecordError" and "claims 4294967295 decoded bytes" in message, message


def test_legacy_compressed_messages_decompress_within_max_message_bytes(log_dir):
    from bomb_support import gzip_zeros
    inner = b"\0" * 8 + struct.pack(">i", 14) + b"\0" * 14           # starts like a message
    value = gzip_zeros(inner, 64 << 20)                               # then 64 MiB of zeros
    body = struct.pack(">bbqi", 1, 1, T, -1) + struct.pack(">i", len(value)) + value
    crc = __import__("zlib").crc32(body)
    wrapper = struct.pack(">qiI", 0, 4 + len(body), crc) + body
    with Log(log_dir) as log:
        with pytest.raises(MessageTooLargeError, match="decompresses to more than 1048588 bytes"):
            log.append(wrapper)
        assert log.log_end_offset == 0
