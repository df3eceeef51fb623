"""A big log-dir move SIGKILLed at random points of its copy, twice, while records are
appended: at each reopen the move resumes from its future dir (the copy's verified
prefix kept), and at the end the partition is in the destination only, equal to what was
written (every acknowledged record there once, each value the one written at its offset),
and the resumed moves wrote less than the partition's size (a redo would copy all of it)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading

import pytest

import pylog

from .log_dir_move_resume_child import SEGMENT_BYTES, TOPIC, big_value
from .test_log_dir_moves import partition_dirs, wait_for

CHILD = os.path.join(os.path.dirname(__file__), "log_dir_move_resume_child.py")


def run_until_killed(dirs, kill_at: int) -> tuple[int, str, bool]:
    """Runs the child until its copy reaches chunk `kill_at` and a few appends more, then
    SIGKILLs it: (last acknowledged offset, source dir, whether a move was resuming)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, CHILD, *dirs, str(kill_at)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    acked, seen = [-1], {}
    opened, stopped = threading.Event(), threading.Event()

    def reader():
        for line in child.stdout:
            fields = line.split()
            if fields and fields[0] == "open":
                seen["source"], seen["resuming"] = fields[2], fields[3] == "1"
                opened.set()
            elif fields and fields[0] == "ack":
                acked[0] = int(fields[1])
            elif fields and fields[0] == "stage":
                stopped.set()
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        assert opened.wait(300), "the child did not open the store"
        assert stopped.wait(300), f"the copy did not reach chunk {kill_at}"
        mark = acked[0]
        wait_for(lambda: acked[0] > mark + 30, "appends while the copy waits")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        t.join(10)
        stderr = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
    assert "Traceback" not in stderr, stderr[-3000:]
    return acked[0], seen["source"], seen["resuming"]


def all_values(lg) -> list[bytes]:
    values, offset = [], lg.log_start_offset
    while offset < lg.log_end_offset:
        batch = list(lg.read(offset, 4 << 20).records())
        values += [r.value for r in batch]
        offset = batch[-1].offset + 1
    return values


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_big_move_killed_at_random_points_resumes_and_loses_nothing(tmp_path, seed):
    rng = random.Random(seed)
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    # 24 MiB in chunks of 256 KiB: the first pass has ~96 chunks, so the resumed one
    # has at least 16 left.
    first, second = rng.randint(5, 80), rng.randint(1, 12)
    acked, source, resuming = run_until_killed(dirs, first)
    assert not resuming
    acked2, source2, resuming = run_until_killed(dirs, second)
    assert resuming and source2 == source          # resumed, not yet swapped
    assert acked2 > acked
    dest = os.path.abspath(next(d for d in dirs if os.path.abspath(d) != source))
    with pylog.open(dirs, log_segment_bytes=SEGMENT_BYTES) as store:
        assert store.moving(TOPIC, 0) == dest      # the move goes on by itself
        size = store.log(TOPIC, 0).size
        wait_for(lambda: store.moving(TOPIC, 0) is None, "the resumed move", timeout=300)
        assert store.log_dir_of(TOPIC, 0) == dest
        stats = store.last_log_dir_move(TOPIC, 0)
        assert stats.kept > 0 and stats.copied < size, (stats, size)
        lg = store.log(TOPIC, 0)
        assert lg.log_end_offset > acked2
        values = all_values(lg)
        assert len(values) == lg.log_end_offset
        assert all(v == big_value(o) for o, v in enumerate(values))    # each once, intact
    assert partition_dirs(dirs, f"{TOPIC}-0") == [os.path.join(dest, f"{TOPIC}-0")]
