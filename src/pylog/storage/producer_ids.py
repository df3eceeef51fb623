"""Producer ids for idempotent producers (Kafka's InitProducerId).

Ids are handed out from blocks of ``BLOCK`` ids; the start of the next free
block is persisted (``pylog-producer-ids`` in every online log dir, tmp ->
fsync -> rename) *before* any id of the current block is used, so an id is
never given out twice, even across crashes. On start the largest value found
in any dir wins.
"""

from __future__ import annotations

import os
import threading

from . import files

__all__ = ["ProducerIdAllocator", "PRODUCER_IDS_FILE"]

PRODUCER_IDS_FILE = "pylog-producer-ids"
BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, dirs: list[str]) -> None:
        self._dirs = dirs
        self._lock = threading.Lock()
        self._next = self._block_end = max((self._read(d) for d in dirs), default=0)

    @staticmethod
    def _read(directory: str) -> int:
        try:
            with open(os.path.join(directory, PRODUCER_IDS_FILE), encoding="ascii") as f:
                lines = f.read().split()
            return int(lines[1]) if len(lines) == 2 and lines[0] == "next-block" else 0
        except (OSError, ValueError):
            return 0

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
