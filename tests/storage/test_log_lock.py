"""LogLock (the Log's append lock, taken from C by every Log.append) keeps
threading.RLock's Python API and semantics: reentrant for its holder, released
only by its holder, waiters wait (GIL released) and time out."""

import threading
import time

import pytest
from log_support import wait_until

import pylog
from pylog._core.storage import LogLock
from pylog.record import encode_batch


def test_reentrant_for_its_holder_and_free_after_the_last_release():
    lock = LogLock()
    assert lock.acquire() is True
    assert lock.acquire() is True                      # the holder again: nested
    with lock:
        assert lock._is_owned()
    lock.release()
    assert lock._is_owned()                            # one level still held
    other = []
    t = threading.Thread(target=lambda: other.append(lock.acquire(False)))
    t.start()
    t.join()
    assert other == [False]                            # another thread cannot take it
    lock.release()
    assert not lock._is_owned()
    t = threading.Thread(target=lambda: other.append(lock.acquire(False)) or lock.release())
    t.start()
    t.join()
    assert other == [False, True]


def test_only_the_holder_releases():
    lock = LogLock()
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()
    lock.acquire()
    errors = []

    def intruder():
        try:
            lock.release()
        except RuntimeError as exc:
            errors.append(str(exc))
    t = threading.Thread(target=intruder)
    t.start()
    t.join()
    assert errors == ["cannot release un-acquired lock"]
    assert lock._is_owned()
    lock.release()


def test_a_waiter_times_out_then_gets_it_when_released():
    lock = LogLock()
    lock.acquire()
    result = {}

    def waiter():
        started = time.monotonic()
        result["timed_out"] = lock.acquire(timeout=0.05) is False
        result["waited"] = time.monotonic() - started
        result["got"] = lock.acquire()                 # blocks until released below
        lock.release()
    t = threading.Thread(target=waiter)
    t.start()
    assert wait_until(lambda: "timed_out" in result)       # then it blocks until released
    assert result["timed_out"] and result["waited"] >= 0.04 and "got" not in result
    lock.release()
    t.join(5)
    assert result["got"] is True and not t.is_alive()
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(False, 1.0)
    with pytest.raises(ValueError, match="non-negative"):
        lock.acquire(True, -2)


def test_threads_appending_to_one_log_keep_offsets_dense(tmp_path):
    """Four threads appending to one Log (its lock taken in C) and a fifth taking
    the lock from Python meanwhile: every batch is whole and offsets are dense."""
    log = pylog.Log(str(tmp_path / "t-0"))
    batches = [encode_batch([b"%d-%d" % (t, i) for i in range(10)]) for t in range(4)]
    stop = threading.Event()
    infos = [[] for _ in range(4)]

    def appender(t):
        for _ in range(300):
            infos[t].append(log.append(batches[t]))

    def holder():
        while not stop.is_set():
            with log._lock:
                with log._lock:                        # reentrant, as the Log's own code is
                    time.sleep(0.0001)
    threads = [threading.Thread(target=appender, args=(t,)) for t in range(4)]
    h = threading.Thread(target=holder)
    h.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    h.join()
    firsts = sorted(info.first_offset for per in infos for info in per)
    assert firsts == list(range(0, 4 * 300 * 10, 10))
    assert log.log_end_offset == 12_000
    log.close()
