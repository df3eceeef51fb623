"""Crash tests with real processes: SIGKILL a writer at random moments, reopen, verify.

Checks after every kill: every fsync-acknowledged record is present and
identical; every record returned is intact (CRC-checked by the reader) and
has the value its offset implies; the log ends on a batch boundary and takes
new appends. A SIGKILL loses no page-cache data, so this proves process-crash
consistency and recovery; power loss is covered by the torn-tail and
corruption tests (tests/storage/test_recovery.py), which cut real files.

PYLOG_CRASH_ROUNDS sets the number of rounds (default 20 per engine and I/O mode: each
round starts a Python child, so they are most of this file's time; the soak script
tools/crash-soak runs thousands)."""

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from pylog.storage.log import Log

from .crash_child import expected_value

# Every test runs with buffered and with O_DIRECT appends (pylog.io.direct); long ones
# are handed out first on the xdist workers (tests/conftest.py).
pytestmark = [pytest.mark.usefixtures("io_mode"), pytest.mark.slow]

CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")
ROUNDS = int(os.environ.get("PYLOG_CRASH_ROUNDS", "20"))


def run_round(log_dir, engine_kind, rng):
    flush_messages = rng.choice([1, 10, 100, 1000])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, CHILD, log_dir, engine_kind, str(flush_messages),
                              str(rng.randrange(1 << 30))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    acked = [-1]
    opened = threading.Event()

    def reader():
        for line in child.stdout:
            kind, value = line.split()[:2]
            if kind == "open":
                opened.set()
            elif kind == "ack":
                acked[0] = int(value)
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    assert opened.wait(30), child.stderr.read() if child.poll() is not None else "child did not open"
    time.sleep(rng.uniform(0.0, 0.25))
    child.send_signal(signal.SIGKILL)
    child.wait()
    t.join(10)
    stderr = child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    assert child.returncode == -signal.SIGKILL, stderr
    return acked[0]


def verify(log_dir, engine_kind, last_acked, previous_end=0):
    with Log(log_dir, {"pylog.io.engine": engine_kind, "segment.bytes": 256 * 1024}) as log:
        end = log.log_end_offset
        # The child's first append marks the state unclean before it writes: a clean
        # state means it was killed before that, having written nothing.
        assert not log.recovery.clean_shutdown or end == previous_end
        assert end > last_acked, f"acknowledged offset {last_acked} lost (log end {end})"
        offset = 0
        while offset < end:
            batch_slice = log.read(offset, 1 << 20)
            for batch in batch_slice.batches():          # CRC-validated
                for record in batch.records():
                    assert record.offset == offset, (record.offset, offset)
                    assert record.value == expected_value(offset)
                    offset += 1
        assert offset == end
        # The end is a batch boundary: a new append starts right there.
        assert log.append_records([expected_value(end)]).first_offset == end
    return end


def test_sigkill_never_loses_acknowledged_records(tmp_path, engine_kind):
    log_dir = str(tmp_path / "crash-0")
    rng = random.Random(int(os.environ.get("PYLOG_CRASH_SEED", "20261123")))
    total_acked = 0
    end = -1
    for _ in range(ROUNDS):
        acked = run_round(log_dir, engine_kind, rng)
        end = verify(log_dir, engine_kind, acked, end + 1)   # verify appended one record
        total_acked = max(total_acked, acked)
    assert total_acked > 0        # the rounds did acknowledge data
    assert end > 1000
