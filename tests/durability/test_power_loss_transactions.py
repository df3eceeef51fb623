"""Simulated power loss under transactions (issue 44: an answered commit survives).

EndTxn answers once the decision (PrepareCommit) is durable; the markers are flushed
after, and the id's Complete record (or any later record) is appended only once they
are (coordinator/transactions.py). txn_workload.py runs two transactional Producers
under the fault layer (faultfs.c) and is killed; the image of a power loss after each
of many journal entries is reopened (recovery writes the markers of prepared
transactions again) and read read_committed:

- every transaction whose commit_transaction returned before the crash point is
  visible, whole;
- no aborted transaction is ever visible, and no transaction is visible in part;
- no partition holds a transaction the coordinator does not know (open after the
  restart's aborts): AddPartitionsToTxn answers before its Ongoing record is durable,
  and the transaction's first append waits for it.

No torn writes here: the harness tears a file with a prefix of its *next* synced copy,
which may hold bytes written after the crash point (the journal has syncs, not
writes). That is harmless for one file's promises but not for an order between files
(a marker is appended only after the decision is durable): such an image holds a
marker written after the crash and none of the data its decision waited for, a state
no power loss can leave. Each image is every file's last synced copy.
"""

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time

import pytest

import pylog

from . import harness

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
CRASH_POINTS = 40


def read_committed(root: str) -> dict[tuple[str, int], int]:
    """(id, i) -> how many of its records a read_committed Consumer sees."""
    store = pylog.Store([os.path.join(root, "d")], {"pylog.io.engine": "portable"})
    try:
        if store.partition_count("tx") is None:
            return {}                   # a crash point before the topic was durable
        # What the restart's timer would do: open transactions aborted (the LSO moves on).
        store.transactions.abort_timed_out(now=1 << 62)
        for p in range(3):
            # Data of a transaction whose Ongoing record was lost would hang here: the
            # coordinator would not know to abort it (its first append waits for that
            # record's fsync, the AddPartitionsToTxn answer does not).
            lg = store.log("tx", p)
            assert lg.last_stable_offset == lg.high_watermark, \
                f"tx-{p}: a transaction open that the coordinator does not know " \
                f"(last stable offset {lg.last_stable_offset}, high watermark {lg.high_watermark})"
        consumer = pylog.Consumer(store, isolation_level="read_committed",
                                  auto_offset_reset="earliest")
        try:
            consumer.assign([("tx", p) for p in range(3)])
            seen: dict[tuple[str, int], int] = {}
            while True:
                got = consumer.poll(0.1)
                if not got:
                    return seen
                for r in got:
                    tid, i, _ = r.value.decode().rsplit("-", 2)
                    seen[(tid, int(i))] = seen.get((tid, int(i)), 0) + 1
        finally:
            consumer.close()
    finally:
        store.close()


def check(root: str, events: list[tuple[str, int, str, int]], upto: int | None) -> int:
    from txn_workload import RECORDS
    seen = read_committed(root)
    committed = {(tid, i) for kind, pos, tid, i in events
                 if kind == "commit" and (upto is None or pos <= upto)}
    aborted = {(tid, i) for kind, _, tid, i in events if kind == "abort"}
    lost = committed - set(seen)
    assert not lost, f"answered commits lost: {sorted(lost)}"
    assert not aborted & set(seen), f"aborted transactions visible: {sorted(aborted & set(seen))}"
    part = {t: n for t, n in seen.items() if n != RECORDS}
    assert not part, f"transactions visible in part: {part}"
    return len(committed)


def test_power_loss_never_loses_an_answered_commit(tmp_path, faultfs):
    sys.path.insert(0, HERE)
    root = str(tmp_path / "root")
    os.mkdir(root)
    journal_dir = str(tmp_path / "journal")
    os.mkdir(journal_dir)
    events_path = str(tmp_path / "events")
    env = dict(os.environ, LD_PRELOAD=faultfs, FAULTFS_JOURNAL=journal_dir, FAULTFS_ROOT=root)
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "txn_workload.py"), root,
                             events_path], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=HERE)
    try:
        assert select.select([proc.stdout], [], [], 120)[0], "workload not ready in 120 s"
        assert proc.stdout.readline() == b"ready\n", proc.stderr.read().decode()
        deadline = time.monotonic() + 120
        while harness.count_lines(events_path, b"commit ") < 60 or \
                harness.count_lines(os.path.join(journal_dir, "journal")) < CRASH_POINTS * 3:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the workload did not commit 60 in 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    events = []
    with open(events_path, encoding="ascii") as f:
        for line in f:
            kind, pos, tid, i = line.split()
            events.append((kind, int(pos), tid, int(i)))
    journal = harness.Journal(journal_dir)
    rng = random.Random(44)
    points = sorted(rng.sample(range(1, journal.last), CRASH_POINTS - 1)) + [journal.last]
    checked = 0
    for k in points:
        image = str(tmp_path / f"image-{k}")
        harness.power_loss_image(journal, harness.identity(root), k, image)
        try:
            checked += check(image, events, k)
        except AssertionError as exc:
            raise AssertionError(f"power loss after journal entry {k} (image kept at "
                                 f"{image}): {exc}") from exc
        shutil.rmtree(image)
    assert checked > 0, "no commit was answered before any crash point"
    # The files the kill itself left (page cache kept) keep every promise too.
    assert check(root, events, None) >= 60
