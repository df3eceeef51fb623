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

What a client sends is decompressed in bounded pieces (``decompress_pieces``),
never whole, and never into a buffer sized by a length the data claims
before that length is proven (docs/FORMAT.md, section 10, "Bounds of a
client batch"):
a gzip, LZ4 or zstd piece holds at most ``PIECE_BYTES``; a snappy block is
decoded only when the length it claims is within what its bytes can expand
to (``SNAPPY_MAX_EXPANSION``); a zstd frame may ask for a window of at most
``ZSTD_MAX_WINDOW``. ``compressor`` writes a stream piece by piece, with the
framing ``compress`` gives.
"""

from __future__ import annotations

import functools
import struct
import threading
from typing import TYPE_CHECKING

from pylog.errors import CorruptRecordError, MessageTooLargeError, UnsupportedCompressionTypeError

__all__ = ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODECS", "PIECE_BYTES", "SNAPPY_MAX_EXPANSION",
           "ZSTD_MAX_WINDOW", "codec_id", "codec_name", "compress", "compressor", "decompress",
           "decompress_pieces"]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_NAMES = {v: k for k, v in CODECS.items()}

# xerial snappy-java framing, as Kafka's SnappyOutputStream writes it.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, min compatible 1
_XERIAL_BLOCK = 32 * 1024                                  # snappy-java DEFAULT_BLOCK_SIZE
_INT32 = struct.Struct(">i")

#: The most bytes one piece of ``decompress_pieces`` holds (gzip, LZ4, zstd;
#: snappy pieces are whole blocks, joined up to this size).
PIECE_BYTES = 256 * 1024
#: A raw snappy block decodes to at most 64/3 of its size: its densest
#: element, a 3-byte copy, writes 64 bytes. A block claiming more is corrupt.
SNAPPY_MAX_EXPANSION = 64 / 3
#: The largest zstd window accepted (2^23: what levels 1-19 use; Kafka's
#: producers use level 3 by default). The decoder allocates the window a
#: frame asks for, so a frame may not ask for more.
ZSTD_MAX_WINDOW = 1 << 23

_local = threading.local()

if TYPE_CHECKING:
    import zstandard


# Each codec's library is imported on its first use (once; the module is
# cached): a process that reads uncompressed batches imports none of them.
@functools.cache
def _cramjam():
    import cramjam
    return cramjam


@functools.cache
def _lz4_frame():
    import lz4.frame
    return lz4.frame


@functools.cache
def _zstandard():
    import zstandard
    return zstandard


@functools.cache
def _igzip():
    from isal import igzip
    return igzip


@functools.cache
def _isal_zlib():
    from isal import isal_zlib
    return isal_zlib


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
        comp = cache[level] = _zstandard().ZstdCompressor(level=level)
    return comp


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "zstd_dec", None)
    if dec is None:
        dec = _local.zstd_dec = _zstandard().ZstdDecompressor()
    return dec


def _zstd_bounded_decompressor() -> zstandard.ZstdDecompressor:
    dec = getattr(_local, "zstd_bounded", None)
    if dec is None:
        dec = _local.zstd_bounded = _zstandard().ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    return dec


def _snappy_compress(data) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(_cramjam().snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_claim(block) -> int:
    """The decoded length a raw snappy block claims, once proven possible:
    at most SNAPPY_MAX_EXPANSION times its size."""
    claim = _cramjam().snappy.decompress_raw_len(block)
    if claim > len(block) * SNAPPY_MAX_EXPANSION:
        raise ValueError(f"snappy block of {len(block)} bytes claims {claim} decoded bytes, more "
                         f"than snappy can expand it to ({int(len(block) * SNAPPY_MAX_EXPANSION)})")
    return claim


def _xerial_blocks(view):
    """The raw blocks of a xerial snappy stream (a memoryview), in order."""
    if len(view) < 16:
        raise ValueError("xerial snappy header is truncated")
    pos = 16
    while pos < len(view):
        if pos + 4 > len(view):
            raise ValueError(f"xerial snappy block length truncated at byte {pos}")
        (size,) = _INT32.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > len(view):
            raise ValueError(f"xerial snappy block of {size} bytes at byte {pos - 4} overruns the data")
        yield view[pos:pos + size]
        pos += size


def _snappy_decompress(data) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        _snappy_claim(view)
        return bytes(_cramjam().snappy.decompress_raw(view))
    # Each block's proven length first, then each block decompressed straight
    # into its place in one output buffer.
    blocks, total = [], 0
    for block in _xerial_blocks(view):
        length = _snappy_claim(block)
        blocks.append((block, total, length))
        total += length
    if len(blocks) == 1:
        return bytes(_cramjam().snappy.decompress_raw(blocks[0][0]))
    out = bytearray(total)
    target = memoryview(out)
    for block, start, length in blocks:
        if _cramjam().snappy.decompress_raw_into(block, target[start:start + length]) != length:
            raise ValueError(f"xerial snappy block at byte {start} decompressed short")
    return bytes(out)       # the decoders hold bytes; one copy instead of one per block


def _snappy_pieces(view, piece_bytes: int):
    """Decoded xerial blocks joined into pieces of up to piece_bytes (a block
    claiming more is a piece of its own, its claim proven); raw snappy: one
    piece."""
    if bytes(view[:8]) != XERIAL_MAGIC:
        _snappy_claim(view)
        yield _cramjam().snappy.decompress_raw(view)
        return
    blocks = [(block, _snappy_claim(block)) for block in _xerial_blocks(view)]
    if len(blocks) == 1:
        yield _cramjam().snappy.decompress_raw(blocks[0][0])
        return
    left = sum(length for _, length in blocks)        # proven: at most 64/3 of the data
    out, fill = None, 0
    for block, length in blocks:
        if out is not None and fill + length > len(out):
            yield memoryview(out)[:fill]
            out = None
        if length > piece_bytes:
            yield _cramjam().snappy.decompress_raw(block)
        else:
            if out is None:
                out, fill = bytearray(min(piece_bytes, left)), 0
            if _cramjam().snappy.decompress_raw_into(block, memoryview(out)[fill:fill + length]) != length:
                raise ValueError(f"xerial snappy block decompressed short of its {length} bytes")
            fill += length
        left -= length
    if out is not None and fill:
        yield memoryview(out)[:fill]


def _gzip_pieces(data, piece_bytes: int):
    """One gzip member after another (zero padding between them skipped, as
    igzip.decompress does), piece_bytes at most at a time."""
    tail = data
    # The first piece is asked for at the size the (last) member's trailer
    # states, when smaller: the output buffer then grows no more than it must.
    # A false size costs a smaller first piece, nothing else.
    want = min(piece_bytes, int.from_bytes(memoryview(data)[-4:], "little") + 1) \
        if len(data) >= 18 else piece_bytes
    while True:
        member = _isal_zlib().decompressobj(wbits=31)
        while not member.eof:
            piece = member.decompress(tail, want)
            want = piece_bytes
            if piece:
                yield piece
            elif not member.eof and len(member.unconsumed_tail) == len(tail):
                raise ValueError("gzip stream ended before the end of its member")
            tail = member.unconsumed_tail
        rest = member.unused_data.lstrip(b"\0")
        if not rest:
            return
        tail = rest


def _lz4_pieces(data, piece_bytes: int):
    """One LZ4 frame (bytes after its end mark are ignored, as lz4.frame.decompress does)."""
    context = _lz4_frame().create_decompression_context()
    rest = memoryview(data)
    while True:
        piece, used, end = _lz4_frame().decompress_chunk(context, rest, max_length=piece_bytes)
        if piece:
            yield piece
        if end:
            return
        if not piece and not used:
            raise ValueError("LZ4 frame incomplete")
        rest = rest[used:]


def _zstd_pieces(data, piece_bytes: int):
    dctx = _zstd_bounded_decompressor()
    size = _zstandard().frame_content_size(data)
    if 0 <= size <= piece_bytes:
        # One frame that states a size within a piece (pylog's and librdkafka's
        # batches): decoded at once, into that size, which zstd holds it to.
        # More frames after it: the stream reader below takes them all.
        try:
            whole = dctx.decompress(data, allow_extra_data=False)
        except _zstandard().ZstdError:
            whole = None
        if whole is not None:
            yield whole
            return
    # Each read allocates the buffer it asks for whole: after a short read only
    # one byte is asked for, to see whether data is left.
    want = piece_bytes
    reader = dctx.stream_reader(data, read_across_frames=True)
    while True:
        piece = reader.read(want)
        if len(piece) < want:
            if piece:
                yield piece
            piece = reader.read(1)
            if not piece:
                return
        yield piece
        want = piece_bytes


def decompress_pieces(codec: int, data, piece_bytes: int | None = None):
    """Yields the decompressed bytes of ``data`` (a batch's records section)
    in order, in buffers of at most ``piece_bytes`` (default PIECE_BYTES;
    snappy: see _snappy_pieces), each decompressed only when the one before
    has been taken. Raises CorruptRecordError on bad input, when it is met."""
    piece_bytes = piece_bytes or PIECE_BYTES
    try:
        if codec == GZIP:
            yield from _gzip_pieces(data, piece_bytes)
        elif codec == SNAPPY:
            yield from _snappy_pieces(memoryview(data), piece_bytes)
        elif codec == LZ4:
            yield from _lz4_pieces(data, piece_bytes)
        elif codec == ZSTD:
            yield from _zstd_pieces(data, piece_bytes)
        elif codec == NONE:
            yield data
        else:
            raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
    except UnsupportedCompressionTypeError:
        raise
    except Exception as exc:  # each library has its own error types
        raise CorruptRecordError(f"{codec_name(codec)} records section does not decompress: {exc}") from exc


class _XerialWriter:
    """snappy's xerial framing, written piece by piece: 32 KiB input blocks, as _snappy_compress."""

    def __init__(self) -> None:
        self._held = b""
        self._started = False

    def compress(self, data) -> bytes:
        data = self._held + bytes(data) if self._held else memoryview(data)
        end = len(data) - len(data) % _XERIAL_BLOCK
        self._held = bytes(data[end:])
        return self._blocks(data[:end])

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return self._blocks(held) if held or not self._started else b""

    def _blocks(self, data) -> bytes:
        parts = [] if self._started else [_XERIAL_HEADER]
        self._started = True
        for start in range(0, len(data), _XERIAL_BLOCK):
            block = bytes(_cramjam().snappy.compress_raw(data[start:start + _XERIAL_BLOCK]))
            parts.append(_INT32.pack(len(block)))
            parts.append(block)
        return b"".join(parts)


class _Lz4Writer:
    """The LZ4 frame compress() writes, piece by piece."""

    def __init__(self, level: int) -> None:
        self._frame = _lz4_frame().LZ4FrameCompressor(
            block_size=_lz4_frame().BLOCKSIZE_MAX64KB, block_linked=False, compression_level=level,
            content_checksum=False)
        self._head = self._frame.begin()

    def compress(self, data) -> bytes:
        head, self._head = self._head, b""
        return head + self._frame.compress(data)

    def flush(self) -> bytes:
        head, self._head = self._head, b""
        return head + self._frame.flush()


class _Plain:
    @staticmethod
    def compress(data) -> bytes:
        return bytes(data)

    @staticmethod
    def flush() -> bytes:
        return b""


def compressor(codec: int, level: int | None = None):
    """A writer of codec ``codec``'s stream, fed piece by piece: ``compress(data)``
    and, at the end, ``flush()`` return the stream's next bytes; joined, they
    decompress to the data fed, with compress()'s framing (a zstd frame without
    its content size, unknown when it starts)."""
    if codec == GZIP:
        return _isal_zlib().compressobj(2 if level is None else level, _isal_zlib().DEFLATED, 31)
    if codec == SNAPPY:
        return _XerialWriter()
    if codec == LZ4:
        return _Lz4Writer(0 if level is None else level)
    if codec == ZSTD:
        return _zstandard().ZstdCompressor(level=3 if level is None else level).compressobj()
    if codec == NONE:
        return _Plain()
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compresses ``data`` (any buffer) with codec id ``codec`` as Kafka lays it out."""
    if codec == GZIP:
        return _igzip().compress(data, compresslevel=2 if level is None else level, mtime=0)
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        return _lz4_frame().compress(
            data, compression_level=0 if level is None else level,
            block_size=_lz4_frame().BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, store_size=False)
    if codec == ZSTD:
        return _zstd_compressor(3 if level is None else level).compress(data)
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def decompress(codec: int, data, max_bytes: int | None = None) -> bytes:
    """Decompresses a batch's records section; raises CorruptRecordError on bad input.
    With ``max_bytes``, decompresses in pieces and raises MessageTooLargeError as
    soon as the output would exceed it."""
    if max_bytes is not None:
        pieces, total = [], 0
        for piece in decompress_pieces(codec, data, min(PIECE_BYTES, max_bytes + 1)):
            total += len(piece)
            if total > max_bytes:
                raise MessageTooLargeError(
                    f"{codec_name(codec)} data decompresses to more than {max_bytes} bytes")
            pieces.append(piece)
        return b"".join(pieces)
    try:
        if codec == GZIP:
            return _igzip().decompress(data)
        if codec == SNAPPY:
            return _snappy_decompress(data)
        if codec == LZ4:
            return _lz4_frame().decompress(data)
        if codec == ZSTD:
            return _zstd_decompressor().decompressobj(read_across_frames=True).decompress(data)
        if codec == NONE:
            return bytes(data)
    except UnsupportedCompressionTypeError:
        raise
    except Exception as exc:  # each library has its own error types
        raise CorruptRecordError(f"{codec_name(codec)} records section does not decompress: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
