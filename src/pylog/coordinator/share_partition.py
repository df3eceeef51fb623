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

The window is three parallel arrays indexed by ``offset - start_offset`` (states, delivery
counts, lock deadlines) and the holders of acquired offsets: the per-offset work is bounded
by the window, not the log. Not thread-safe: the share group's lock covers it.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from pylog.errors import ErrorCode

__all__ = ["SharePartition", "AVAILABLE", "ACQUIRED", "ACKNOWLEDGED", "ARCHIVED",
           "GAP", "ACCEPT", "RELEASE", "REJECT", "AcknowledgeError"]

#: Kafka's RecordState ids (also what the state file stores).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
#: Kafka's AcknowledgeType ids, as ShareFetch and ShareAcknowledge carry them.
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
_TERMINAL = (ACKNOWLEDGED, ARCHIVED)


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
        self._holder: dict[int, str] = {}   # ACQUIRED offset -> member id

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
        return self._holder.get(offset)

    def first_available(self) -> int:
        """The lowest offset a fetch could acquire: the first AVAILABLE one in the
        window, else the SPEO."""
        i = self._state.find(AVAILABLE)
        return self.end_offset if i < 0 else self.start_offset + i

    def acquired_count(self) -> int:
        return len(self._holder)

    # ============================================================ transitions

    def acquire(self, member_id: str, first: int, end: int, max_records: int,
                now_ms: int, lock_ms: int) -> list[AcquiredRange]:
        """Acquires for `member_id`, in offset order from `first`, the AVAILABLE offsets
        below `end` (the end of the records the fetch read), new offsets past the SPEO
        included, at most `max_records` of them and never growing the window past
        max_in_flight. Their locks expire at ``now_ms + lock_ms``. Returns the ranges,
        each of one delivery count."""
        first = max(first, self.start_offset)
        end = min(end, self.start_offset + self.max_in_flight)
        grow = end - self.end_offset
        if grow > 0:
            self._state.extend(bytes(grow))      # new offsets: AVAILABLE, delivered 0 times
            self._count.extend(bytes(grow))
            self._deadline.extend(array("q", bytes(8 * grow)))
        deadline = now_ms + lock_ms
        ranges: list[AcquiredRange] = []
        state, count, base = self._state, self._count, self.start_offset
        i = first - base
        stop = end - base
        while i < stop and max_records > 0:
            i = state.find(AVAILABLE, i, stop)
            if i < 0:
                break
            offset = base + i
            state[i] = ACQUIRED
            count[i] += 1
            self._deadline[i] = deadline
            self._holder[offset] = member_id
            max_records -= 1
            last = ranges[-1] if ranges else None
            if last is not None and last.last == offset - 1 and last.delivery_count == count[i]:
                ranges[-1] = AcquiredRange(last.first, offset, last.delivery_count)
            else:
                ranges.append(AcquiredRange(offset, offset, count[i]))
            i += 1
        if grow > 0:
            self._drop_unused_tail()
        return ranges

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
                                                       for t in types):
            raise AcknowledgeError(ErrorCode.INVALID_REQUEST,
                                   f"invalid acknowledgement batch {first}-{last} with "
                                   f"{len(types)} acknowledge types")
        base = self.start_offset
        if first < base or last >= self.end_offset:
            raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offsets {first}-{last} are not all acquired (share-partition "
                                   f"window {base}-{self.end_offset - 1})")
        holder = self._holder
        for offset in range(first, last + 1):
            if holder.get(offset) != member_id:
                raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                       f"offset {offset} is not acquired by member {member_id}")

    def _apply(self, first: int, last: int, types) -> None:
        holder, base = self._holder, self.start_offset
        for k, offset in enumerate(range(first, last + 1)):
            kind = types[0] if len(types) == 1 else types[k]
            del holder[offset]
            i = offset - base
            if kind == ACCEPT:
                self._state[i] = ACKNOWLEDGED
            elif kind == RELEASE:
                self._release(i)
            else:                                   # REJECT, GAP
                self._state[i] = ARCHIVED

    def release_member(self, member_id: str) -> bool:
        """Releases every offset `member_id` holds (it left, or closed its share
        session). Whether anything changed."""
        mine = [o for o, h in self._holder.items() if h == member_id]
        for offset in mine:
            del self._holder[offset]
            self._release(offset - self.start_offset)
        if mine:
            self._advance()
        return bool(mine)

    def expire_locks(self, now_ms: int) -> bool:
        """Releases every acquired offset whose lock deadline has passed. Whether any."""
        base = self.start_offset
        expired = [o for o in self._holder if self._deadline[o - base] <= now_ms]
        for offset in expired:
            del self._holder[offset]
            self._release(offset - base)
        if expired:
            self._advance()
        return bool(expired)

    def next_lock_deadline(self) -> int | None:
        base = self.start_offset
        return min((self._deadline[o - base] for o in self._holder), default=None)

    def move_start(self, log_start_offset: int) -> bool:
        """The log's start moved past the SPSO (retention, DeleteRecords): the offsets
        below it are gone, so the SPSO follows (their acquired ones are dropped)."""
        if log_start_offset <= self.start_offset:
            return False
        cut = log_start_offset - self.start_offset
        for offset in [o for o in self._holder if o < log_start_offset]:
            del self._holder[offset]
        del self._state[:cut]
        del self._count[:cut]
        del self._deadline[:min(cut, len(self._deadline))]
        self.start_offset = log_start_offset
        return True

    def _release(self, i: int) -> None:
        self._state[i] = ARCHIVED if self._count[i] >= self.delivery_count_limit else AVAILABLE

    def _advance(self) -> None:
        """Moves the SPSO past the leading done offsets."""
        state = self._state
        n = 0
        size = len(state)
        while n < size and state[n] in _TERMINAL:
            n += 1
        if n:
            del state[:n]
            del self._count[:n]
            del self._deadline[:n]
            self.start_offset += n
        self._drop_unused_tail()

    def _drop_unused_tail(self) -> None:
        """Trailing AVAILABLE offsets never delivered are as if past the SPEO: drop them,
        so that the SPEO is always one past the last offset ever acquired."""
        state, count = self._state, self._count
        n = len(state)
        while n and state[n - 1] == AVAILABLE and count[n - 1] == 0:
            n -= 1
        if n < len(state):
            del state[n:]
            del count[n:]
            del self._deadline[n:]

    # ============================================================ durability

    def snapshot(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """(SPSO, runs of (first, last, delivery count, state)) covering the window, as
        Kafka's share coordinator keeps it: ACQUIRED is written as AVAILABLE (a lock does
        not survive the broker), with its delivery count."""
        runs: list[list[int]] = []
        base = self.start_offset
        for i, (st, cnt) in enumerate(zip(self._state, self._count)):
            st = AVAILABLE if st == ACQUIRED else st
            if runs and runs[-1][1] == base + i - 1 and runs[-1][2] == cnt and runs[-1][3] == st:
                runs[-1][1] = base + i
            else:
                runs.append([base + i, base + i, cnt, st])
        return base, [tuple(r) for r in runs]

    @classmethod
    def restore(cls, start_offset: int, runs, **kwargs) -> "SharePartition":
        """The partition a snapshot describes (every lock gone: acquired records are
        AVAILABLE again, their delivery counts kept)."""
        sp = cls(start_offset, **kwargs)
        for first, last, cnt, st in runs:
            if first < sp.end_offset or st not in (AVAILABLE, ACKNOWLEDGED, ARCHIVED):
                raise ValueError(f"share-partition state run {first}-{last} is out of order "
                                 f"or has state {st}")
            gap = first - sp.end_offset
            n = last - first + 1
            sp._state.extend(bytes(gap) + bytes([st]) * n)
            sp._count.extend(bytes(gap) + bytes([min(cnt, 255)]) * n)
            sp._deadline.extend(array("q", bytes(8 * (gap + n))))
        # A record delivered delivery_count_limit times before the crash is not delivered
        # again: its last lock ended with the broker, as a release would have ended it.
        for i, (st, cnt) in enumerate(zip(sp._state, sp._count)):
            if st == AVAILABLE and cnt >= sp.delivery_count_limit:
                sp._state[i] = ARCHIVED
        sp._advance()
        return sp
