"""A tiny single-thread scheduler for background log work (delayed deletes, flushes).

Kafka runs such work on a KafkaScheduler thread pool; pylog needs only
delayed one-shot tasks, run in order of their due time on one daemon thread.
Tasks must be short and must not raise (errors are logged and dropped).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Scheduler", "default_scheduler"]

log = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, name: str = "pylog-scheduler") -> None:
        self._name = name
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def schedule(self, delay_s: float, task: Callable[[], None]) -> None:
        """Runs `task` after `delay_s` seconds (0: as soon as possible)."""
        with self._cv:
            if self._stopped:
                raise RuntimeError(f"scheduler {self._name} is shut down")
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay_s), next(self._seq), task))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while True:
                    if self._stopped and not self._heap:
                        return
                    if self._heap:
                        due = self._heap[0][0] - time.monotonic()
                        if due <= 0 or self._stopped:
                            _, _, task = heapq.heappop(self._heap)
                            break
                        self._cv.wait(due)
                    else:
                        self._cv.wait()
            try:
                task()
            except Exception:  # a background task must never kill the thread
                log.exception("background task %r failed", task)

    def pending(self) -> int:
        with self._cv:
            return len(self._heap)

    def run_pending(self) -> None:
        """Runs every queued task now, in order, on the calling thread (tests, shutdown)."""
        while True:
            with self._cv:
                if not self._heap:
                    return
                _, _, task = heapq.heappop(self._heap)
            task()

    def shutdown(self, run_pending: bool = True) -> None:
        """Stops the thread; queued tasks run first when `run_pending`."""
        with self._cv:
            self._stopped = True
            if not run_pending:
                self._heap.clear()
            self._cv.notify()
            thread = self._thread
        if thread is not None:
            thread.join()


_default: Scheduler | None = None
_default_lock = threading.Lock()


def default_scheduler() -> Scheduler:
    """The process-wide scheduler shared by Logs opened without a LogManager."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Scheduler("pylog-log-scheduler")
        return _default
