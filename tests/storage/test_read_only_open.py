"""Reading writes nothing: a pylog.Log opened and closed without a write leaves its
partition dir and the dir above it exactly as it found them (issue 42, item 16).

Before, a Log that only read added ``.lock`` and ``pylog-log-state`` to the dir,
rewrote its producer snapshot and trimmed, re-grew and re-trimmed its indexes (new
mtimes); after an unclean shutdown it rewrote the indexes of every segment above
the recovery point even when none was damaged. Every test compares a full listing
(name, kind, inode, size, mtime, SHA-256) taken after setting every mtime to a
fixed past time, so that a rewrite with the same bytes is seen too.
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from dir_listing import age, changes, listing
from txn_support import TxnProducer

from pylog import records
from pylog.errors import CorruptRecordError, LogDirLockedError
from pylog.storage.log import Log

from .crash_child import expected_value

CONFIG = {"segment.bytes": 16 * 1024, "index.interval.bytes": 512}
CRASH_CHILD = os.path.join(os.path.dirname(__file__), "crash_child.py")


def write_records(path, start: int, count: int, **config) -> None:
    """Appends records `start`..`start + count - 1` (values by expected_value), an
    idempotent producer's batch among them (so the dir has producer snapshots)."""
    with Log(path, {**CONFIG, **config}) as log:
        assert log.log_end_offset == start
        for offset in range(start, start + count, 10):
            values = [expected_value(o) for o in range(offset, min(offset + 10, start + count))]
            log.append(records.encode_batch(values, producer_id=7, producer_epoch=0,
                                            base_sequence=offset))


def read_everything(log) -> list[bytes]:
    values = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        chunk = log.read(offset, 4096)
        got = [(r.offset, r.value) for b in chunk.batches() for r in b.records()]
        values += [v for o, v in got if o >= offset]
        offset = got[-1][0] + 1
    for timestamp in (-1, -2, -3, 0):
        log.offset_for_timestamp(timestamp)
    return values


def test_a_clean_pylog_dir_opened_and_closed_changes_nothing(tmp_path):
    path = str(tmp_path / "events-0")
    write_records(path, 0, 1500)
    before = age(tmp_path)
    assert not any(name.endswith(".lock") for name in before)
    with Log(path, CONFIG) as log:
        assert log.recovery.clean_shutdown and len(log.segments) >= 3
        assert read_everything(log) == [expected_value(o) for o in range(1500)]
        with pytest.raises(CorruptRecordError):           # a bad append writes nothing
            log.append(b"\0" * 61)
        log.flush()
        assert changes(before, listing(tmp_path)) == []   # not even while open
    assert changes(before, listing(tmp_path)) == []
    # The same Log is a writer as soon as it writes, and appends to the last segment.
    with Log(path, CONFIG) as log:
        segments = len(log.segments)
        log.append(records.encode_batch([expected_value(1500)]))
        assert len(log.segments) == segments
    with Log(path, CONFIG) as log:
        assert log.recovery.clean_shutdown
        assert read_everything(log) == [expected_value(o) for o in range(1501)]


def test_a_dir_without_a_state_file_is_validated_and_left_as_it_is(tmp_path):
    """A dir Kafka wrote has no pylog-log-state: recovery must assume a crash and
    validates every segment, which, when nothing is damaged, changes nothing."""
    path = str(tmp_path / "events-0")
    write_records(path, 0, 1500)
    os.remove(os.path.join(path, "pylog-log-state"))
    before = age(tmp_path)
    for _ in range(2):
        with Log(path, CONFIG) as log:
            assert not log.recovery.clean_shutdown
            assert len(log.recovery.segments_recovered) == len(log.segments) >= 3
            assert log.recovery.bytes_truncated == 0
            assert read_everything(log) == [expected_value(o) for o in range(1500)]
        assert changes(before, listing(tmp_path)) == []


