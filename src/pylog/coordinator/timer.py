"""DeadlineTimer: callbacks at exact monotonic deadlines, from one thread that sleeps until
the next one (Kafka's coordinator timer: member sessions, rebalance, join and sync
deadlines, pending member ids).

A heap of deadlines; the thread waits on a condition until the earliest is due (a new
earlier deadline wakes it), runs what is due, and sleeps again: no polling, and a
deadline fires within the wake-up latency of one thread (well under a millisecond on an
idle machine). The thread exists only while deadlines do: it starts with the first and
ends when none is left.

Callbacks run on the timer's thread, one at a time, outside the timer's lock; they must
be short (take a group's lock, change its state, complete futures). A callback that
raises is logged and the timer goes on. Cancelling is O(1) (the entry is skipped when it
reaches the top); a callback may run although its handle was cancelled concurrently by
another thread, so callers that race check, under their own lock, that the handle is
still the one they scheduled (ClassicGroup does).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["DeadlineTimer", "TimerHandle"]

log = logging.getLogger(__name__)


class TimerHandle:
    __slots__ = ("when", "fn", "cancelled")

    def __init__(self, when: float, fn: Callable[[], None]) -> None:
        self.when = when
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class DeadlineTimer:
    """``timer.call_later(seconds, fn)`` -> a :class:`TimerHandle` (``cancel()`` it)."""

    def __init__(self, name: str = "pylog-timer") -> None:
        self.name = name
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, TimerHandle]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._cancelled = 0              # cancelled entries still in the heap (compaction)

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> TimerHandle:
        return self.call_at(time.monotonic() + max(0.0, delay_s), fn)

    def call_at(self, when: float, fn: Callable[[], None]) -> TimerHandle:
        """Runs `fn` at time.monotonic() `when` (at once if it has passed)."""
        handle = TimerHandle(when, fn)
        with self._cond:
            earliest = not self._heap or when < self._heap[0][0]
            heapq.heappush(self._heap, (when, next(self._seq), handle))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            elif earliest:
                self._cond.notify()
        return handle

    def cancel(self, handle: TimerHandle | None) -> None:
        if handle is None or handle.cancelled:
            return
        handle.cancelled = True
        with self._cond:
            self._cancelled += 1
            # Keep the heap from filling with dead entries (every heartbeat replaces one).
            if self._cancelled > 64 and self._cancelled * 2 > len(self._heap):
                self._heap = [e for e in self._heap if not e[2].cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0

    def pending(self) -> int:
        """Deadlines not yet run nor cancelled."""
        with self._cond:
            return sum(1 for e in self._heap if not e[2].cancelled)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)
                        self._cancelled = max(0, self._cancelled - 1)
                    if not self._heap:
                        self._thread = None          # the next call_at starts another
                        return
                    left = self._heap[0][0] - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                now = time.monotonic()
                due = []
                while self._heap and self._heap[0][0] <= now:
                    handle = heapq.heappop(self._heap)[2]
                    if handle.cancelled:
                        self._cancelled = max(0, self._cancelled - 1)
                    else:
                        due.append(handle)
            for handle in due:
                if handle.cancelled:
                    continue
                try:
                    handle.fn()
                except Exception:                    # noqa: BLE001 - the timer must keep running
                    log.exception("%s: a deadline's callback failed", self.name)
