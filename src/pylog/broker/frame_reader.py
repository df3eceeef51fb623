"""The receiving side of a TLS connection: bytes decrypted straight into the buffer a
request frame is taken from.

asyncio's StreamReader takes each read as a new bytes object, appends it to its
buffer, and copies a frame out of that buffer (twice: a slice, then bytes). Here the
transport decrypts into this reader's buffer (the asyncio.BufferedProtocol interface:
get_buffer, buffer_updated), and a frame of HANDOFF_BYTES or more is handed over as a
memoryview of that buffer, which the reader then gives up for a fresh one: the
decrypted bytes of a produce request are copied by OpenSSL into the buffer and never
again. A smaller frame (a size prefix, a metadata request) is copied out as bytes, and
the buffer is reused.

Invariants:
- the bytes not yet taken are ``_buffer[_start:_end]``; a connection that waits with
  none holds no buffer (RECEIVE_BUFFER bytes are allocated when bytes come);
- a buffer a frame was handed over in is never written again (the frame, and the
  records decoded from it, are views of it);
- the buffer grows only for a frame a reader waits for, to at most GROWTH times the
  bytes already received of it (a claimed size is not allocated up front: as with
  StreamReader, memory follows the bytes that arrive);
- reading pauses while the buffer is full and holds what the reader asked for
  (back-pressure: a client that pipelines faster than the broker answers waits in TCP).

The Connection reads it as it reads a StreamReader (``readexactly``), and writes through
an asyncio.StreamWriter whose protocol this is (its drain() waits on FlowControlMixin).
"""

from __future__ import annotations

import asyncio
import ctypes
from asyncio.streams import FlowControlMixin

__all__ = ["FrameReader"]

#: The buffer a connection reads into between frames (and the least it holds).
RECEIVE_BUFFER = 256 * 1024
#: A frame of at least this many bytes is handed over as a view of the buffer it was
#: received in (the reader takes a new one); a smaller one is copied out.
HANDOFF_BYTES = 64 * 1024
#: A buffer too small for the awaited frame grows to at most this many times the bytes
#: it holds (each growth copies them: a larger factor copies less, trusts more).
GROWTH = 4
#: No buffer (between frames, when none of the next one has come).
_EMPTY = bytearray()

#: CPython's PyByteArray_FromStringAndSize(NULL, n): a bytearray whose n bytes are left
#: as malloc gave them. A receive buffer needs no zeroing: the reader only ever hands
#: out bytes the transport received into it (``_buffer[_start:_end]``), and zeroing a
#: buffer per large frame was a memset of every byte produced.
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.restype = ctypes.py_object
_new_bytearray.argtypes = [ctypes.c_char_p, ctypes.c_ssize_t]


def _buffer(size: int) -> bytearray:
    """A receive buffer of `size` bytes, not zeroed (see _new_bytearray)."""
    return _new_bytearray(None, size)


class FrameReader(FlowControlMixin, asyncio.BufferedProtocol):
    """A connection's receive buffer and the protocol of its transport. ``connected``
    is called with (reader, writer) when the transport connects, and starts whatever
    serves the connection (the broker's _Serve: a Connection and the task it holds).
    On the loop only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, connected) -> None:
        super().__init__(loop=loop)
        self._connected = connected
        self._buffer = _EMPTY           # allocated when bytes come (an idle connection holds none)
        self._start = self._end = 0
        self._want = 0                  # bytes from _start the waiting reader needs
        self._waiter: asyncio.Future | None = None
        self._eof = False
        self._exception: BaseException | None = None
        self._transport = None
        self._reading_paused = False
        self._closed = loop.create_future()

    # ------------------------------------------------------------ the transport's side

    def connection_made(self, transport) -> None:
        self._transport = transport
        # (StreamWriter takes a StreamReader or None: its drain() learns of a lost
        # connection from FlowControlMixin instead.)
        writer = asyncio.StreamWriter(transport, self, None, self._loop)
        self._connected(self, writer)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._end == len(self._buffer):
            if self._end == self._start:
                self._buffer, self._start, self._end = _buffer(RECEIVE_BUFFER), 0, 0
            else:
                self._make_room()
        return memoryview(self._buffer)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        held = self._end - self._start
        if self._waiter is not None and held >= self._want:
            waiter, self._waiter = self._waiter, None
            if not waiter.done():
                waiter.set_result(None)
        if self._end == len(self._buffer) and held >= self._want:
            self._pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False                    # TLS has no half-close: the transport closes

    def connection_lost(self, exc: BaseException | None) -> None:
        if exc is None:
            self._eof = True
        else:
            self._exception = exc
        self._wake()
        if not self._closed.done():
            self._closed.set_result(None)
        super().connection_lost(exc)
        self._transport = None

    def _get_close_waiter(self, stream) -> asyncio.Future:
        return self._closed

    # ------------------------------------------------------------ the connection's side

    def exception(self) -> BaseException | None:
        return self._exception

    async def readexactly(self, n: int):
        """The next `n` bytes: bytes, or for HANDOFF_BYTES and more a memoryview of the
        buffer they were received in. Raises IncompleteReadError at the end of the
        stream, or the error that ended the connection."""
        while self._end - self._start < n:
            if self._exception is not None:
                raise self._exception
            if self._eof:
                partial = bytes(memoryview(self._buffer)[self._start:self._end])
                self._start = self._end = 0
                raise asyncio.IncompleteReadError(partial, n)
            self._want = n
            if self._end == self._start:
                self._buffer, self._start, self._end = _EMPTY, 0, 0    # (idle: let it go)
            elif self._end == len(self._buffer):
                self._make_room()
            if self._reading_paused:
                self._reading_paused = False
                self._transport.resume_reading()
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        self._want = 0
        start = self._start
        if n < HANDOFF_BYTES:
            data = bytes(memoryview(self._buffer)[start:start + n])
            self._start = start + n
            if self._start == self._end:
                self._start = self._end = 0
        else:
            received = memoryview(self._buffer)
            data = received[start:start + n]
            rest = self._end - (start + n)
            fresh = _EMPTY
            if rest:
                fresh = _buffer(max(RECEIVE_BUFFER, rest))
                fresh[:rest] = received[start + n:self._end]
            self._buffer, self._start, self._end = fresh, 0, rest
        if self._reading_paused and self._end < len(self._buffer):
            self._reading_paused = False
            self._transport.resume_reading()
        return data

    # ------------------------------------------------------------ internals

    def _make_room(self) -> None:
        """The buffer is full up to its end and the reader waits for more: its bytes
        move to the front of it, or to a bigger buffer (at most GROWTH times what is
        held) where the awaited frame does not fit."""
        held = self._end - self._start
        need = max(self._want, held + 1)            # (at least one byte of room)
        size = max(len(self._buffer), min(need, GROWTH * held))
        view = memoryview(self._buffer)
        if size == len(self._buffer):
            view[:held] = view[self._start:self._end]     # overlapping: memmove
        else:
            bigger = _buffer(size)
            bigger[:held] = view[self._start:self._end]
            self._buffer = bigger
        self._start, self._end = 0, held

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