def test_a_dir_with_aborted_transactions_is_checked_and_left_as_it_is(tmp_path):
    """Without a state file every segment may hold unflushed data, so its .txnindex is
    checked against the abort markers the replay meets: when it holds exactly their
    entries nothing is rewritten; one missing an entry is rebuilt (a write, marked)."""
    path = str(tmp_path / "events-0")
    with Log(path, CONFIG) as log:
        for t in range(12):
            producer = TxnProducer(log, pid=40 + t % 3)
            producer.seq = (t // 3) * 50
            producer.send([b"txn %d record %d" % (t, i) + b"x" * 200 for i in range(50)])
            producer.end(committed=t % 2 == 0)
        assert len(log.segments) >= 3
        aborted = log.aborted_transactions(0, log.log_end_offset)
        assert len(aborted) == 6
    os.remove(os.path.join(path, "pylog-log-state"))
    before = age(tmp_path)
    txnindexes = sorted(n for n in before if n.endswith(".txnindex"))
    assert len(txnindexes) >= 2
    with Log(path, CONFIG) as log:
        assert not log.recovery.clean_shutdown
        assert log.aborted_transactions(0, log.log_end_offset) == aborted
    assert changes(before, listing(tmp_path)) == []
    os.truncate(os.path.join(tmp_path, txnindexes[0]), 0)     # an entry lost
    with Log(path, CONFIG) as log:
        assert log.aborted_transactions(0, log.log_end_offset) == aborted
    assert os.path.getsize(os.path.join(tmp_path, txnindexes[0])) > 0


def test_a_torn_tail_is_repaired_and_marked_first(tmp_path):
    """Damage is repaired at open (a write): the state is marked unclean before the
    first change and clean at the close."""
    path = str(tmp_path / "events-0")
    write_records(path, 0, 100)
    os.remove(os.path.join(path, "pylog-log-state"))
    last = sorted(n for n in os.listdir(path) if n.endswith(".log"))[-1]
    with open(os.path.join(path, last), "ab") as f:
        f.write(b"\0\0\0\0\0\0\0\x63\0\0\0\x40torn")         # half a batch header
    with Log(path, CONFIG) as log:
        assert log.recovery.bytes_truncated == 16
        with open(os.path.join(path, "pylog-log-state")) as f:
            assert "clean-shutdown 0" in f.read()
        assert read_everything(log) == [expected_value(o) for o in range(100)]
    with open(os.path.join(path, "pylog-log-state")) as f:
        assert "clean-shutdown 1" in f.read()


def test_a_state_file_write_cut_short_is_removed_at_open(tmp_path):
    """A writer killed while writing its state leaves ``pylog-log-state.tmp``: removing
    it is a change, marked first by writing the state (through that same .tmp name)."""
    path = str(tmp_path / "events-0")
    write_records(path, 0, 100)
    with open(os.path.join(path, "pylog-log-state.tmp"), "w") as f:
        f.write("recovery-po")
    with Log(path, CONFIG) as log:
        assert read_everything(log) == [expected_value(o) for o in range(100)]
        assert "pylog-log-state.tmp" not in os.listdir(path)
    with Log(path, CONFIG) as log:
        assert log.recovery.clean_shutdown


def test_a_dir_a_killed_writer_left_intact_is_validated_not_rewritten(tmp_path, engine_kind):
    """After a SIGKILL between appends the state says unclean and the active segment's
    indexes are still preallocated: a Log that reads validates it and changes nothing,
    and the next open still knows it must validate."""
    path = str(tmp_path / "events-0")
    write_records(path, 0, 100)
    acked = run_and_kill(path, engine_kind, acks=20)
    before = age(tmp_path)
    for _ in range(2):
        with Log(path, CONFIG) as log:
            assert not log.recovery.clean_shutdown
            end = log.log_end_offset
            assert end > acked
            assert read_everything(log) == [expected_value(o) for o in range(end)]
        assert changes(before, listing(tmp_path)) == []


def run_and_kill(path, engine_kind, acks: int) -> int:
    """tests/storage/crash_child.py on `path` (fsync'ed appends, flush.messages 1)
    until it acknowledged `acks` appends, then SIGKILL; returns the last acked offset."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, CRASH_CHILD, path, engine_kind, "1", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    last, seen = -1, 0
    try:
        for line in child.stdout:
            kind, value = line.split()[:2]
            if kind == "ack":
                last, seen = int(value), seen + 1
                if seen == acks:
                    break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        stderr = child.stderr.read()
        child.stdout.close()
        child.stderr.close()
    assert seen == acks, stderr
    return last


@pytest.mark.parametrize("state_file", [True, False], ids=["after-clean-close", "no-state-file"])
def test_a_log_that_writes_after_a_read_only_open_recovers_from_sigkill(tmp_path, engine_kind,
                                                                       state_file):
    """The first append marks the dir unclean before it writes: a writer killed after
    it is recovered at the next open (no acknowledged record lost, a new append
    lands at the end)."""
    path = str(tmp_path / "events-0")
    write_records(path, 0, 100)
    if not state_file:
        os.remove(os.path.join(path, "pylog-log-state"))
    with Log(path, CONFIG) as log:               # a read-only open first: writes nothing
        read_everything(log)
    assert os.path.exists(os.path.join(path, "pylog-log-state")) == state_file
    acked = run_and_kill(path, engine_kind, acks=30)
    with open(os.path.join(path, "pylog-log-state")) as f:
        assert "clean-shutdown 0" in f.read()
    with Log(path, {**CONFIG, "pylog.io.engine": engine_kind}) as log:
        assert not log.recovery.clean_shutdown
        end = log.log_end_offset
        assert end > acked >= 100
        assert read_everything(log) == [expected_value(o) for o in range(end)]
        assert log.append_records([expected_value(end)]).first_offset == end
    with Log(path, CONFIG) as log:
        assert log.recovery.clean_shutdown and log.log_end_offset == end + 1


OPENER = textwrap.dedent("""
    import sys
    from pylog.errors import LogDirLockedError
    from pylog.storage.log import Log
    try:
        Log(sys.argv[1]).close()
    except LogDirLockedError as exc:
        print(exc)
""")


def test_two_logs_on_one_dir_are_refused_without_a_lock_file(tmp_path):
    """The lock is a flock on the partition dir itself: no file is created for it, and
    the holder is still named, in this process and from another."""
    path = str(tmp_path / "events-0")
    write_records(path, 0, 10)
    before = age(tmp_path)
    first = Log(path)
    try:
        with pytest.raises(LogDirLockedError,
                           match=f"open for writing by this process \\(pid {os.getpid()}\\)"):
            Log(path)
        other = subprocess.run([sys.executable, "-c", OPENER, path], capture_output=True,
                               text=True, timeout=60,
                               env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        assert f"open for writing by pid {os.getpid()}" in other.stdout, other.stderr
        assert changes(before, listing(tmp_path)) == []
    finally:
        first.close()
    assert changes(before, listing(tmp_path)) == []
    Log(path).close()                             # released
