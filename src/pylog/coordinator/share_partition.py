"""One share-partition of a share group (KIP-932): Kafka's ``SharePartition``.

A share group reads a topic-partition as a queue: each record is handed to one member at
a time, acknowledged one by one, and handed out again when released or when its
acquisition lock times out. The state is a window over the log:

- the **SPSO** (share-partition start offset, ``start_offset``): every offset below it is
  done (acknowledged or archived) and never delivered again;
- the **SPEO** (share-partition end offset, ``end_offset``): no offset at or above it was
  ever acquired;
- each offset in ``[SPSO, SPEO)`` is in one of Kafka's ``RecordState``\\ s: AVAILABLE (0),
  ACQUIRED (1, by one member, until its lock's deadline), ACKNOWLEDGED (2) or ARCHIVED (4),
  with a delivery count (how many times it was acquired).

Transitions (Kafka's): acquiring an AVAILABLE offset (or a new one at the SPEO) makes it
ACQUIRED and adds one to its delivery count; its holder acknowledges it ACCEPT
(ACKNOWLEDGED), RELEASE (AVAILABLE again), REJECT or GAP (ARCHIVED); a lock that times out,
or a holder that leaves, releases it. A release of a record whose delivery count has
reached ``group.share.delivery.count.limit`` archives it instead. The SPSO then moves past
every leading ACKNOWLEDGED or ARCHIVED offset, and the window shrinks.

Invariant: ``end_offset - start_offset <= max_in_flight`` (Kafka's
``group.share.partition.max.record.locks`` bounds the acquired records; pylog bounds the
whole window with it, so a partition's state, in memory and on disk, stays bounded).

The window is four parallel sequences indexed by ``offset - start_offset`` (states and
delivery counts as bytearrays, lock deadlines, holders): acquisitions and acknowledgements
work on runs of offsets with slice assignments, ``bytes.find`` and ``bytes.translate``
(C loops), never offset by offset in Python; the work is bounded by the window, not the
log. Not thread-safe: the share group's lock covers it.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from itertools import groupby

import numpy as np

from pylog.errors import ErrorCode

__all__ = ["SharePartition", "AVAILABLE", "ACQUIRED", "ACKNOWLEDGED", "ARCHIVED",
           "GAP", "ACCEPT", "RELEASE", "REJECT", "AcknowledgeError"]

#: Kafka's RecordState ids (also what the state file stores).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
#: Kafka's AcknowledgeType ids, as ShareFetch and ShareAcknowledge carry them.
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
_INF = 1 << 62
#: A delivery count plus one (saturating at 255), per byte.
_PLUS_ONE = bytes(range(1, 256)) + b"\xff"
#: A state as the state file stores it: ACQUIRED written as AVAILABLE.
_DURABLE_STATE = bytes([AVAILABLE, AVAILABLE]) + bytes(range(2, 256))


class AcknowledgeError(Exception):
    """An acknowledgement refused (Kafka: INVALID_RECORD_STATE, or INVALID_REQUEST for a
    malformed batch); nothing of its batch was applied."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets ``first..last`` acquired together, each delivered ``delivery_count`` times
    (Kafka's AcquiredRecords)."""
    first: int
    last: int
    delivery_count: int


class SharePartition:
    """The window of one share-partition (see the module docstring)."""

    def __init__(self, start_offset: int, *, delivery_count_limit: int = 5,
                 max_in_flight: int = 2000) -> None:
        self.start_offset = start_offset
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self._state = bytearray()           # offset - start_offset -> RecordState
        self._count = bytearray()           # delivery counts (<= delivery_count_limit <= 255)
        self._deadline = array("q")         # lock deadlines (ms) of ACQUIRED offsets
        self._holder: list[str | None] = []  # the member holding an ACQUIRED offset, else None
        self._acquired = 0
        self._next_deadline = _INF          # <= every ACQUIRED offset's deadline
        #: A delivery count -> the state a release leaves: ARCHIVED at the limit.
        self._released = bytes(ARCHIVED if c >= delivery_count_limit else AVAILABLE
                                for c in range(256))

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self._state)

    # =============================================================== queries

    def state(self, offset: int) -> tuple[int, int]:
        """(RecordState, delivery count) of `offset`: below the SPSO (ACKNOWLEDGED, 0)
        (done, Kafka keeps no count), at or above the SPEO (AVAILABLE, 0)."""
        i = offset - self.start_offset
        if i < 0:
            return ACKNOWLEDGED, 0
        if i >= len(self._state):
            return AVAILABLE, 0
        return self._state[i], self._count[i]

    def holder(self, offset: int) -> str | None:
        i = offset - self.start_offset
        return self._holder[i] if 0 <= i < len(self._holder) else None

    def first_available(self) -> int:
        """The lowest offset a fetch could acquire: the first AVAILABLE one in the
        window, else the SPEO."""
        i = self._state.find(AVAILABLE)
        return self.end_offset if i < 0 else self.start_offset + i

    def acquired_count(self) -> int:
        return self._acquired

    # ============================================================ transitions

    def acquire(self, member_id: str, first: int, end: int, max_records: int,
                now_ms: int, lock_ms: int) -> list[AcquiredRange]:
        """Acquires for `member_id`, in offset order from `first`, the AVAILABLE offsets
        below `end` (the end of the records the fetch read), new offsets past the SPEO
        included, at most `max_records` of them and never growing the window past
        max_in_flight. Their locks expire at ``now_ms + lock_ms``. Returns the ranges,
        each of one delivery count."""
        deadline = now_ms + lock_ms
        state, count, base = self._state, self._count, self.start_offset
        ranges: list[AcquiredRange] = []
        i = max(first, base) - base
        stop = min(end - base, len(state))
        while i < stop and max_records > 0:
            i = state.find(AVAILABLE, i, stop)
            if i < 0:
                break
            j = self._run_end(i, stop)
            j = min(j, i + max_records)
            n = j - i
            state[i:j] = bytes([ACQUIRED]) * n
            counts = count[i:j].translate(_PLUS_ONE)
            count[i:j] = counts
            self._deadline[i:j] = array("q", [deadline]) * n
            self._holder[i:j] = [member_id] * n
            k = i
            for c, group in groupby(counts):
                size = sum(1 for _ in group)
                ranges.append(AcquiredRange(base + k, base + k + size - 1, c))
                k += size
            max_records -= n
            i = j
        # New offsets past the SPEO: one run, delivered once.
        n = min(end - self.end_offset, max_records, base + self.max_in_flight - self.end_offset)
        if n > 0 and first <= self.end_offset:
            k = self.end_offset
            state.extend(bytes([ACQUIRED]) * n)
            count.extend(b"\x01" * n)
            self._deadline.extend(array("q", [deadline]) * n)
            self._holder.extend([member_id] * n)
            if ranges and ranges[-1].last == k - 1 and ranges[-1].delivery_count == 1:
                ranges[-1] = AcquiredRange(ranges[-1].first, k + n - 1, 1)
            else:
                ranges.append(AcquiredRange(k, k + n - 1, 1))
        acquired = sum(r.last - r.first + 1 for r in ranges)
        if acquired:
            self._acquired += acquired
            self._next_deadline = min(self._next_deadline, deadline)
        return ranges

    def _run_end(self, i: int, stop: int) -> int:
        """The end of the run of AVAILABLE offsets from index `i` (before `stop`)."""
        state = self._state
        ends = [e for e in (state.find(ACQUIRED, i, stop), state.find(ACKNOWLEDGED, i, stop),
                            state.find(ARCHIVED, i, stop)) if e >= 0]
        return min(ends) if ends else stop

    def acknowledge(self, member_id: str, first: int, last: int, types: list[int]) -> None:
        """Applies one acknowledgement batch of `member_id`: ``types`` holds one
        AcknowledgeType for the whole batch or one per offset. Every offset must be
        ACQUIRED by that member, else AcknowledgeError and nothing changes (Kafka)."""
        self.acknowledge_batches(member_id, [(first, last, types)])

    def acknowledge_batches(self, member_id: str, batches) -> None:
        """Applies the batches ``(first, last, types)`` of one partition together: all of
        them, or (AcknowledgeError) none, as Kafka rolls back a partition's batches."""
        ordered = sorted(batches, key=lambda b: b[0])
        for k, (first, last, types) in enumerate(ordered):
            self._check(member_id, first, last, types)
            if k and first <= ordered[k - 1][1]:
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST,
                                       f"acknowledgement batches overlap at offset {first}")
        for first, last, types in ordered:
            self._apply(first, last, types)
        self._advance()

    def _check(self, member_id: str, first: int, last: int, types) -> None:
        n = last - first + 1
        if n <= 0 or len(types) not in (1, n) or any(t not in (GAP, ACCEPT, RELEASE, REJECT)
                                                       for t in set(types)):
            raise AcknowledgeError(ErrorCode.INVALID_REQUEST,
                                   f"invalid acknowledgement batch {first}-{last} with "
                                   f"{len(types)} acknowledge types")
        base = self.start_offset
        if first < base or last >= self.end_offset:
            raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offsets {first}-{last} are not all acquired (share-partition "
                                   f"window {base}-{self.end_offset - 1})")
        held = self._holder[first - base:last - base + 1]
        if held.count(member_id) != n:
            offset = first + next(k for k, h in enumerate(held) if h != member_id)
            raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offset {offset} is not acquired by member {member_id}")

    def _apply(self, first: int, last: int, types) -> None:
        i, j = first - self.start_offset, last - self.start_offset + 1
        n = j - i
        runs = [(types[0], i, j)] if len(types) == 1 else []
        if not runs:
            k = i
            for kind, group in groupby(types):
                size = sum(1 for _ in group)
                runs.append((kind, k, k + size))
                k += size
        for kind, a, b in runs:
            if kind == ACCEPT:
                self._state[a:b] = bytes([ACKNOWLEDGED]) * (b - a)
            elif kind == RELEASE:
                self._state[a:b] = self._count[a:b].translate(self._released)
            else:                                   # REJECT, GAP
                self._state[a:b] = bytes([ARCHIVED]) * (b - a)
        self._holder[i:j] = [None] * n
        self._acquired -= n

    def archive_acquired(self, ranges: list[AcquiredRange],
                         runs: list[tuple[int, int]]) -> list[AcquiredRange]:
        """Archives the offsets of `runs` ((first, last), in order, disjoint) inside the
        just acquired `ranges` (records of aborted transactions a read_committed group
        never delivers, Kafka's archive of them); returns `ranges` without them."""
        base, out = self.start_offset, []
        for r in ranges:
            pieces = [(r.first, r.last)]
            for a, b in runs:
                if b < r.first or a > r.last:
                    continue
                kept = []
                for f, last in pieces:
                    lo, hi = max(f, a), min(last, b)
                    if lo > hi:
                        kept.append((f, last))
                        continue
                    i, j = lo - base, hi - base + 1
                    self._state[i:j] = bytes([ARCHIVED]) * (j - i)
                    self._holder[i:j] = [None] * (j - i)
                    self._acquired -= j - i
                    if f < lo:
                        kept.append((f, lo - 1))
                    if hi < last:
                        kept.append((hi + 1, last))
                pieces = kept
            out += [AcquiredRange(f, last, r.delivery_count) for f, last in pieces]
        self._advance()
        return out

    def release_member(self, member_id: str) -> bool:
        """Releases every offset `member_id` holds (it left, or closed its share
        session). Whether anything changed."""
        if not self._acquired or member_id not in self._holder:
            return False
        holder = self._holder
        for i in [k for k, h in enumerate(holder) if h == member_id]:
            self._release(i)
        self._advance()
        return True

    def expire_locks(self, now_ms: int) -> bool:
        """Releases every acquired offset whose lock deadline has passed. Whether any."""
        if not self._acquired or now_ms < self._next_deadline:
            return False
        deadline, holder = self._deadline, self._holder
        expired = [i for i, h in enumerate(holder) if h is not None and deadline[i] <= now_ms]
        for i in expired:
            self._release(i)
        self._next_deadline = min((deadline[i] for i, h in enumerate(holder) if h is not None),
                                  default=_INF)
        if expired:
            self._advance()
        return bool(expired)

    def move_start(self, log_start_offset: int) -> bool:
        """The log's start moved past the SPSO (retention, DeleteRecords): the offsets
        below it are gone, so the SPSO follows (their acquired ones are dropped)."""
        if log_start_offset <= self.start_offset:
            return False
        cut = min(log_start_offset - self.start_offset, len(self._state))
        held = self._holder[:cut]
        self._acquired -= cut - held.count(None)
        del self._state[:cut], self._count[:cut], self._deadline[:cut], self._holder[:cut]
        self.start_offset = log_start_offset
        if not self._state:
            self._state, self._count = bytearray(), bytearray()
        return True

    def _release(self, i: int) -> None:
        self._state[i] = self._released[self._count[i]]
        self._holder[i] = None
        self._acquired -= 1

    def _advance(self) -> None:
        """Moves the SPSO past the leading done offsets, and drops trailing offsets never
        delivered (as if past the SPEO: the SPEO is one past the last offset delivered)."""
        state = self._state
        ends = [e for e in (state.find(AVAILABLE), state.find(ACQUIRED)) if e >= 0]
        n = min(ends) if ends else len(state)
        if n:
            del state[:n], self._count[:n], self._deadline[:n], self._holder[:n]
            self.start_offset += n
        tail = min(len(state) - len(state.rstrip(b"\x00")),
                   len(self._count) - len(self._count.rstrip(b"\x00")))
        if tail:
            del state[-tail:], self._count[-tail:], self._deadline[-tail:], self._holder[-tail:]

    # ============================================================ durability

    def snapshot(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """(SPSO, runs of (first, last, delivery count, state)) covering the window, as
        Kafka's share coordinator keeps it: ACQUIRED is written as AVAILABLE (a lock does
        not survive the broker), with its delivery count."""
        base, n = self.start_offset, len(self._state)
        if not n:
            return base, []
        states = np.frombuffer(bytes(self._state.translate(_DURABLE_STATE)), dtype=np.uint8)
        counts = np.frombuffer(bytes(self._count), dtype=np.uint8)
        cuts = (np.flatnonzero((states[1:] != states[:-1]) | (counts[1:] != counts[:-1])) + 1).tolist()
        starts, ends = [0, *cuts], [*cuts, n]
        return base, [(base + a, base + b - 1, int(counts[a]), int(states[a]))
                      for a, b in zip(starts, ends)]

    @classmethod
    def restore(cls, start_offset: int, runs, **kwargs) -> "SharePartition":
        """The partition a snapshot describes (every lock gone: acquired records are
        AVAILABLE again, their delivery counts kept)."""
        sp = cls(start_offset, **kwargs)
        for first, last, cnt, st in runs:
            if first < sp.end_offset or st not in (AVAILABLE, ACKNOWLEDGED, ARCHIVED):
                raise ValueError(f"share-partition state run {first}-{last} is out of order "
                                 f"or has state {st}")
            # A record delivered delivery_count_limit times before the crash is not
            # delivered again: its last lock ended with the broker, as a release would.
            if st == AVAILABLE and cnt >= sp.delivery_count_limit:
                st = ARCHIVED
            gap = first - sp.end_offset
            n = last - first + 1
            sp._state.extend(bytes(gap) + bytes([st]) * n)
            sp._count.extend(bytes(gap) + bytes([min(cnt, 255)]) * n)
            sp._deadline.extend(array("q", bytes(8 * (gap + n))))
            sp._holder.extend([None] * (gap + n))
        sp._advance()
        return sp
