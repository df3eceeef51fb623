"""The ``.txnindex`` of a segment: the aborted transactions whose markers it holds.

Kafka's TransactionIndex and AbortedTxn (docs/FORMAT.md, section 9). One
34-byte entry per aborted transaction, appended when its ABORT marker is
written to the segment::

    version int16 (0) | producerId int64 | firstOffset int64 | lastOffset int64 | lastStableOffset int64

``firstOffset`` is the transaction's first offset in the partition (possibly
in an earlier segment), ``lastOffset`` the marker's offset, and
``lastStableOffset`` the partition's last stable offset once the transaction
ended. Entries are in marker order (``lastOffset`` increases). The file
exists only once an entry is written (Kafka creates it on first use).

A read_committed fetch of [fetch offset, upper bound) collects, from the
segment holding the fetch offset onwards, every entry whose range overlaps
it, and stops at the first entry whose ``lastStableOffset`` reaches the
upper bound: every transaction that began below the bound had ended by then,
so its entry lies no further (Kafka's collectAbortedTxns).

Integrity: an index of a segment that may hold unflushed data is rebuilt by
recovery from the markers in the log (producer state replayed from the
snapshot at or before the segment), as its offset index is; an inactive
segment's index is fsynced with its data before the recovery point passes
it. The entries are read once and kept in memory (a tuple, replaced on each
append, so readers never lock).
"""

from __future__ import annotations

import os
import struct
import threading
from typing import NamedTuple

from pylog.errors import CorruptIndexError

from . import files

__all__ = ["AbortedTxn", "TransactionIndex", "ENTRY_SIZE"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size                 # 34: Kafka's AbortedTxn.TOTAL_SIZE
VERSION = 0                              # Kafka's AbortedTxn.CURRENT_VERSION
_loading = threading.Lock()              # first loads of any index (rare: once per segment)


class AbortedTxn(NamedTuple):
    """One .txnindex entry (Kafka's AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def pack(self) -> bytes:
        return _ENTRY.pack(VERSION, *self)


def parse_entries(data: bytes, path: str, base_offset: int) -> tuple[AbortedTxn, ...]:
    """The entries of a .txnindex's bytes; CorruptIndexError naming the file and the
    entry when they cannot be one (a partial entry, an unknown version, a last
    offset below the segment, offsets that do not increase)."""
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{path}: {len(data)} bytes, not a whole number of "
                                f"{ENTRY_SIZE}-byte entries")
    out = []
    previous = -1
    for i in range(len(data) // ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, i * ENTRY_SIZE)
        if version != VERSION:
            raise CorruptIndexError(f"{path}: entry {i} has version {version} (expected "
                                    f"{VERSION})")
        if last < base_offset or last <= previous or first > last:
            raise CorruptIndexError(
                f"{path}: entry {i} (producer {pid}, offsets {first}..{last}) does not follow "
                f"the segment's base offset {base_offset} and the entry before it "
                f"(last offset {previous})")
        previous = last
        out.append(AbortedTxn(pid, first, last, lso))
    return tuple(out)


class TransactionIndex:
    """One segment's ``.txnindex``. The owning Log serialises appends and truncations;
    :meth:`entries` and :meth:`collect` may run beside them."""

    __slots__ = ("path", "base_offset", "_entries", "_dirty", "created")

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: tuple[AbortedTxn, ...] | None = None     # read on first use
        self._dirty = False             # appended since the last flush
        self.created = False            # this process created the file (its dir entry is new)

    def entries(self) -> tuple[AbortedTxn, ...]:
        entries = self._entries
        if entries is None:
            data = b""
            for path in (self.path, self.path + files.DELETED_SUFFIX):
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                    break
                except FileNotFoundError:
                    continue            # none yet, or renamed for deletion meanwhile
            parsed = parse_entries(data, self.path, self.base_offset)
            with _loading:
                # A reader and the writer may load at once: the first load stands (the
                # writer's appends replace it whole afterwards, under the Log's lock).
                if self._entries is None:
                    self._entries = parsed
                entries = self._entries
        return entries

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping [fetch_offset, upper_bound), and whether the search
        is complete (an entry's last stable offset reached the bound)."""
        out = []
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def append(self, txn: AbortedTxn) -> None:
        """Writes one entry at the end (creating the file); its last offset must be above
        every entry's."""
        entries = self.entries()
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"{self.path}: aborted transaction ending at {txn.last_offset} "
                             f"does not follow the last entry's {entries[-1].last_offset}")
        existed = os.path.exists(self.path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.pwrite(fd, txn.pack(), len(entries) * ENTRY_SIZE)
        finally:
            os.close(fd)
        self.created = self.created or not existed
        self._dirty = True
        self._entries = entries + (txn,)

    def truncate_to(self, offset: int) -> None:
        """Drops the entries whose marker is at or after `offset` (Kafka's truncateTo)."""
        entries = self.entries()
        kept = tuple(t for t in entries if t.last_offset < offset)
        if len(kept) != len(entries):
            self._rewrite(kept)

    def reset(self) -> None:
        """Drops every entry (recovery rebuilds them from the markers)."""
        if os.path.exists(self.path):
            self._rewrite(())
        self._entries = ()

    def _rewrite(self, kept: tuple[AbortedTxn, ...]) -> None:
        with open(self.path, "r+b") as f:
            f.truncate(len(kept) * ENTRY_SIZE)
        self._entries = kept
        self._dirty = True

    def flush(self) -> None:
        """fsync the file if an append or a truncation changed it since the last flush."""
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path!r})"
