"""Crash tests with real processes: SIGKILL a writer at random moments, reopen, verify.

Checks after every kill: every fsync-acknowledged record is present and
identical; every record returned is intact (CRC-checked by the reader) and
has the value its offset implies; the log ends on a batch boundary and takes
new appends. A SIGKILL loses no page-cache data, so this proves process-crash
consistency and recovery; power loss is covered by the torn-tail and
corruption tests (tests/storage/test_recovery.py), which cut real files.

PYLOG_CRASH_ROUNDS sets the number of rounds (default 20 per engine and I/O mode; the soak
script tools/crash-soak runs thousands). Each round's child is forked from one interpreter
that imported pylog once (crash_child.serve_forks), not started afresh: the import was most
of a round's time."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from pylog.storage.log import Log

from .crash_child import expected_value

# Every test runs with buffered and with O_DIRECT appends (pylog.io.direct); long ones
# are handed out first on the xdist workers (tests/conftest.py).
pytestmark = [pytest.mark.usefixtures("io_mode"), pytest.mark.slow]

CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")
ROUNDS = int(os.environ.get("PYLOG_CRASH_ROUNDS", "20"))


class Forks:
    """crash_child.py's fork server: one interpreter that has imported pylog, forking each
    round's child (its stdout and stderr go to a file the round reads)."""

    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self.server = subprocess.Popen([sys.executable, CHILD, "--forks"], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True, env=env)
        self.running: int | None = None

    def start(self, args: list[str], out: str) -> int:
        open(out, "w").close()                # empty until the child writes
        self.server.stdin.write(" ".join([*args, out]) + "\n")
        self.server.stdin.flush()
        self.running = int(self._reply("pid"))
        return self.running

    def status(self) -> int:
        status = int(self._reply("exit"))
        self.running = None
        return status

    def _reply(self, kind: str) -> str:
        line = self.server.stdout.readline()
        assert line.startswith(kind + " "), f"fork server said {line!r} (exit {self.server.poll()})"
        return line.split()[1]

    def close(self) -> None:
        if self.running is not None:          # a round failed before its kill
            os.kill(self.running, signal.SIGKILL)
            self.status()
        self.server.stdin.close()
        assert self.server.wait(30) == 0
        self.server.stdout.close()


def lines_of(path: str) -> list[str]:
    with open(path) as f:
        return [line for line in f.read().splitlines(keepends=True) if line.endswith("\n")]


def run_round(forks, log_dir, engine_kind, rng, out):
    flush_messages = rng.choice([1, 10, 100, 1000])
    pid = forks.start([log_dir, engine_kind, str(flush_messages), str(rng.randrange(1 << 30))], out)
    deadline = time.monotonic() + 30
    while not any(line.startswith("open ") for line in lines_of(out)):
        assert time.monotonic() < deadline, f"the child did not open the log: {lines_of(out)}"
        time.sleep(0.005)
    time.sleep(rng.uniform(0.0, 0.25))          # a random moment: not a synchronisation
    os.kill(pid, signal.SIGKILL)
    status = forks.status()
    output = lines_of(out)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (status, output)
    acks = [int(line.split()[1]) for line in output if line.startswith("ack ")]
    return acks[-1] if acks else -1


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
    forks = Forks()
    try:
        for _ in range(ROUNDS):
            acked = run_round(forks, log_dir, engine_kind, rng, str(tmp_path / "child.out"))
            end = verify(log_dir, engine_kind, acked, end + 1)   # verify appended one record
            total_acked = max(total_acked, acked)
    finally:
        forks.close()
    assert total_acked > 0        # the rounds did acknowledge data
    assert end > 1000
