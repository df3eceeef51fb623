"""When Log.append's validation drops the GIL (pylog/_core/storage.pyx,
_gil_wanted_elsewhere): only when another Python thread exists to take it."""

import subprocess
import sys
import threading

from pylog._core.storage import gil_wanted_elsewhere


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
    code = ("import threading; from pylog._core.storage import gil_wanted_elsewhere; "
            "assert threading.active_count() == 1; print(gil_wanted_elsewhere())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
