"""Kafka's batch compression codecs, on well-kept native libraries.

A compressed v2 batch stores its whole records section as one compressed
blob (docs/FORMAT.md, section 4). The codec ids are Kafka's attribute bits:

=====  ======  ==================================================================
id     name    bytes on disk (what Kafka's Java client writes)
=====  ======  ==================================================================
0      none
1      gzip    one gzip member (RFC 1952); compressed with ISA-L (``isal``)
2      snappy  xerial framing: 16-byte header, then [int32 length][raw block]...
               of <= 32 KiB input each (``cramjam``); raw snappy is also read
3      lz4     LZ4 frame, 64 KiB independent blocks, no content size (``lz4``)
4      zstd    one zstd frame (``zstandard``)
=====  ======  ==================================================================

Each library releases the GIL while it (de)compresses. Compressor objects
are not shared between threads.
"""

from __future__ import annotations

import struct
import threading

import cramjam
import lz4.frame
import zstandard
from isal import igzip

from pylog.errors import CorruptRecordError, UnsupportedCompressionTypeError

__all__ = ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODECS", "codec_id", "codec_name",
           "compress", "decompress"]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_NAMES = {v: k for k, v in CODECS.items()}

# xerial snappy-java framing, as Kafka's SnappyOutputStream writes it.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible 1
_XERIAL_BLOCK = 32 * 1024                                  # snappy-java DEFAULT_BLOCK_SIZE
_INT32 = struct.Struct(">i")

_local = threading.local()


def codec_id(name: str | int) -> int:
    """Maps ``"none"``, ``"gzip"``, ``"snappy"``, ``"lz4"``, ``"zstd"`` (or an id) to the id."""
    if isinstance(name, int) and not isinstance(name, bool):
        if name in _NAMES:
            return name
    elif isinstance(name, str):
        key = name.lower()
        if key == "uncompressed":
            return NONE
        if key in CODECS:
            return CODECS[key]
    raise UnsupportedCompressionTypeError(
        f"unknown compression type {name!r}; expected one of {', '.join(CODECS)}")


def codec_name(codec: int) -> str:
    """The name of codec id ``codec``."""
    try:
        return _NAMES[codec]
    except KeyError:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}") from None


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "zstd", None)
    if cache is None:
        cache = _local.zstd = {}
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level)
    return comp


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "zstd_dec", None)
    if dec is None:
        dec = _local.zstd_dec = zstandard.ZstdDecompressor()
    return dec


def _snappy_compress(data) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < 16:
        raise ValueError("xerial snappy header is truncated")
    # Find the blocks and their decompressed lengths first, then decompress each
    # straight into its place in one output buffer.
    pos, blocks, total = 16, [], 0
    while pos < len(view):
        if pos + 4 > len(view):
            raise ValueError(f"xerial snappy block length truncated at byte {pos}")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise ValueError(f"xerial snappy block of {size} bytes at byte {pos - 4} overruns the data")
        block = view[pos:pos + size]
        length = cramjam.snappy.decompress_raw_len(block)
        blocks.append((block, total, length))
        total += length
        pos += size
    if len(blocks) == 1:
        return bytes(cramjam.snappy.decompress_raw(blocks[0][0]))
    out = bytearray(total)
    target = memoryview(out)
    for block, start, length in blocks:
        if cramjam.snappy.decompress_raw_into(block, target[start:start + length]) != length:
            raise ValueError(f"xerial snappy block at byte {start} decompressed short")
    return bytes(out)       # the decoders hold bytes; one copy instead of one per block


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compresses ``data`` (any buffer) with codec id ``codec`` as Kafka lays it out."""
    if codec == GZIP:
        return igzip.compress(data, compresslevel=2 if level is None else level, mtime=0)
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        return lz4.frame.compress(
            data, compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, store_size=False)
    if codec == ZSTD:
        return _zstd_compressor(3 if level is None else level).compress(data)
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def decompress(codec: int, data) -> bytes:
    """Decompresses a batch's records section; raises CorruptRecordError on bad input."""
    try:
        if codec == GZIP:
            return igzip.decompress(data)
        if codec == SNAPPY:
            return _snappy_decompress(data)
        if codec == LZ4:
            return lz4.frame.decompress(data)
        if codec == ZSTD:
            return _zstd_decompressor().decompressobj(read_across_frames=True).decompress(data)
        if codec == NONE:
            return bytes(data)
    except UnsupportedCompressionTypeError:
        raise
    except Exception as exc:  # each library has its own error types
        raise CorruptRecordError(f"{codec_name(codec)} records section does not decompress: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
