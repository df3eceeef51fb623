"""FastLock (the Producer's lock, taken from C once per send()) keeps
threading.Lock's Python API, so threading.Condition and `with` work on it."""

import asyncio
import concurrent.futures
import threading
import time

import pytest

from pylog import Producer
from pylog._core.producer import FastLock


def test_acquire_release_and_locked():
    """acquire() takes a free lock; a second non-blocking acquire fails."""
    lock = FastLock()
    assert lock.locked() is False
    assert lock.acquire() is True
    assert lock.locked() is True
    assert lock.acquire(False) is False
    lock.release()
    assert lock.locked() is False


def test_release_of_an_unlocked_lock_raises():
    """As threading.Lock: releasing a free lock is a RuntimeError."""
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        FastLock().release()


def test_timeout_returns_false_after_the_timeout():
    """acquire(timeout=t) on a lock held elsewhere gives up after about t seconds."""
    lock = FastLock()
    lock.acquire()
    started = time.monotonic()
    assert lock.acquire(timeout=0.05) is False
    assert time.monotonic() - started >= 0.04
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(False, 1.0)


def test_a_waiter_gets_the_lock_when_it_is_released():
    """A thread blocked in acquire() (GIL released) proceeds once another releases."""
    lock = FastLock()
    lock.acquire()
    got = threading.Event()

    def waiter():
        with lock:
            got.set()

    t = threading.Thread(target=waiter)
    t.start()
    assert not got.wait(0.05)
    lock.release()
    assert got.wait(5)
    t.join()


def test_mutual_exclusion_under_contention():
    """Four threads incrementing under the lock lose no update."""
    lock = FastLock()
    count = [0]

    def work():
        for _ in range(20_000):
            with lock:
                count[0] += 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count[0] == 80_000


def test_condition_wait_and_notify():
    """threading.Condition over a FastLock waits and wakes as over a Lock."""
    cond = threading.Condition(FastLock())
    ready = []

    def producer():
        time.sleep(0.02)
        with cond:
            ready.append(1)
            cond.notify()

    threading.Thread(target=producer).start()
    with cond:
        assert cond.wait_for(lambda: ready, timeout=5)
        assert cond.wait(0.01) is False          # a timed wait without notify


def test_record_futures_work_with_asyncio(store):
    """send()'s futures are concurrent.futures.Future instances: asyncio.wrap_future
    (which checks isinstance) awaits them."""
    store.create_topic("aio", 1)
    with Producer(store) as producer:
        future = producer.send("aio", b"v", key=b"k")
        assert isinstance(future, concurrent.futures.Future)

        async def main():
            return await asyncio.wrap_future(future)

        metadata = asyncio.run(main())
    assert (metadata.topic, metadata.partition, metadata.offset) == ("aio", 0, 0)
    assert metadata.serialized_key_size == 1 and metadata.serialized_value_size == 1


def test_another_thread_may_release_it():
    """As threading.Lock (and unlike a pthread mutex), the lock is not owned: a
    thread other than the taker may release it, and a waiter then proceeds."""
    lock = FastLock()
    lock.acquire()
    released = threading.Thread(target=lock.release)
    released.start()
    released.join()
    assert lock.locked() is False
    assert lock.acquire(timeout=1) is True


def test_every_waiter_gets_its_turn():
    """Eight threads blocked at once each get the lock in turn (one give wakes one
    waiter, and the word stays marked contended while any may wait)."""
    lock = FastLock()
    lock.acquire()
    done = []

    def waiter(i):
        with lock:
            done.append(i)
            time.sleep(0.001)

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.05)                    # let them all block
    lock.release()
    for t in threads:
        t.join(10)
    assert sorted(done) == list(range(8))
    assert lock.locked() is False


def test_ctrl_c_interrupts_a_blocked_acquire():
    """A signal whose handler raises (SIGINT: KeyboardInterrupt) reaches a thread
    blocked in acquire(); the lock stays with its holder."""
    import signal
    lock = FastLock()
    lock.acquire()
    main = threading.main_thread().ident
    timer = threading.Timer(0.05, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lock.acquire(timeout=5)
    finally:
        timer.join()
    assert lock.locked() is True
    lock.release()


def test_the_longest_timeout_and_pickling_behave_as_threading_lock():
    """acquire(timeout=threading.TIMEOUT_MAX) on a held lock waits for its release
    (its deadline does not overflow into "already passed"), and a lock cannot be
    pickled."""
    import pickle
    lock = FastLock()
    lock.acquire()
    timer = threading.Timer(0.05, lock.release)
    timer.start()
    assert lock.acquire(timeout=threading.TIMEOUT_MAX) is True
    timer.join()
    lock.release()
    with pytest.raises(TypeError):
        pickle.dumps(lock)
