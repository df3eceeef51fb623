"""One writer per partition: a standalone Log locks its dir (issue 12, item 1).

Before the lock, two processes each appending 300 records to Log(same dir)
got 600 AppendInfos and 159 records survived a reopen; a Log opened on a
partition of a live LogManager overwrote the manager's acknowledged appends.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from pylog import records
from pylog.errors import LogDirLockedError
from pylog.storage import LogManager
from pylog.storage.log import Log

HOLDER = textwrap.dedent("""
    import sys
    from pylog import records
    from pylog.storage.log import Log
    log = Log(sys.argv[1])
    log.append(records.encode_batch([b"child"] * 300))
    print("ready", flush=True)
    sys.stdin.read()          # hold the log until the parent closes our stdin
    log.close()
""")


@pytest.fixture
def holder():
    """Starts a process that opens a Log on a dir and holds it; yields its pid."""
    procs = []

    def start(path):
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc
    yield start
    for proc in procs:
        proc.stdin.close()
        proc.wait(30)
        proc.stdout.close()


def test_a_second_writer_in_another_process_is_refused(log_dir, holder):
    child = holder(log_dir)
    with pytest.raises(LogDirLockedError, match=f"open for writing by pid {child.pid}"):
        Log(log_dir)
    child.stdin.close()
    assert child.wait(30) == 0
    with Log(log_dir) as log:             # released when the holder closed it
        assert log.log_end_offset == 300
        log.append(records.encode_batch([b"parent"]))
    with Log(log_dir) as log:
        assert log.log_end_offset == 301


def test_a_second_writer_in_this_process_is_refused(log_dir):
    first = Log(log_dir)
    with pytest.raises(LogDirLockedError, match=f"this process \\(pid {os.getpid()}\\)"):
        Log(log_dir)
    first.close()
    Log(log_dir).close()                  # close released it
    abandoned = Log(log_dir)
    abandoned.abandon()
    Log(log_dir).close()                  # abandon released it too


def test_a_killed_holder_releases_the_lock(log_dir, holder):
    child = holder(log_dir)
    child.kill()
    child.wait(30)
    with Log(log_dir) as log:             # the kernel dropped the lock
        assert log.log_end_offset == 300


def test_a_partition_of_a_live_log_manager_is_refused(tmp_path):
    manager = LogManager(str(tmp_path), background=False)
    try:
        manager.create_topic("t", 1)
        manager.log("t", 0).append(records.encode_batch([b"acked"] * 10))
        with pytest.raises(LogDirLockedError, match=f"which a LogManager holds .*pid {os.getpid()}"):
            Log(str(tmp_path / "t-0"))
        assert manager.log("t", 0).log_end_offset == 10
    finally:
        manager.close()
    with Log(str(tmp_path / "t-0")) as log:   # the manager is closed: now allowed
        assert log.log_end_offset == 10


def test_a_log_manager_is_refused_a_dir_with_an_open_standalone_log(tmp_path):
    LogManager(str(tmp_path), background=False).close()      # a log dir with its .lock
    log = Log(str(tmp_path / "t-0"))
    try:
        with pytest.raises(LogDirLockedError, match="standalone pylog.Log"):
            LogManager(str(tmp_path), background=False)
    finally:
        log.close()
