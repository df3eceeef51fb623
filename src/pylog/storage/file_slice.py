"""FileSlice: whole batches of one segment file, for zero-copy reads."""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from pylog._core.storage import LogFile

__all__ = ["FileSlice"]


@dataclass(frozen=True, slots=True)
class FileSlice:
    """``size`` bytes at ``position`` of a segment's .log file: whole batches
    holding offsets ``first_offset`` .. ``last_offset``.

    A slice keeps its file open: it stays readable while held, even if the
    segment is rolled, deleted by retention or renamed (it is invalidated only
    by closing the Log). A read or send already running when the file is
    closed finishes first: the descriptor closes after it (LogFile's in-use
    count), so it never reads another file's bytes. ``send_to`` moves the bytes to a socket with
    sendfile(2), straight from the page cache, as Kafka's FileRecords.writeTo.
    An empty slice (size 0) means there is nothing at that offset yet.

    A slice from a Log reports a failed read of its file (EIO from a failing
    disk) to that Log, which takes its log dir offline, and raises
    KafkaStorageError: ``on_io_error(exc, action)`` returns the error to raise.
    """

    file: LogFile
    position: int
    size: int
    first_offset: int
    last_offset: int
    on_io_error: Callable[[OSError, str], Exception] | None = field(default=None, compare=False,
                                                                     repr=False)

    def _failed(self, exc: OSError, action: str) -> Exception:
        return exc if self.on_io_error is None else self.on_io_error(exc, action)

    def __len__(self) -> int:
        return self.size

    @property
    def fd(self) -> int:
        return self.file.fileno()

    def read(self, offset: int = 0, size: int | None = None) -> bytes:
        """The slice's bytes (a copy); ``size`` bytes from byte ``offset`` of it."""
        size = self.size - offset if size is None else size
        if not 0 <= offset <= offset + size <= self.size:
            raise ValueError(f"bytes {offset}..{offset + size} are not within the slice "
                             f"({self.size} bytes)")
        if not size:
            return b""
        try:
            return self.file.read(self.position + offset, size)
        except OSError as exc:
            raise self._failed(exc, "read") from exc

    def readinto(self, buffer) -> int:
        """Reads the slice into a writable buffer of at least ``size`` bytes."""
        view = memoryview(buffer).cast("B")[: self.size]
        try:
            return self.file.readinto(self.position, view)
        except OSError as exc:
            raise self._failed(exc, "read") from exc

    def send_to(self, sock: socket.socket | int, offset: int = 0) -> int:
        """Sends the slice (from byte ``offset`` of it) with sendfile(2); returns bytes sent.

        Loops until everything is sent on a blocking socket; on a
        non-blocking socket returns early with the count sent so far.
        """
        out = sock if isinstance(sock, int) else sock.fileno()
        sent = offset
        while sent < self.size:
            try:
                n = self.file.sendfile(out, self.position + sent, self.size - sent)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EIO:      # the file's side; EPIPE etc. are the socket's
                    raise self._failed(exc, "sendfile") from exc
                raise
            if n == 0:
                raise EOFError(f"{self.file.path} ended inside a slice at byte {self.position + sent}")
            sent += n
        return sent - offset

    def batches(self):
        """The batches, decoded from a copy (see pylog.records.iter_batches)."""
        from pylog.record import iter_batches
        return list(iter_batches(self.read()))

    def records(self):
        """Every record of the slice, as pylog.records.Record."""
        return [record for batch in self.batches() for record in batch.records()]

    def decode_arrow(self):
        """The records as one pyarrow.RecordBatch (see pylog.records.decode_arrow)."""
        from pylog.record import decode_arrow
        return decode_arrow(self.read())
