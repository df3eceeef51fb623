"""Decompression bombs: compressed record batches of a few hundred KiB at most
that claim or expand to hundreds of MiB, built without compressing that much
(each codec's stream is put together from pieces repeated), and a record
batch around any records section."""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
from isal import isal_zlib

from pylog import crc32c, records
from pylog import compression

T = 1_700_000_000_000
CODECS = ("gzip", "snappy", "lz4", "zstd")
MIB = 1 << 20


def batch(codec: str, section: bytes, count: int = 1) -> bytes:
    """A v2 batch of codec `codec` declaring `count` records whose records section
    is `section` (compressed already), with its length and CRC right."""
    out = bytearray(records.encode_batch([b"x"], timestamps=[T], compression=codec)[:61])
    out += section
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, count - 1)          # lastOffsetDelta
    struct.pack_into(">i", out, 57, count)              # recordsCount
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def plain_records(values, ts: int = T) -> bytes:
    """The uncompressed records section of `values` (offset deltas 0..n-1)."""
    return records.encode_batch(list(values), timestamps=[ts] * len(values))[61:]


def huge_record_head(length: int) -> bytes:
    """The start of a record whose length varint says `length` bytes."""
    u = length << 1
    out = bytearray()
    while u >= 0x80:
        out.append(u & 0x7F | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


# ----------------------------------------------- streams of a prefix, then zeros

def gzip_zeros(prefix: bytes, zeros: int) -> bytes:
    """One gzip member: `prefix` then `zeros` zero bytes. Full flushes make the
    deflate output of each 1 MiB of zeros the same bytes, so it is repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    mib = c.compress(b"\0" * MIB) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(b"\0" * MIB) + c.flush(zlib.Z_FULL_FLUSH)
    assert again == mib
    n, rest = divmod(zeros, MIB)
    body = head + mib * n + c.compress(b"\0" * rest) + c.flush()
    crc, mib_crc = zlib.crc32(prefix), zlib.crc32(b"\0" * MIB)
    for _ in range(n):
        crc = isal_zlib.crc32_combine(crc, mib_crc, MIB)
    crc = zlib.crc32(b"\0" * rest, crc)
    size = (len(prefix) + zeros) & 0xFFFFFFFF
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + body + struct.pack("<II", crc, size)


def lz4_zeros(prefix: bytes, zeros: int) -> bytes:
    """One LZ4 frame of independent 4 MiB blocks: `prefix` then about `zeros` zero
    bytes (rounded to whole blocks); the zero block's bytes are repeated."""
    block = 4 * MIB

    def blocks(data: bytes) -> bytes:
        frame = lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=False,
                                   content_checksum=False, store_size=False)
        return frame[7:-4]                          # header (7 bytes) and end mark off

    first = blocks(prefix + b"\0" * (block - len(prefix)))
    zero = blocks(b"\0" * block)
    head = lz4.frame.compress(b"\0" * block, block_size=lz4.frame.BLOCKSIZE_MAX4MB,
                              block_linked=False, content_checksum=False, store_size=False)[:7]
    return head + first + zero * max(0, zeros // block - 1) + b"\0\0\0\0"


def zstd_zeros(prefix: bytes, zeros: int) -> bytes:
    """One zstd frame (128 KiB window, no content size): a raw block of `prefix`, then
    RLE blocks of 128 KiB zeros (4 bytes each)."""
    rle = 128 * 1024
    n = max(1, zeros // rle)

    def block_header(last: bool, kind: int, size: int) -> bytes:
        return (int(last) | kind << 1 | size << 3).to_bytes(3, "little")

    out = bytearray(b"\x28\xb5\x2f\xfd\x00\x38")     # magic, no content size, window 2^17
    out += block_header(False, 0, len(prefix)) + prefix
    for i in range(n):
        out += block_header(i == n - 1, 1, rle) + b"\0"
    return bytes(out)


def snappy_zeros(prefix: bytes, zeros: int, xerial: bool = True) -> bytes:
    """xerial snappy: `prefix`, then 1 MiB blocks of zeros (each ~49 KiB, the most
    snappy expands); raw: one block of both."""
    if not xerial:
        return bytes(cramjam.snappy.compress_raw(prefix + b"\0" * zeros))
    parts = [compression.compress(compression.SNAPPY, prefix)]
    block = bytes(cramjam.snappy.compress_raw(b"\0" * MIB))
    parts += [struct.pack(">i", len(block)) + block] * (zeros // MIB)
    return b"".join(parts)


def snappy_claims(prefix: bytes, claim: int, blocks: int) -> bytes:
    """xerial snappy whose blocks after `prefix` each claim `claim` decoded bytes in
    a 5-byte length varint and hold nothing else (the 97-byte bomb of the issue)."""
    u, varint = claim, bytearray()
    while u >= 0x80:
        varint.append(u & 0x7F | 0x80)
        u >>= 7
    varint.append(u)
    head = compression.compress(compression.SNAPPY, prefix)
    return head + (struct.pack(">i", len(varint)) + bytes(varint)) * blocks


ZEROS = {"gzip": gzip_zeros, "lz4": lz4_zeros, "zstd": zstd_zeros, "snappy": snappy_zeros}


def trailing_zeros_bomb(codec: str, zeros: int) -> bytes:
    """A batch declaring 1 record whose section holds that record, then `zeros` zero
    bytes: Kafka's "bytes left over"."""
    return batch(codec, ZEROS[codec](plain_records([b"v"]), zeros))


def huge_record_bomb(codec: str, zeros: int) -> bytes:
    """A batch declaring 1 record whose length varint says ~1 GiB, then zeros."""
    return batch(codec, ZEROS[codec](huge_record_head(1 << 30), zeros))
