"""A TLS connection on the broker's loop: the handshake on the socket itself, then an
asyncio transport whose each direction is the kernel's (kTLS) or OpenSSL's.

asyncio's own TLS transport runs OpenSSL over memory buffers, so the kernel never sees
TLS and a fetched region would have to be read into Python to be encrypted. Here the
accepted socket is wrapped by OpenSSL directly (an SSLSocket, non-blocking) and the
handshake is driven by the loop's readiness callbacks; with SSL_OP_ENABLE_KTLS, OpenSSL
gives each direction to the kernel after the handshake where it can (tls.py). Then:

- send held by the kernel: bytes are written to the socket as plaintext (the kernel
  frames and encrypts them) and file regions go out with sendfile(2): zero copy;
- receive held by the kernel: plaintext is read from the socket, with recvmsg(2) so a
  record that is not application data arrives as one (its type in a control message)
  instead of failing the read: close_notify ends the connection cleanly; any other
  alert, or a handshake message (a TLS 1.3 KeyUpdate, a renegotiation), closes it;
- a direction OpenSSL holds goes through SSL_read / SSL_write (which also answer a
  TLS 1.3 KeyUpdate or ticket in user space).

The transport follows asyncio's selector transport (write buffer with high/low water
marks, pause_writing/resume_writing, pause_reading for the StreamReader, close after the
buffer drains) and sends close_notify when it closes cleanly, as Kafka's
SslTransportLayer does.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import logging
import socket
import ssl

from .tls import SOL_TLS

__all__ = ["TlsTransport", "handshake"]

log = logging.getLogger(__name__)

TLS_GET_RECORD_TYPE = 2
_APPLICATION_DATA, _ALERT, _HANDSHAKE = 23, 21, 22
_CLOSE_NOTIFY = 0
#: Most bytes one read takes (as asyncio's transports).
MAX_READ = 256 * 1024
#: The most plaintext one TLS record carries (2^14 bytes): one SSL_read's most.
TLS_RECORD = 16 * 1024

#: Reads per readiness callback before the loop serves the others.
READS_PER_CALL = 64
#: One SSL_write's worth when OpenSSL encrypts (a retry after WANT_WRITE must repeat it).
SSL_WRITE_CHUNK = 256 * 1024


async def handshake(loop: asyncio.AbstractEventLoop, sock: ssl.SSLSocket, timeout: float) -> None:
    """Runs the TLS handshake of a non-blocking SSLSocket on the loop. Raises
    ssl.SSLError (a refused handshake), OSError, or TimeoutError after `timeout` s."""
    fd = sock.fileno()
    async with asyncio.timeout(timeout):
        while True:
            try:
                sock.do_handshake()
                return
            except ssl.SSLWantReadError:
                add, remove = loop.add_reader, loop.remove_reader
            except ssl.SSLWantWriteError:
                add, remove = loop.add_writer, loop.remove_writer
            ready = loop.create_future()
            add(fd, _wake, ready)
            try:
                await ready
            finally:
                remove(fd)


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class TlsTransport(asyncio.Transport):
    """The transport of one TLS connection after its handshake. ``kernel_tx`` /
    ``kernel_rx``: the kernel holds that direction (kTLS), else OpenSSL does.
    ``zero_copy`` (the kernel sends) is whether file regions may be sendfile(2)'d on
    the socket once the write buffer is empty. On the loop only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: ssl.SSLSocket, protocol,
                 kernel_tx: bool, kernel_rx: bool) -> None:
        super().__init__(extra={"socket": sock, "ssl_object": sock, "sslcontext": sock.context,
                                "peername": _name(sock.getpeername),
                                "sockname": _name(sock.getsockname), "cipher": sock.cipher(),
                                "ssl_version": sock.version()})
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)
        self.kernel_tx, self.kernel_rx = kernel_tx, kernel_rx
        self._buffer: collections.deque = collections.deque()   # bytes / memoryviews to send
        self._buffer_size = 0
        self._high, self._low = 64 * 1024, 16 * 1024
        self._protocol_paused = False
        self._reading = False           # bytes are taken (pause_reading unsets it)
        self._watching = False          # the descriptor is registered with the loop for reading
        self._writing = False           # the write callback is registered
        self._read_wants_write = False  # SSL_read needs the socket writable to go on
        self._closing = False
        self._conn_lost = 0
        self._cmsg_space = socket.CMSG_SPACE(1)
        # The C object's SSL_read: SSLSocket.read is a Python frame around it (closed
        # checks, ragged-EOF handling, which _recv_into does itself), one call per
        # 16 KiB TLS record.
        # (SSLSocket.read takes the same arguments: the fallback if CPython renames it.)
        sslobj = getattr(sock, "_sslobj", None)
        self._decrypt_into = sslobj.read if sslobj is not None else sock.read

    @property
    def zero_copy(self) -> bool:
        return self.kernel_tx

    def start(self) -> None:
        """Connects the protocol and starts reading."""
        self._protocol.connection_made(self)
        self.resume_reading()

    # ------------------------------------------------------------ reading

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        # Lazily: the descriptor stays registered with the loop, and a readiness
        # callback that finds reading paused unregisters it then. A FrameReader pauses
        # once per large frame (its buffer full) and resumes as soon as the frame is
        # taken, within the same turn of the loop: an epoll_ctl pair per request else.
        if self._reading and not self._closing:
            self._reading = False

    def resume_reading(self) -> None:
        if self._reading or self._closing:
            return
        self._reading = True
        if not self._watching:
            self._watching = True
            self._loop.add_reader(self._fd, self._read_ready)
        if not self.kernel_rx:
            # OpenSSL may hold bytes already read from the socket (read-ahead, or the
            # rest of a record): they make the socket no readable event.
            self._loop.call_soon(self._read_ready)

    def _stop_reading(self) -> None:
        """Reading stops and the descriptor leaves the loop (closing, end of stream)."""
        self._reading = False
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self._fd)

    def _read_ready(self) -> None:
        if not self._reading:
            self._stop_reading()            # paused since (see pause_reading)
            return
        if self._buffered:
            self._read_into_protocol()
            return
        try:
            for _ in range(READS_PER_CALL):
                if not self._reading or self._conn_lost:
                    return
                data = self._recv()
                if data is None:
                    return                  # nothing more now
                if not data:
                    self._eof()
                    return
                self._protocol.data_received(data)
            if not self.kernel_rx:
                self._loop.call_soon(self._read_ready)   # OpenSSL may hold more (as above)
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            self._fatal_error(exc)

    def _read_into_protocol(self) -> None:
        """Reads into an asyncio.BufferedProtocol's buffer (get_buffer, buffer_updated):
        OpenSSL decrypts straight into it (one TLS record a read), or the kernel's TLS
        receives into it. READS_PER_CALL buffers at most, then the loop serves the others."""
        protocol = self._protocol
        try:
            for _ in range(READS_PER_CALL):
                if not self._reading or self._conn_lost:
                    return
                # One buffer is filled by as many reads as it takes (a TLS record each,
                # where OpenSSL decrypts): the protocol hears of them once.
                buffer = protocol.get_buffer(-1)
                filled, got = 0, 0
                while filled < len(buffer):
                    got = self._recv_into(buffer[filled:] if filled else buffer)
                    if not got:
                        break
                    filled += got
                del buffer
                if filled:
                    protocol.buffer_updated(filled)
                if got is None:
                    return                  # nothing more now
                if got == 0:
                    if not self._conn_lost:
                        self._eof()
                    return
            if not self.kernel_rx:
                self._loop.call_soon(self._read_ready)   # OpenSSL may hold more (as above)
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            self._fatal_error(exc)

    def _recv_into(self, buffer: memoryview) -> int | None:
        """Plaintext bytes received into `buffer`; 0 at the end of the stream; None if
        none now."""
        if self.kernel_rx:
            try:
                got, ancillary, _, _ = socket.socket.recvmsg_into(self._sock, [buffer],
                                                                  self._cmsg_space)
            except (BlockingIOError, InterruptedError):
                return None
            for level, kind, value in ancillary:
                if level == SOL_TLS and kind == TLS_GET_RECORD_TYPE and value[0] != _APPLICATION_DATA:
                    return len(self._control_record(value[0], bytes(buffer[:got])))
            return got
        try:
            return self._decrypt_into(len(buffer), buffer)
        except ssl.SSLWantReadError:
            return None
        except ssl.SSLWantWriteError:
            self._read_wants_write = True   # (a KeyUpdate's answer waits for room)
            self._start_writing()
            return None
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return 0                        # close_notify, or the peer closed TCP

    def _recv(self) -> bytes | None:
        """Plaintext received; b"" at the end of the stream; None if none now."""
        if self.kernel_rx:
            try:
                data, ancillary, _, _ = socket.socket.recvmsg(self._sock, MAX_READ,
                                                              self._cmsg_space)
            except (BlockingIOError, InterruptedError):
                return None
            for level, kind, value in ancillary:
                if level == SOL_TLS and kind == TLS_GET_RECORD_TYPE and value[0] != _APPLICATION_DATA:
                    return self._control_record(value[0], data)
            return data
        return self._ssl_read()

    def _ssl_read(self) -> bytes | None:
        """What OpenSSL decrypts now, up to MAX_READ bytes. One SSL_read yields one TLS
        record's plaintext at most (16 KiB): the records are gathered and handed over
        as one, so the connection's coroutine wakes once per MAX_READ as over
        PLAINTEXT, not once per record (a wake per record was most of the CPU of a
        produce over TLS)."""
        chunks: list[bytes] = []
        got, ended = 0, False
        try:
            while got < MAX_READ:
                chunk = self._sock.recv(TLS_RECORD)
                if not chunk:
                    ended = True
                    break
                chunks.append(chunk)
                got += len(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLWantWriteError:
            self._read_wants_write = True   # (a KeyUpdate's answer waits for room)
            self._start_writing()
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            ended = True                    # close_notify, or the peer closed TCP
        if chunks:                          # (an end met here is met again next read)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return b"" if ended else None

    def _control_record(self, kind: int, data: bytes) -> bytes:
        if kind == _ALERT and len(data) >= 2 and data[1] == _CLOSE_NOTIFY:
            return b""
        what = {_ALERT: f"TLS alert {data[1] if len(data) > 1 else '?'}",
                _HANDSHAKE: "a TLS handshake message (KeyUpdate or renegotiation, which "
                            "kTLS does not take)"}.get(kind, f"a TLS record of type {kind}")
        raise ConnectionAbortedError(errno.ECONNABORTED, f"{what} on a kTLS connection")

    def _eof(self) -> None:
        self._stop_reading()
        keep_open = self._protocol.eof_received()
        if not keep_open:
            self.close()

    # ------------------------------------------------------------ writing

    def write(self, data) -> None:
        if not data or self._closing or self._conn_lost:
            return
        if not self._buffer:
            try:
                sent = self._send(data)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                sent = 0
            except (ConnectionError, ssl.SSLError, OSError) as exc:
                self._fatal_error(exc)
                return
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
            self._start_writing()
        self._buffer.append(data)
        self._buffer_size += len(data)
        self._maybe_pause_protocol()

    def _send(self, data) -> int:
        """Bytes of `data` sent now. OpenSSL's SSL_write either takes a whole chunk or
        raises WANT_WRITE, and then must be called again with the same bytes: the
        chunk is always the first SSL_WRITE_CHUNK bytes of the buffer's head."""
        if self.kernel_tx:
            return socket.socket.send(self._sock, data)
        sent = 0
        view = memoryview(data)
        while sent < len(view):
            try:
                sent += self._sock.send(view[sent:sent + SSL_WRITE_CHUNK])
            except ssl.SSLWantWriteError:
                if sent:
                    return sent
                raise
        return sent

    def _start_writing(self) -> None:
        if not self._writing:
            self._writing = True
            self._loop.add_writer(self._fd, self._write_ready)

    def _write_ready(self) -> None:
        while self._buffer:
            head = self._buffer[0]
            try:
                sent = self._send(head)
            except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
                break
            except (ConnectionError, ssl.SSLError, OSError) as exc:
                self._fatal_error(exc)
                return
            self._buffer_size -= sent
            if sent == len(head):
                self._buffer.popleft()
            else:
                self._buffer[0] = memoryview(head)[sent:]
        if self._read_wants_write:
            self._read_wants_write = False
            self._loop.call_soon(self._read_ready)
        if not self._buffer:
            self._writing = False
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._lose(None)
        self._maybe_resume_protocol()

    def get_write_buffer_size(self) -> int:
        return self._buffer_size

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self._maybe_pause_protocol()

    def _maybe_pause_protocol(self) -> None:
        if self._buffer_size > self._high and not self._protocol_paused:
            self._protocol_paused = True
            self._protocol.pause_writing()

    def _maybe_resume_protocol(self) -> None:
        if self._protocol_paused and self._buffer_size <= self._low:
            self._protocol_paused = False
            self._protocol.resume_writing()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("TLS connections have no half-close")

    # ------------------------------------------------------------ closing

    def is_closing(self) -> bool:
        return self._closing

    def get_protocol(self):
        return self._protocol

    def set_protocol(self, protocol) -> None:
        self._protocol = protocol
        self._buffered = isinstance(protocol, asyncio.BufferedProtocol)

    def close(self) -> None:
        """Closes after the buffered bytes are sent (with close_notify)."""
        if self._closing:
            return
        self._stop_reading()
        self._closing = True
        if not self._buffer:
            self._lose(None)

    def abort(self) -> None:
        self._force_close(None)

    def _fatal_error(self, exc: BaseException) -> None:
        log.debug("TLS connection %s: %s", self.get_extra_info("peername"), exc)
        self._force_close(exc)

    def _force_close(self, exc: BaseException | None) -> None:
        if self._conn_lost:
            return
        if self._buffer:
            self._buffer.clear()
            self._buffer_size = 0
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)
        self._stop_reading()
        self._closing = True
        self._lose(exc)

    def _lose(self, exc: BaseException | None) -> None:
        if self._conn_lost:
            return
        self._conn_lost += 1
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: BaseException | None) -> None:
        sock = self._sock
        try:
            if exc is None:
                try:
                    sock.unwrap()               # close_notify (the peer's is not awaited)
                except (ssl.SSLError, OSError, ValueError):
                    pass
            self._protocol.connection_lost(exc)
        finally:
            sock.close()
            self._sock = None
            self._protocol = None

    def __del__(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is not None:
            sock.close()


def _name(getter):
    try:
        return getter()
    except OSError:
        return None
