"""Checking a segment's indexes against its .log (docs/FORMAT.md, sections 9-10).

An index is a hint: Kafka has no checksum on it and rebuilds it after a crash.
Three depths of checking, by cost:

- at open, per segment whose index is loaded (LogSegment._load_from_indexes):
  O(1) reads, see there;
- where a read meets an entry (:func:`entry_is_wrong`): one batch header, and,
  only when that header is not the batch the entry names, one header walk of
  the segment up to the entry, to tell a lying entry from damaged data;
- offline, every entry of both indexes (:func:`read_index_file`,
  :func:`check_offset_entries`, :func:`check_time_entries`, for ``pylog verify``):
  one header walk of the .log plus one header read per entry.

Every function reads through a LogFile and changes nothing.
"""

from __future__ import annotations

import struct

from pylog._core.storage import LogFile
from pylog.errors import CorruptRecordError

__all__ = ["entry_is_wrong", "read_index_file", "check_offset_entries", "check_time_entries",
           "OFFSET_ENTRY", "TIME_ENTRY"]

OFFSET_ENTRY = struct.Struct(">ii")     # relative offset, position (Kafka's OffsetIndex)
TIME_ENTRY = struct.Struct(">qi")       # timestamp, relative offset (Kafka's TimeIndex)

# Problems named per index file before the rest are only counted (a shifted or
# overwritten index would otherwise print one line per entry).
MAX_NAMED = 5


def entry_is_wrong(log: LogFile, offset: int, position: int, size: int) -> bool:
    """Whether the offset-index entry (offset, position) lies: the batch starting at
    `position` is not one whose last offset is `offset`, or no batch starts there.

    False when the .log itself is damaged at or before `position` (a header walk
    from byte 0 does not reach it cleanly): then the data, not the index, is at
    fault, and the caller reports the corruption it met."""
    try:
        batch = log.slice_info(position, size, -1, 1)       # the batch at `position`
    except CorruptRecordError:
        batch = None
    if batch is not None and batch[0] == position and batch[3] == offset:
        return False
    try:
        walked_to = log.summarize(0, position)[1]
    except CorruptRecordError:
        return False
    if walked_to != position:
        return True                     # `position` is inside a batch (or past the data)
    # A batch boundary: the entry lies only if a readable batch there ends elsewhere.
    return batch is not None


def read_index_file(path: str, entry: struct.Struct) -> tuple[list[tuple[int, int]], list[str]]:
    """The used entries of an .index or .timeindex file, as stored (relative offsets),
    and what is wrong with its shape: a size that is not a multiple of the entry size
    (Kafka's sanityCheck), non-zero bytes after the last entry. The entries end at the
    first all-zero slot (the preallocated tail; slot 0 all zero is no entry, as the
    first batch of a segment never gets one)."""
    with open(path, "rb") as f:
        raw = f.read()
    problems = []
    if len(raw) % entry.size:
        problems.append(f"its size ({len(raw)} bytes) is not a multiple of the entry size "
                        f"{entry.size}")
    whole = len(raw) - len(raw) % entry.size
    zero = bytes(entry.size)
    used = 0
    while used < whole // entry.size and raw[used * entry.size:(used + 1) * entry.size] != zero:
        used += 1
    tail = raw[used * entry.size:whole]
    if tail.count(0) != len(tail):
        problems.append(f"{len(tail) - tail.count(0)} non-zero bytes follow its last entry "
                        f"(entry {used - 1}): garbage, or entries out of order")
    return list(entry.iter_unpack(raw[:used * entry.size])), problems


def _named(problems: list[str], more: int) -> list[str]:
    if more > 0:
        problems.append(f"... and {more} more entries like these")
    return problems


def check_offset_entries(log: LogFile, base: int, entries: list[tuple[int, int]],
                         valid_end: int) -> list[str]:
    """Every offset-index entry against the .log's batches below `valid_end` (where the
    valid batches end): offsets and positions increase, each entry's position is a batch
    start and that batch's last offset is the entry's offset."""
    problems: list[str] = []
    more = 0
    prev_offset, prev_position = base - 1, 0
    walked = 0                          # a batch boundary at or before every later entry
    for i, (rel, position) in enumerate(entries):
        offset = base + rel
        problem = None
        if rel < 0 or offset <= prev_offset or position <= prev_position:
            after = "the base offset" if i == 0 else \
                f"entry {i - 1} (offset {prev_offset}, byte {prev_position})"
            problem = (f"entry {i} (offset {offset}, byte {position}) does not follow {after}: "
                       "offsets and positions must increase")
        elif position >= valid_end:
            problem = (f"entry {i} (offset {offset}) points at byte {position}, past the last "
                       f"whole batch (byte {valid_end})")
        else:
            reached = log.summarize(walked, position)[1]
            if reached != position:
                problem = (f"entry {i} (offset {offset}) points at byte {position}, inside a "
                           f"batch: not a batch start")
                walked = reached
            else:
                walked = position
                last = log.slice_info(position, valid_end, -1, 1)[3]
                if last != offset:
                    problem = (f"entry {i} names offset {offset} at byte {position}, but the "
                               f"batch there ends at offset {last}")
        if problem is not None:
            if len(problems) < MAX_NAMED:
                problems.append(problem)
            else:
                more += 1
        prev_offset, prev_position = offset, position
    return _named(problems, more)


def check_time_entries(log: LogFile, base: int, entries: list[tuple[int, int]],
                       valid_end: int, last_offset: int) -> list[str]:
    """Every time-index entry (timestamp T, offset O) against the .log's batches below
    `valid_end`: timestamps increase, offsets do not decrease, O is an offset of the
    segment held by a batch, and T is the largest timestamp of the batches up to and
    including the one holding O (Kafka's "the biggest timestamp seen before O is T",
    which lookups rely on: an O too large makes offsetsForTimes skip records)."""
    problems: list[str] = []
    more = 0
    prev = None
    walked, running = 0, -1             # bytes whose batches are folded into `running`
    holding = None                      # (first, last) offsets of the batch holding prev O
    for i, (ts, rel) in enumerate(entries):
        offset = base + rel
        problem = None
        if rel < 0 or (prev is not None and (ts <= prev[0] or offset < prev[1])):
            after = "the base offset" if prev is None else \
                f"entry {i - 1} (timestamp {prev[0]}, offset {prev[1]})"
            problem = (f"entry {i} (timestamp {ts}, offset {offset}) does not follow {after}: "
                       "timestamps must increase and offsets must not decrease")
        elif offset > last_offset:
            problem = (f"entry {i} (timestamp {ts}) names offset {offset}, past the segment's "
                       f"last offset {last_offset}")
        else:
            if holding is None or offset > holding[1]:
                batch = log.slice_info(walked, valid_end, offset, 1)
                if batch is None or batch[2] > offset:
                    problem = (f"entry {i} (timestamp {ts}) names offset {offset}, which no "
                               f"batch holds")
                else:
                    running = max(running, log.summarize(walked, batch[1])[3])
                    walked, holding = batch[1], (batch[2], batch[3])
            if problem is None and ts != running:
                problem = (f"entry {i} says the largest timestamp up to offset {offset} is {ts}; "
                           f"the batches say {running}")
        if problem is not None:
            if len(problems) < MAX_NAMED:
                problems.append(problem)
            else:
                more += 1
        prev = (ts, offset)
    return _named(problems, more)
