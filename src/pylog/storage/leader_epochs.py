"""A partition's leader-epoch cache (KIP-101): which leader epoch began at which offset.

Kafka keeps it in ``leader-epoch-checkpoint`` in each partition dir, a checkpoint file:
``0`` (the version), the count, then one ``<epoch> <startOffset>`` line per epoch,
epochs and start offsets both increasing (LeaderEpochCheckpointFile). A consumer that
resumes from a position asks the leader (OffsetForLeaderEpoch) where the epoch of the
last record it saw ends: an answer below its position means the log was truncated under
it.

pylog is a single node: a partition's leader never changes, so its epoch stays what the
cache last says (0 for a partition pylog created, whatever Kafka reached for a log dir
Kafka wrote), every batch is stamped with it, and the cache gains no entry while pylog
serves. A partition dir without the file (pylog before it, or one that lost it) gets one
entry, its epoch from its log start offset.
"""

from __future__ import annotations

import bisect
import os

from pylog.errors import CorruptCheckpointError

from . import files

__all__ = ["LeaderEpochCache", "LEADER_EPOCH_CHECKPOINT_FILE", "UNDEFINED_EPOCH",
           "UNDEFINED_EPOCH_OFFSET", "attach"]

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0


class LeaderEpochCache:
    """(epoch, start offset) entries, both increasing."""

    def __init__(self, entries: list[tuple[int, int]] | None = None) -> None:
        self.entries = list(entries or [])

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Records that `epoch` begins at `start_offset` (a newer epoch than the latest);
        returns whether the cache changed."""
        if self.entries and epoch <= self.entries[-1][0]:
            return False
        self.entries.append((epoch, start_offset))
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's LeaderEpochFileCache.endOffsetFor: (the largest epoch <= `epoch`, the
        start offset of the first epoch after `epoch`), the log end offset for the latest
        epoch, and (-1, -1) for an undefined epoch or one newer than any known."""
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        epochs = [e for e, _ in self.entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:                 # older than every known epoch
            return epoch, self.entries[0][1]
        return epochs[higher - 1], self.entries[higher][1]

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at `offset` was written in (-1 before the first entry)."""
        starts = [s for _, s in self.entries]
        i = bisect.bisect_right(starts, offset)
        return self.entries[i - 1][0] if i else UNDEFINED_EPOCH

    # ------------------------------------------------------------------ the file

    def format(self) -> bytes:
        lines = [str(_VERSION), str(len(self.entries))] + [f"{e} {s}" for e, s in self.entries]
        return ("\n".join(lines) + "\n").encode("ascii")

    def write(self, partition_dir: str, *, sync: bool = True) -> None:
        files.write_file_atomically(os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT_FILE),
                                    self.format(), sync=sync)

    @classmethod
    def read(cls, partition_dir: str) -> LeaderEpochCache | None:
        """The cache in `partition_dir`, or None without the file, or with an empty one
        (a new partition's file is written without an fsync: a crash, or a file system
        shut down, can leave it empty; it is written again, the same). A file that does
        not parse raises CorruptCheckpointError naming it and the line."""
        path = os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT_FILE)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        if not data:
            return None
        try:
            lines = data.decode("ascii").split("\n")
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{path} is not ASCII text") from None
        if lines and lines[-1] == "":
            lines.pop()
        if len(lines) < 2 or lines[0].strip() != str(_VERSION):
            raise CorruptCheckpointError(f"{path}: expected version line '0' and a count line")
        entries = []
        for number, line in enumerate(lines[2:], start=3):
            fields = line.split()
            try:
                epoch, start = int(fields[0]), int(fields[1])
                if len(fields) != 2 or epoch < 0 or start < 0:
                    raise ValueError
            except (ValueError, IndexError):
                raise CorruptCheckpointError(f"{path}, line {number}: {line!r} is not "
                                             f"'epoch startOffset'") from None
            if entries and (epoch <= entries[-1][0] or start < entries[-1][1]):
                raise CorruptCheckpointError(f"{path}, line {number}: epoch {epoch} at {start} "
                                             f"does not follow epoch {entries[-1][0]} at "
                                             f"{entries[-1][1]}")
            entries.append((epoch, start))
        if not lines[1].strip().isdigit() or int(lines[1]) != len(entries):
            raise CorruptCheckpointError(f"{path} says {lines[1].strip()!r} entries but has "
                                         f"{len(entries)}")
        return cls(entries)


def attach(lg, partition_dir: str) -> LeaderEpochCache:
    """Gives a log opened by the LogManager its cache (``lg.leader_epochs``) and its leader
    epoch (the cache's latest, stamped in the batches it appends); writes the file when
    the dir had none."""
    cache = LeaderEpochCache.read(partition_dir)
    if cache is None:
        cache = LeaderEpochCache()
    if cache.assign(max(lg.leader_epoch, cache.latest_epoch), lg.log_start_offset):
        # An empty log's file needs no fsync: lost (absent or empty), it is written
        # again the same.
        cache.write(partition_dir, sync=lg.log_end_offset > lg.log_start_offset)
    lg.leader_epoch = cache.latest_epoch
    lg.leader_epochs = cache
    return cache
