"""The process's budget of open files and memory maps, in partitions.

Every open partition holds its active segment's files for as long as the store
is open: three descriptors (``.log``, ``.index``, ``.timeindex``) and two memory
maps (the indexes). Inactive segments hold theirs only while read, and at most
:meth:`~pylog.storage.segment.OpenSegments.limit` of them at once. So the
partitions, not the segments, must fit in the process's limits:

- descriptors: the soft ``RLIMIT_NOFILE`` (``ulimit -n``), less those open now,
  less the inactive segments' share not yet used, less
  ``pylog.open.files.reserve`` kept for client connections and the files
  everything else opens;
- maps: ``vm.max_map_count``, less the maps of the process now, less the
  inactive segments' share (two each), less :data:`MAPS_RESERVE`.

A creation that does not fit is refused before anything is written
(``PolicyViolationError``, Kafka's POLICY_VIOLATION, naming the limit); at
start-up the partitions beyond the budget stay offline, named, and the rest
serve. Both count what is open *now* (``/proc/self/fd``, ``/proc/self/maps``),
so the answer holds whatever else the process has open.

:func:`raise_open_files_limit` lifts the soft descriptor limit to the hard one at
store open (``pylog.raise.open.files.limit``), as the JVM does for Kafka
(``-XX:+MaxFDLimit``, on by default).
"""

from __future__ import annotations

import logging
import os
import resource
from dataclasses import dataclass

from .segment import OpenSegments, open_segments

__all__ = ["FILES_PER_PARTITION", "MAPS_PER_PARTITION", "MAPS_RESERVE", "Budget", "measure",
           "raise_open_files_limit"]

log = logging.getLogger(__name__)

#: Descriptors an open partition holds: its active segment's .log, .index and .timeindex.
FILES_PER_PARTITION = 3
#: Memory maps an open partition holds: its active segment's two indexes.
MAPS_PER_PARTITION = 2
#: Maps kept free for what the process maps later: thread stacks (two maps a
#: thread), allocator arenas, libraries a client loads.
MAPS_RESERVE = 1024
#: Each inactive segment the process keeps open holds one descriptor (its .log;
#: its indexes keep their maps, not their descriptors) and two maps.
_SEGMENT_FILES, _SEGMENT_MAPS = 1, 2

_MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"


@dataclass(frozen=True, slots=True)
class Budget:
    """How many more partitions the process can open, and why not more."""

    files_limit: int | None         # soft RLIMIT_NOFILE; None: unlimited
    files_open: int
    files_segments: int             # kept for inactive segments not open yet
    files_reserve: int              # pylog.open.files.reserve
    maps_limit: int | None          # vm.max_map_count; None: unknown
    maps_open: int
    maps_segments: int

    @property
    def by_files(self) -> int | None:
        if self.files_limit is None:
            return None
        free = self.files_limit - self.files_open - self.files_segments - self.files_reserve
        return max(0, free // FILES_PER_PARTITION)

    @property
    def by_maps(self) -> int | None:
        if self.maps_limit is None:
            return None
        free = self.maps_limit - self.maps_open - self.maps_segments - MAPS_RESERVE
        return max(0, free // MAPS_PER_PARTITION)

    @property
    def room(self) -> int | None:
        """More partitions that fit (None: no limit applies)."""
        fits = [n for n in (self.by_files, self.by_maps) if n is not None]
        return min(fits) if fits else None

    def shortfall(self, wanted: int) -> str | None:
        """None if `wanted` more partitions fit, else why not: the limit, what holds
        it, how many fit and what to change."""
        if self.by_files is not None and wanted > self.by_files:
            return (f"{wanted} partitions need {wanted * FILES_PER_PARTITION} more open files "
                    f"({FILES_PER_PARTITION} each: the active segment's .log, .index and "
                    f".timeindex), but this process's open-files limit is {self.files_limit} "
                    f"(ulimit -n) with {self.files_open} open now, {self.files_segments} kept "
                    f"for inactive segments and {self.files_reserve} kept free by "
                    f"pylog.open.files.reserve: {self.by_files} more partitions fit; raise "
                    f"ulimit -n (LimitNOFILE= for a service)")
        if self.by_maps is not None and wanted > self.by_maps:
            return (f"{wanted} partitions need {wanted * MAPS_PER_PARTITION} more memory maps "
                    f"({MAPS_PER_PARTITION} each: the active segment's indexes), but "
                    f"vm.max_map_count is {self.maps_limit} with {self.maps_open} maps in this "
                    f"process now, {self.maps_segments} kept for inactive segments and "
                    f"{MAPS_RESERVE} for the process: {self.by_maps} more partitions fit; raise "
                    f"vm.max_map_count (sysctl)")
        return None


def measure(files_reserve: int) -> Budget:
    """The budget now, with `files_reserve` descriptors kept free."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    unused_segments = max(0, OpenSegments.limit() - len(open_segments))
    return Budget(
        files_limit=None if soft == resource.RLIM_INFINITY else soft,
        files_open=_count_entries("/proc/self/fd"),
        files_segments=unused_segments * _SEGMENT_FILES,
        files_reserve=files_reserve,
        maps_limit=_read_int(_MAX_MAP_COUNT),
        maps_open=_count_lines("/proc/self/maps"),
        maps_segments=unused_segments * _SEGMENT_MAPS)


def raise_open_files_limit() -> None:
    """Lifts the soft RLIMIT_NOFILE to the hard limit (what the JVM does for every
    Java process, Kafka included). Never lowers it; a refusal is logged, not raised."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:     # Linux caps descriptors at fs.nr_open
        target = _read_int("/proc/sys/fs/nr_open") or soft
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
            return
        log.info("raised the open-files limit (ulimit -n) from %d to the hard limit %d "
                 "(pylog.raise.open.files.limit)", soft, target)


def _count_entries(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def _count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None
