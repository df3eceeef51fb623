"""When Log.append's validation drops the GIL (pylog/_core/storage.pyx,
_gil_wanted_elsewhere): only when another Python thread exists to take it."""

import os
import subprocess
import sys
import threading
import time

from pylog._core.storage import LogFile, gil_wanted_elsewhere


def test_another_thread_wants_the_gil():
    parked = threading.Event()
    t = threading.Thread(target=parked.wait)
    t.start()
    try:
        assert gil_wanted_elsewhere()
    finally:
        parked.set()
        t.join()


def test_the_only_thread_keeps_it():
    code = ("import threading; from pylog._core.storage import LogFile, gil_wanted_elsewhere; "
            "assert threading.active_count() == 1; print(gil_wanted_elsewhere())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_truncation_lets_other_threads_run(tmp_path):
    """LogFile.truncate frees the cut pages (tens of ms for 256 MiB) without the
    GIL. With CPython's switch interval made huge, the other thread gets the GIL
    only when this one releases it, and between the two reads of its counter
    this thread releases it nowhere but inside truncate(): the counter moves
    only if the truncation ran without the GIL."""
    path = tmp_path / "00000000000000000000.log"
    block = b"\x01" * (1 << 20)
    with open(path, "wb") as f:
        for _ in range(256):
            f.write(block)
    lf = LogFile(str(path))
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1
            time.sleep(0)           # gives the GIL back each time round

    interval = sys.getswitchinterval()
    t = threading.Thread(target=spin)
    t.start()
    try:
        while counter[0] < 10:      # the spinner runs
            time.sleep(0.001)
        sys.setswitchinterval(1000.0)
        # The spinner takes the new interval when it next waits for the GIL, and
        # a drop it asked for under the old one is spent by the time this
        # thread has the GIL back.
        time.sleep(0.05)
        before = counter[0]
        lf.truncate(0)
        during = counter[0] - before
    finally:
        sys.setswitchinterval(interval)
        stop.set()
        t.join()
        lf.close()
    assert os.path.getsize(path) == 0
    assert during > 0
