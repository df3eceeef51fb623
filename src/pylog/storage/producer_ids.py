"""Producer ids for idempotent producers (Kafka's InitProducerId).

Ids are handed out from blocks of ``BLOCK`` ids; the start of the next free
block is persisted (``pylog-producer-ids`` in every online log dir, tmp ->
fsync -> rename) *before* any id of the current block is used, so an id is
never given out twice, even across crashes. On start the largest value found
in any dir wins, raised above every producer id the loaded logs hold (logs
written by Kafka, whose controller allocated those ids, or older logs without
the file): an id a log already carries is never handed to a new producer.
:meth:`ProducerIdAllocator.handed_out` says whether an id may
have been given out: the broker refuses batches carrying any other (a client
cannot squat an id before it is allocated).
"""

from __future__ import annotations

import logging
import os
import threading

from pylog.errors import CorruptCheckpointError

from . import files

__all__ = ["ProducerIdAllocator", "PRODUCER_IDS_FILE"]

log = logging.getLogger(__name__)

PRODUCER_IDS_FILE = "pylog-producer-ids"
BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, dirs: list[str], in_use: int = -1) -> None:
        """`in_use`: the largest producer id found in the store's logs (-1: none);
        ids are handed out above it."""
        self._dirs = dirs
        self._lock = threading.Lock()
        found, damaged = [], []
        for d in dirs:
            try:
                found.append(self._read(d))
            except CorruptCheckpointError as exc:
                damaged.append(exc)
        if damaged and not any(found):
            raise damaged[0]      # every copy that exists is damaged: never guess
        for exc in damaged:       # every dir gets the good value at the next block
            log.warning("%s; using the copy in another log dir", exc)
        self._next = self._block_end = max(found + [in_use + 1])
        if in_use >= max(found, default=0):
            log.info("producer ids start at %d: the logs hold producer id %d (no pylog "
                     "allocation recorded above it)", in_use + 1, in_use)

    @staticmethod
    def _read(directory: str) -> int:
        """The next free block recorded in `directory`: 0 when the file is missing
        (a new dir) or the dir unreadable (offline: another copy serves);
        CorruptCheckpointError when it is damaged, since guessing 0 would hand
        out ids that may already be in use."""
        path = os.path.join(directory, PRODUCER_IDS_FILE)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return 0
        words = data.split()
        if len(words) != 2 or words[0] != b"next-block" or not words[1].isdigit():
            raise CorruptCheckpointError(f"{path} is damaged: expected 'next-block <number>', "
                                         f"found {data[:60]!r}; if no other log dir has a good "
                                         f"copy, restore it or write a value above every "
                                         f"producer id in use")
        return int(words[1])

    def _persist(self, value: int, dirs: list[str]) -> None:
        written = 0
        for directory in dirs:
            path = os.path.join(directory, PRODUCER_IDS_FILE)
            try:
                files.write_file_atomically(path, f"next-block {value}\n".encode("ascii"))
                written += 1
            except OSError:
                continue        # an offline dir; another copy suffices
        if not written:
            raise OSError("no online log dir could record the producer id block")

    def allocate(self, online_dirs: list[str]) -> int:
        """A producer id never returned before."""
        with self._lock:
            if self._next >= self._block_end:
                self._persist(self._block_end + BLOCK, online_dirs)
                self._next, self._block_end = self._block_end, self._block_end + BLOCK
            pid = self._next
            self._next += 1
            return pid

    def handed_out(self, producer_id: int) -> bool:
        """Whether `producer_id` may have been returned by :meth:`allocate`: below the
        next id of this process (after a restart, below the recorded block end, which
        covers every id of earlier processes)."""
        return 0 <= producer_id < self._next
