"""BackgroundTasks: the LogManager's periodic and delayed work, on one thread.

Periodic tasks (flusher, retention and time-based roll, checkpoints) and
one-shot delayed tasks (a segment's files after ``file.delete.delay.ms``, the
flush after a roll) are due at times read from an injectable clock (ms). The
thread wakes when a task is due or a new one is scheduled, and at least every
``poll_s`` so that a clock that is not wall time is still followed. Tests
that inject a clock can skip the thread altogether and call :meth:`run_due`
after moving the clock.

Implements the :class:`pylog.scheduler.Scheduler` interface (``schedule``)
that Logs use. Tasks must not raise; an exception is logged and dropped, and
the thread keeps going. :meth:`shutdown` stops the thread and waits for the
task in progress; queued one-shot tasks are dropped (what they would have
done is redone on the next open: ``*.deleted`` files are removed, unflushed
data is flushed by ``Log.close``).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["BackgroundTasks", "wall_clock_ms"]

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class _Periodic:
    __slots__ = ("name", "interval", "task", "next_due")

    def __init__(self, name: str, interval_ms: int, task: Callable[[int], None], now: int) -> None:
        self.name = name
        self.interval = interval_ms
        self.task = task
        self.next_due = now + interval_ms


class BackgroundTasks:
    def __init__(self, clock: Callable[[], int] = wall_clock_ms, *, name: str = "pylog-background",
                 poll_s: float = 0.5) -> None:
        self.clock = clock
        self._name = name
        self._poll_s = poll_s
        self._periodic: list[_Periodic] = []
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._run_lock = threading.Lock()       # one run_due at a time
        self._thread: threading.Thread | None = None
        self._stopped = False

    # --------------------------------------------------------------- adding work

    def add_periodic(self, name: str, interval_ms: int, task: Callable[[int], None]) -> None:
        """Runs ``task(now_ms)`` every `interval_ms` (first run one interval from now).
        An interval that is Kafka's "never" (Long.MAX_VALUE) registers nothing."""
        if interval_ms >= 2**62:
            return
        with self._cv:
            self._periodic.append(_Periodic(name, max(1, interval_ms), task, self.clock()))
            self._cv.notify()

    def schedule(self, delay_s: float, task: Callable[[], None]) -> None:
        """The Scheduler interface: runs `task` once, `delay_s` seconds of clock time from now."""
        with self._cv:
            if self._stopped:
                return          # shutting down: the next open redoes it
            due = self.clock() + int(max(0.0, delay_s) * 1000)
            heapq.heappush(self._heap, (due, next(self._seq), task))
            self._cv.notify()

    def pending(self) -> int:
        with self._cv:
            return len(self._heap)

    # ------------------------------------------------------------------ running

    def run_due(self) -> int:
        """Runs every task that is due by the clock, on the calling thread; returns
        how many ran. One-shot tasks scheduled while running that are already due
        run too."""
        ran = 0
        with self._run_lock:
            while True:
                now = self.clock()
                with self._cv:
                    if self._stopped:
                        return ran
                    # The earliest due task first, one-shot or periodic, so a
                    # stream of one-shots (flushes after rolls) cannot starve
                    # retention, and the reverse.
                    periodic = min((p for p in self._periodic if p.next_due <= now),
                                   key=lambda p: p.next_due, default=None)
                    job: Callable[[], None] | None = None
                    if self._heap and self._heap[0][0] <= now and (
                            periodic is None or self._heap[0][0] <= periodic.next_due):
                        _, _, job = heapq.heappop(self._heap)
                    elif periodic is not None:
                        periodic.next_due = now + periodic.interval
                        job = (lambda p=periodic, now=now: p.task(now))
                    if job is None:
                        return ran
                try:
                    job()
                except Exception:  # a background task must never kill the thread
                    log.exception("background task failed")
                ran += 1

    def start(self) -> None:
        with self._cv:
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()

    def _next_due(self) -> int | None:
        dues = [p.next_due for p in self._periodic]
        if self._heap:
            dues.append(self._heap[0][0])
        return min(dues) if dues else None

    def _loop(self) -> None:
        while True:
            with self._cv:
                if self._stopped:
                    return
                due = self._next_due()
                wait = self._poll_s if due is None else (due - self.clock()) / 1000
                if wait > 0:
                    self._cv.wait(min(wait, self._poll_s))
                if self._stopped:
                    return
            self.run_due()

    def shutdown(self) -> None:
        """Stops the thread (waiting for a running task); drops queued one-shot tasks."""
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
