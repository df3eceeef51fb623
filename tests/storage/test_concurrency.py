"""Readers racing a writer that appends, rolls and deletes segments.

Readers never block on the writer and never see a missing file or a torn
batch: every read either returns intact whole batches or raises
OffsetOutOfRangeError because retention moved the log start past it."""

import random
import threading

import pytest

from pylog import records
from pylog.errors import OffsetOutOfRangeError
from pylog.storage.log import Log
from pylog.storage.scheduler import Scheduler

# Every test runs with buffered and with O_DIRECT appends (pylog.io.direct).
pytestmark = pytest.mark.usefixtures("io_mode")


class ImmediateScheduler(Scheduler):
    """Runs delayed work at once: .deleted files vanish while readers hold them."""

    def schedule(self, delay, fn):
        fn()


def value_for(offset):
    return b"%d|" % offset * 4


def test_readers_race_appends_rolls_and_deletes(log_dir, engine_kind):
    log = Log(log_dir, {"pylog.io.engine": engine_kind, "segment.bytes": 16 * 1024,
                        "index.interval.bytes": 512}, scheduler=ImmediateScheduler())
    stop = threading.Event()
    errors = []
    reads = [0]

    def writer():
        try:
            for i in range(1500):
                start = log.log_end_offset
                log.append(records.encode_batch([value_for(o) for o in range(start, start + 10)]))
                if i % 50 == 49 and len(log.segments) > 3:
                    log.delete_segments_before(log.segments[-3].base_offset)
        except BaseException as exc:       # noqa: BLE001 - reported to the main thread
            errors.append(exc)
        finally:
            stop.set()

    def reader(seed):
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                start, end = log.log_start_offset, log.log_end_offset
                if end == start:
                    continue
                offset = rng.randrange(start, end)
                try:
                    got = log.read(offset, rng.choice([1, 4096, 1 << 20]))
                except OffsetOutOfRangeError:
                    assert offset < log.log_start_offset
                    continue
                batch_records = list(got.records())
                assert batch_records and batch_records[0].offset <= offset
                for r in batch_records:
                    assert r.value == value_for(r.offset)
                reads[0] += 1
        except BaseException as exc:       # noqa: BLE001
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(s,))
                                                   for s in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    log.close()
    assert not errors, errors[0]
    assert reads[0] > 100


@pytest.mark.parametrize("delete", ["apply_retention", "advance_log_start_offset",
                                    "delete_segments_before"])
def test_segment_deletion_waits_for_a_flush_in_progress(tmp_path, delete):
    """Found by a flaky client test: a background flush took its segments, retention
    (another thread) deleted one meanwhile, and syncing its index (no descriptor
    left, so synced by path) failed with ENOENT and took the whole log dir
    offline. Deletions now wait for a flush in progress (the Log's flush lock)."""
    log = Log(str(tmp_path / "r-0"), {"segment.bytes": 2000, "retention.bytes": 1},
              scheduler=Scheduler())
    try:
        for _ in range(10):
            log.append(records.encode_batch([b"x" * 100] * 5))
        end = log.log_end_offset
        calls = {"apply_retention": lambda: log.apply_retention(),
                 "advance_log_start_offset": lambda: log.advance_log_start_offset(end),
                 "delete_segments_before": lambda: log.delete_segments_before(end)}
        done = threading.Event()
        with log._flush_lock:                     # a flush is running
            deleter = threading.Thread(target=lambda: (calls[delete](), done.set()))
            deleter.start()
            assert not done.wait(0.3), "segments were deleted under a running flush"
        assert done.wait(10)
        deleter.join()
        assert len(log.segments) == 1
    finally:
        log.close()
