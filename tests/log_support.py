"""Helpers shared by the storage, coordinator and client tests: an injectable
clock, a scheduler that runs only when told to, managers closed at teardown,
reading a whole log, and waiting for a condition (instead of sleeping)."""

import time

from pylog.storage.scheduler import Scheduler

T0 = 1_700_000_000_000


class Clock:
    """An injectable clock (ms since the epoch); tests move it."""

    def __init__(self, now=T0):
        self.now = now

    def __call__(self):
        return self.now

    def advance(self, ms):
        self.now += ms


class ManualScheduler(Scheduler):
    """Runs scheduled work only when told to (no threads, no sleeping)."""

    def __init__(self):
        self.tasks = []

    def schedule(self, delay, fn):
        self.tasks.append((delay, fn))

    def run(self, max_delay=float("inf")):
        due = [t for t in self.tasks if t[0] <= max_delay]
        self.tasks = [t for t in self.tasks if t[0] > max_delay]
        for _, fn in due:
            fn()


def kept_by_retention_bytes(segments, retention_bytes):
    """The segments Kafka's size retention keeps, computed independently of
    pylog's code (UnifiedLog.deleteRetentionSizeBreachedSegments): from the
    oldest, delete a segment while the log minus it is still at least
    ``retention.bytes``; an empty active segment is never deleted."""
    excess = sum(s.size for s in segments) - retention_bytes
    kept = list(segments)
    while kept and excess - kept[0].size >= 0 and not (len(kept) == 1 and kept[0].size == 0):
        excess -= kept.pop(0).size
    return [s.base_offset for s in kept]


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def all_records(log, start=None, end=None):
    """Every record of `log` from `start` (default: the log start) below `end` (default:
    the log end), read as a consumer would."""
    out, offset = [], log.log_start_offset if start is None else start
    end = log.log_end_offset if end is None else end
    while offset < end:
        got = [r for r in log.read(offset, 1 << 20).records() if r.offset >= offset]
        out += [r for r in got if r.offset < end]
        offset = got[-1].offset + 1
    return out


def manager_factory(cls, clock):
    """Generator behind the ``open_manager`` fixtures: yields
    ``make(dirs, config=None, *, background=False, **kw)`` building `cls` with
    the fake clock, then closes every manager it made."""
    opened = []

    def make(log_dirs, config=None, *, background=False, **kw):
        manager = cls(log_dirs, config, clock=kw.pop("clock", clock), background=background, **kw)
        opened.append(manager)
        return manager
    yield make
    for manager in opened:
        manager.close()


def wait_until(predicate, timeout: float = 10, interval: float = 0.005) -> bool:
    """Polls `predicate` until it is true (True) or `timeout` seconds pass (False): a
    test waits for the state it needs, not for a guess at how long it takes."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
